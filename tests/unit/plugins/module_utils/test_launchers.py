"""Each launcher's command, the hostfile, the rank manifest and the variables every launcher's ranks see.

The deepspeed and horovodrun commands are checked here as rendered text only: DeepSpeed and Horovod are not
installed in this environment's test cluster (see the README's launcher section).
"""

import json
import os
import subprocess

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import launchers
from ansible_collections.gpufleet.cluster.plugins.module_utils._job.job_spec import JobSpec
from ansible_collections.gpufleet.cluster.plugins.module_utils._job.launch_script import (
    job_environment,
    render_env_file,
    render_launch_script,
)

NODES = (("gpu-a", "192.0.2.10"), ("gpu-b", "192.0.2.11"), ("gpu-c", "192.0.2.12"))


def spec(rank=1, launcher="torchrun", **over):
    values = dict(job="llm", node_rank=rank, nnodes=3, nproc_per_node=2, world_size=6, master_addr="192.0.2.10",
                  master_port=29511, python="/opt/venv/bin/python", script="train.py", workdir="/w",
                  script_args=("--epochs", "2"), nodes=NODES, slots=(2, 2, 2), launcher=launcher)
    values.update(over)
    return JobSpec(**values)


def test_hostfile_lists_every_node_with_its_slots_in_rank_order():
    assert launchers.hostfile_text(spec(slots=(8, 8, 4))) == (
        "192.0.2.10 slots=8\n192.0.2.11 slots=8\n192.0.2.12 slots=4\n")


def test_rank_manifest_is_the_same_on_every_node_and_for_every_launch():
    texts = {launchers.manifest_text(spec(rank=r, master_port=p)) for r in range(3) for p in (29511, 29700)}
    assert len(texts) == 1
    data = json.loads(texts.pop())
    assert data["world_size"] == 6
    assert [(n["host"], n["node_rank"], n["ranks"], n["gpus"]) for n in data["nodes"]] == [
        ("gpu-a", 0, [0, 1], 2), ("gpu-b", 1, [2, 3], 2), ("gpu-c", 2, [4, 5], 2)]


def test_contract_variables():
    env = launchers.contract_env(spec(rank=2), "/jobs/llm")
    assert env == {
        "MASTER_ADDR": "192.0.2.10", "MASTER_PORT": "29511", "WORLD_SIZE": "6", "NODE_RANK": "2", "NNODES": "3",
        "MLP_WORKER_NUM": "3", "MLP_WORKER_GPU": "2", "MLP_ROLE_INDEX": "2", "MLP_WORKER_0_HOST": "192.0.2.10", "PYTHONUNBUFFERED": "1",
        "MLP_WORKER_0_PORT": "29511", "MLP_WORKER_ALL_HOSTS": "192.0.2.10,192.0.2.11,192.0.2.12",
        "MLP_MPI_HOSTS": "192.0.2.10:2,192.0.2.11:2,192.0.2.12:2", "MLP_MPI_HOSTFILE": "/jobs/llm/hostfile",
        "MLP_MPI_NP": "6", "GPUFLEET_CHECKPOINT_DIR": "/jobs/llm/checkpoints"}


def test_the_users_variables_win_over_the_contract():
    env = job_environment(spec(env=(("MASTER_ADDR", "10.9.9.9"), ("GPUFLEET_CHECKPOINT_DIR", "/shared/llm"))),
                          "/jobs/llm")
    assert env["MASTER_ADDR"] == "10.9.9.9" and env["MLP_MPI_NP"] == "6"
    assert env["GPUFLEET_CHECKPOINT_DIR"] == "/shared/llm"  # shared storage, named by the job


def test_torchrun_and_deepspeed_run_on_every_node_with_its_rank():
    torchrun = launchers.command(spec(rank=1), "/jobs/llm", [])
    assert "--node-rank=1" in torchrun and "--master-port=@MASTER_PORT@" in torchrun
    deepspeed = launchers.command(spec(rank=2, launcher="deepspeed"), "/jobs/llm", [])
    assert deepspeed == ["/opt/venv/bin/python", "-m", "deepspeed.launcher.runner", "--hostfile=/jobs/llm/hostfile",
                         "--no_ssh", "--node_rank=2", "--master_addr=192.0.2.10", "--master_port=@MASTER_PORT@",
                         "--enable_each_rank_log=/jobs/llm/rank_output", "train.py", "--epochs", "2"]


def test_each_rank_s_lines_are_tagged_where_the_launcher_can_tag_them():
    """torchrun tees each worker's output into the node's log with the prefix torch_prelude sets; mpirun tags with
    its own --tag-output. deepspeed's launcher can only send a rank's output to a file of its own (its
    --enable_each_rank_log), into the job folder's rank_output/, which the supervisor copies into the node's log
    tagged (test_rank_output.py)."""
    torchrun = launchers.command(spec(rank=1), "/jobs/llm", [])
    assert torchrun[torchrun.index("--log-dir=/jobs/llm/torchelastic") + 1] == "--tee=3"
    assert "--tee=3" not in launchers.torchrun_command(spec(rank=1))  # exported commands print as torchrun does
    assert "--tag-output" in launchers.command(spec(rank=0, launcher="mpirun"), "/jobs/llm", [])
    assert "--enable_each_rank_log=/jobs/llm/rank_output" in launchers.command(spec(rank=0, launcher="deepspeed"),
                                                                              "/jobs/llm", [])


def run_prelude(launcher, job_dir, env):
    shown = "TORCH_FR_BUFFER_SIZE TORCH_NCCL_DUMP_ON_TIMEOUT TORCH_FR_DUMP_TEMP_FILE TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"
    script = launchers.torch_prelude(launcher, str(job_dir)) + 'for n in %s; do echo "$n=${!n:-}"; done\n' % shown
    done = subprocess.run(["bash", "-c", script], env=dict(env, PATH=os.environ["PATH"]), capture_output=True,
                          text=True, check=True)
    return dict(line.split("=", 1) for line in done.stdout.splitlines())


def test_the_flight_recorder_and_the_line_tags_are_set_unless_the_job_set_them(tmp_path):
    dump = "%s/flight_recorder/rank_" % (tmp_path / "j")
    found = run_prelude("torchrun", tmp_path / "j", {})
    assert found == {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_FR_DUMP_TEMP_FILE": dump,
                     "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}|${local_rank}]: "}
    assert (tmp_path / "j" / "flight_recorder").is_dir()
    # The job's env (or an environment file, sourced before) wins, one variable at a time.
    mine = {"TORCH_FR_BUFFER_SIZE": "20000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "0",
            "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "${rank}> "}
    assert run_prelude("torchrun", tmp_path / "j", mine) == dict(mine, TORCH_FR_DUMP_TEMP_FILE=dump)
    # So does a variable's older name, which older torch reads: then the newer is not set either.
    older = run_prelude("torchrun", tmp_path / "j", {"TORCH_NCCL_TRACE_BUFFER_SIZE": "500",
                                                     "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/scratch/fr_"})
    assert older["TORCH_FR_BUFFER_SIZE"] == "" and older["TORCH_FR_DUMP_TEMP_FILE"] == ""
    assert run_prelude("mpirun", tmp_path / "j", {})["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == ""
    assert {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_FR_DUMP_TEMP_FILE"} <= set(
        launchers.exported_names({}))  # mpirun passes them to the ranks on the other nodes


@pytest.mark.parametrize("launcher", ["mpirun", "horovodrun"])
def test_single_entry_launchers_run_on_node_0_only(launcher):
    assert launchers.command(spec(rank=1, launcher=launcher), "/jobs/llm", []) is None
    entry = launchers.command(spec(rank=0, launcher=launcher), "/jobs/llm", ["MASTER_ADDR", "NCCL_DEBUG"])
    assert entry[0] == launcher and "6" in entry
    assert entry[-3:] == ["/opt/venv/bin/python", "train.py", "--epochs", "2"][-3:]
    if launcher == "mpirun":
        assert entry[entry.index("--hostfile") + 1] == "/jobs/llm/hostfile"
        assert ["-x", "MASTER_ADDR"] == entry[entry.index("MASTER_ADDR") - 1:entry.index("MASTER_ADDR") + 1]
    else:
        assert entry[entry.index("-H") + 1] == "192.0.2.10:2,192.0.2.11:2,192.0.2.12:2"


def test_mpi_interface_restriction_comes_from_the_nccl_env_choice(tmp_path):
    rendered = render_launch_script(spec(rank=0, launcher="mpirun"), str(tmp_path / "env"))
    # Open MPI and Horovod take plain names: the "=" NCCL reads as "exactly this name" is left out.
    for launcher, expected in (("mpirun", "--mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0"),
                               ("horovodrun", "--network-interface eth0")):
        shown = subprocess.run(["bash", "-c", launchers.iface_prelude(launcher) + 'printf %s "$GPUFLEET_IFACE_OPTS"'],
                               env={"NCCL_SOCKET_IFNAME": "=eth0", "PATH": "/usr/bin:/bin"}, capture_output=True,
                               text=True, check=True)
        assert shown.stdout == expected
    assert "${GPUFLEET_IFACE_OPTS}" in rendered and "${GPUFLEET_MPI_ROOT_OPTS}" in rendered
    follower = render_launch_script(spec(rank=1, launcher="mpirun"), str(tmp_path / "env"))
    assert "node_rank 1 takes part through node 0's mpirun; nothing to start here" in follower
    assert "exec " not in follower


@pytest.mark.parametrize("ompi_rank,expected_node", [(0, 0), (1, 0), (2, 1), (3, 1), (5, 2)])
def test_the_rank_wrapper_maps_open_mpi_variables_to_the_contract(ompi_rank, expected_node):
    env = {"OMPI_COMM_WORLD_RANK": str(ompi_rank), "OMPI_COMM_WORLD_LOCAL_RANK": str(ompi_rank % 2),
           "OMPI_COMM_WORLD_SIZE": "6", "GPUFLEET_RANK_STARTS": "0 2 4", "GPUFLEET_RUN_ID": "abc",
           "PATH": os.environ["PATH"]}
    done = subprocess.run(["/bin/bash", "-c", launchers.RANK_ENV_WRAPPER, "gpufleet-rank", "/usr/bin/env"], env=env,
                          capture_output=True, text=True, check=True)
    seen = dict(line.split("=", 1) for line in done.stdout.splitlines())
    assert (seen["RANK"], seen["LOCAL_RANK"], seen["WORLD_SIZE"]) == (str(ompi_rank), str(ompi_rank % 2), "6")
    assert seen["NODE_RANK"] == seen["MLP_ROLE_INDEX"] == str(expected_node)
    assert seen["GPUFLEET_RUN_TOKEN"] == "abc.%d" % expected_node


def test_none_runs_the_script_itself_once_per_node():
    assert launchers.command(spec(launcher="none", script="run.sh"), "/j", []) == ["/bin/bash", "run.sh", "--epochs", "2"]
    assert launchers.command(spec(launcher="none"), "/j", [])[:2] == ["/opt/venv/bin/python", "train.py"]


def test_the_env_file_has_the_contract(tmp_path):
    text = render_env_file(job_environment(spec(), str(tmp_path)))
    assert "export MLP_MPI_HOSTFILE=%s/hostfile" % tmp_path in text and "export NODE_RANK=1" in text
