"""Rendering: what bash makes of the launch script and env file is exactly what was asked for.

These tests run the rendered files with the real bash and a stand-in for the
training Python that prints the arguments and environment it received.
"""

import json
import os
import stat
import subprocess

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._job.job_spec import JobSpec
from ansible_collections.gpufleet.cluster.plugins.module_utils._job.launch_script import (
    job_environment,
    render_env_file,
    render_launch_script,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils._job.launchers import torchrun_command

NASTY = ["plain", "with space", "it's", 'say "hi"', "$HOME", "`id`", "back\\slash", "new\nline", "*", "", "--x=a b"]


@pytest.fixture
def fake_python(tmp_path):
    """An executable that records its argv and environment as JSON, standing in for python -m torch.distributed.run."""
    path = tmp_path / "python"
    path.write_text(
        "#!/usr/bin/env python3\nimport json, os, sys\n"
        "json.dump({'argv': sys.argv[1:], 'env': dict(os.environ), 'cwd': os.getcwd()}, open(os.environ['OUT'], 'w'))\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def spec(fake_python, workdir, **over):
    values = dict(job="j", node_rank=1, nnodes=2, nproc_per_node=4, world_size=8, master_addr="192.0.2.1",
                  master_port=29501, python=fake_python, script="train.py", workdir=str(workdir),
                  script_args=tuple(NASTY), env=tuple(sorted({"QUOTED": "a 'b' \"c\" $d", "EMPTY": ""}.items())))
    values.update(over)
    return JobSpec(**values)


def run_rendered(job_spec, tmp_path, **env):
    env_path = tmp_path / "env"
    env_path.write_text(render_env_file(job_environment(job_spec)))
    script = tmp_path / "launch.sh"
    script.write_text(render_launch_script(job_spec, str(env_path)))
    out = tmp_path / "out.json"
    subprocess.run(["bash", str(script)], check=True, env=dict(env, OUT=str(out), PATH=os.environ["PATH"]))
    return json.loads(out.read_text())


def test_arguments_and_env_survive_quoting(fake_python, tmp_path):
    workdir = tmp_path / "work dir"
    workdir.mkdir()
    job_spec = spec(fake_python, workdir)
    seen = run_rendered(job_spec, tmp_path)
    assert seen["argv"] == torchrun_command(job_spec, str(tmp_path / "torchelastic"),
                                            str(tmp_path / "launcher_entry.py"))[1:]
    assert seen["argv"][:2] == [str(tmp_path / "launcher_entry.py"), "torch.distributed.run"]
    assert seen["argv"][-len(NASTY):] == NASTY
    assert seen["env"]["QUOTED"] == "a 'b' \"c\" $d"
    assert seen["env"]["EMPTY"] == ""
    assert seen["env"]["NODE_RANK"] == "1" and seen["env"]["NNODES"] == "2" and seen["env"]["GPUFLEET_JOB"] == "j"
    assert seen["cwd"] == str(workdir)


def test_with_min_nodes_the_attempts_place_and_size_reach_torchrun_and_the_contract(fake_python, tmp_path):
    """A job that may shrink: run by hand, launch.sh is the launch's (3 nodes); given the supervisor's place of a
    shrunk attempt (spares.place_env), torchrun's --nnodes/--node-rank and the contract's names follow it."""
    nodes = (("a", "192.0.2.10"), ("b", "192.0.2.11"), ("c", "192.0.2.12"))
    job_spec = spec(fake_python, tmp_path, node_rank=2, nnodes=3, nproc_per_node=2, world_size=6,
                    master_addr="192.0.2.10", nodes=nodes, slots=(2, 2, 2), min_nodes=2, script_args=())
    by_hand = run_rendered(job_spec, tmp_path)
    assert "--nnodes=3" in by_hand["argv"] and "--node-rank=2" in by_hand["argv"]
    assert (by_hand["env"]["WORLD_SIZE"], by_hand["env"]["MLP_WORKER_NUM"]) == ("6", "3")
    place = {"GPUFLEET_NODE_RANK": "1", "GPUFLEET_MASTER_ADDR": "192.0.2.11", "GPUFLEET_NPROC": "2",
             "GPUFLEET_NNODES": "2", "GPUFLEET_WORLD_SIZE": "4", "GPUFLEET_MPI_HOSTS": "192.0.2.11:2,192.0.2.12:2",
             "GPUFLEET_ALL_HOSTS": "192.0.2.11,192.0.2.12"}
    seen = run_rendered(job_spec, tmp_path, **place)
    assert {"--nnodes=2", "--node-rank=1", "--master-addr=192.0.2.11", "--nproc-per-node=2"} <= set(seen["argv"])
    env = seen["env"]
    assert (env["WORLD_SIZE"], env["NNODES"], env["NODE_RANK"], env["MASTER_ADDR"]) == ("4", "2", "1", "192.0.2.11")
    assert (env["MLP_WORKER_NUM"], env["MLP_MPI_NP"], env["MLP_ROLE_INDEX"]) == ("2", "4", "1")
    assert (env["MLP_WORKER_ALL_HOSTS"], env["MLP_MPI_HOSTS"]) == ("192.0.2.11,192.0.2.12", "192.0.2.11:2,192.0.2.12:2")


def test_node_env_files_are_sourced_first_and_the_job_env_wins(fake_python, tmp_path):
    node_env = tmp_path / "nccl.env"
    node_env.write_text("export NCCL_SOCKET_IFNAME=eth7\nexport QUOTED=from-node-file\n")
    job_spec = spec(fake_python, tmp_path, env_files=(str(node_env), str(tmp_path / "missing.env")))
    seen = run_rendered(job_spec, tmp_path)
    assert seen["env"]["NCCL_SOCKET_IFNAME"] == "eth7"
    assert seen["env"]["QUOTED"] == "a 'b' \"c\" $d"


def test_torchrun_command_carries_rank_layout():
    job_spec = JobSpec(job="j", node_rank=3, nnodes=4, nproc_per_node=8, world_size=32, master_addr="192.0.2.9",
                       master_port=29600, python="/venv/bin/python", script="t.py", workdir="/w")
    assert torchrun_command(job_spec) == [
        "/venv/bin/python", "-m", "torch.distributed.run", "--nnodes=4", "--node-rank=3", "--nproc-per-node=8",
        "--master-addr=192.0.2.9", "--master-port=29600", "--rdzv-backend=static", "--max-restarts=0", "t.py"]


def test_env_file_rejects_bad_names():
    with pytest.raises(ValueError):
        render_env_file({"BAD NAME": "x"})


def test_spec_round_trips_through_a_dict():
    job_spec = JobSpec(job="j", node_rank=0, nnodes=1, nproc_per_node=1, world_size=1, master_addr="a",
                       master_port=1, python="p", script="s", workdir="w", script_args=("a",), env=(("K", "V"),))
    data = job_spec.as_dict()
    assert data["script_args"] == ["a"] and data["env"] == {"K": "V"}
    assert json.loads(json.dumps(data)) == data


def test_the_supervisor_sets_each_attempts_master_port(fake_python, tmp_path):
    job_spec = spec(fake_python, tmp_path)
    assert "--master-port=29501" in run_rendered(job_spec, tmp_path)["argv"]
    assert "--master-port=29777" in run_rendered(job_spec, tmp_path, GPUFLEET_MASTER_PORT="29777")["argv"]


def test_the_probed_interface_is_set_for_gloo_and_nccl_where_nothing_names_one(fake_python, tmp_path):
    seen = run_rendered(spec(fake_python, tmp_path, iface="eno1"), tmp_path)
    # NCCL's "=" takes the name exactly (eno1 would otherwise also take eno10); Gloo takes the plain name.
    assert seen["env"]["GLOO_SOCKET_IFNAME"] == "eno1" and seen["env"]["NCCL_SOCKET_IFNAME"] == "=eno1"


def test_an_interface_named_by_a_node_file_or_the_job_wins_over_the_probed_one(fake_python, tmp_path):
    node_env = tmp_path / "nccl.env"
    node_env.write_text("export NCCL_SOCKET_IFNAME=ib0\n")
    job_spec = spec(fake_python, tmp_path, iface="eno1", env_files=(str(node_env),),
                    env=(("GLOO_SOCKET_IFNAME", "bond0"),))
    seen = run_rendered(job_spec, tmp_path)
    assert seen["env"]["NCCL_SOCKET_IFNAME"] == "ib0" and seen["env"]["GLOO_SOCKET_IFNAME"] == "bond0"


def test_no_probed_interface_sets_nothing_and_a_bad_name_is_refused(fake_python, tmp_path):
    seen = run_rendered(spec(fake_python, tmp_path), tmp_path)
    assert "GLOO_SOCKET_IFNAME" not in seen["env"] and "NCCL_SOCKET_IFNAME" not in seen["env"]
    with pytest.raises(ValueError, match="not a network interface name"):
        render_launch_script(spec(fake_python, tmp_path, iface="eth0; rm -rf /"), str(tmp_path / "env"))
