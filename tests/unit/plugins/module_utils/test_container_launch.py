"""A node's part in a container (module_utils/_runtime/containers.py): the engine command launch.sh runs, what reaches the
inside, and the engine commands that end a container.

launch.sh is rendered and run with the real bash. The engine is a stand-in at a path (docker or podman by its
name): it records the arguments it was given and the environment it was started with, then runs what the
container would run - the same launch.sh - with only the variables the arguments pass by name, as an engine does.
No engine runs here: tests/cluster/test_containers.py runs the real Podman.
"""

import json
import os
import stat
import subprocess

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import containers
from ansible_collections.gpufleet.cluster.plugins.module_utils._job.job_spec import JobSpec
from ansible_collections.gpufleet.cluster.plugins.module_utils._job.launch_script import (
    job_environment,
    render_env_file,
    render_launch_script,
)

IMAGE_ID = "a2a20b29bdb5" + "0" * 52
SECRET = "s3cr3t-unit-value"


@pytest.fixture
def engines(tmp_path):
    """Stand-in docker and podman: record argv and environment, then run the command 'inside'."""
    found = {}
    for name in ("docker", "podman"):
        folder = tmp_path / "engines" / name
        folder.mkdir(parents=True)
        path = folder / name
        path.write_text(
            "#!/usr/bin/env python3\nimport json, os, sys\n"
            "args = sys.argv[1:]\n"
            "json.dump({'argv': args, 'env': dict(os.environ)}, open(os.environ['ENGINE_OUT'], 'w'))\n"
            "inside = {'PATH': os.environ['PATH'], 'OUT': os.environ['OUT']}\n"
            "for i, arg in enumerate(args):\n"
            "    if arg == '--env':\n"
            "        name, _, value = args[i + 1].partition('=')\n"
            "        if _ or name in os.environ:  # as docker and podman do: --env NAME, unset here, sets nothing\n"
            "            inside[name] = value if _ else os.environ[name]\n"
            "image = args.index(os.environ['IMAGE_ID'])\n"
            "os.execve('/bin/bash', args[image + 1:], inside)\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        found[name] = str(path)
    return found


@pytest.fixture
def fake_python(tmp_path):
    path = tmp_path / "python"
    path.write_text("#!/usr/bin/env python3\nimport json, os, sys\n"
                    "json.dump({'argv': sys.argv[1:], 'env': dict(os.environ)}, open(os.environ['OUT'], 'w'))\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def container_spec(engine, python, job_dir, **over):
    values = dict(job="j", node_rank=1, nnodes=2, nproc_per_node=2, world_size=4, master_addr="192.0.2.1",
                  master_port=29501, python=python, script="train.py", workdir=str(job_dir / "code"),
                  env=(("VISIBLE", "plain value"),), secret_env_sha256="x", container_engine=engine,
                  container_image="nvcr.io/nvidia/pytorch:25.10-py3", container_image_id=IMAGE_ID)
    values.update(over)
    return JobSpec(**values)


def launch(job_spec, job_dir, env_files=()):
    """Write the job folder as the launch does and run launch.sh as the supervisor does; return what the engine and
    the training Python saw."""
    (job_dir / "code").mkdir(parents=True, exist_ok=True)
    env_path = job_dir / "env"
    env_path.write_text(render_env_file(job_environment(job_spec, str(job_dir))))
    secret_path = job_dir / "secret_env"
    secret_path.write_text(render_env_file({"API_TOKEN": SECRET}))
    script = job_dir / "launch.sh"
    script.write_text(render_launch_script(job_spec, str(env_path), str(secret_path)))
    out, engine_out = job_dir / "out.json", job_dir / "engine.json"
    env = {"PATH": os.environ["PATH"], "OUT": str(out), "ENGINE_OUT": str(engine_out), "IMAGE_ID": IMAGE_ID,
           "GPUFLEET_RUN_ID": "0123456789abcdef0123", "GPUFLEET_RUN_TOKEN": "0123456789abcdef0123.1",
           "GPUFLEET_MASTER_PORT": "29777", "GPUFLEET_ATTEMPT": "2", "NOT_PASSED": "host only",
           "GPUFLEET_RESTART_REASON": "node0 (node_rank 0) failed with exit code 1"}
    subprocess.run(["bash", str(script)], check=True, env=env, cwd=str(job_dir))
    return json.loads(engine_out.read_text()), json.loads(out.read_text()), script.read_text()


def pairs(argv, flag):
    return [argv[i + 1] for i, arg in enumerate(argv) if arg == flag]


def test_podman_runs_the_part_with_what_multi_node_training_needs(engines, fake_python, tmp_path):
    job_dir = tmp_path / "jobs" / "j"
    node_env = tmp_path / "nccl.env"
    node_env.write_text("export NCCL_SOCKET_IFNAME=eth7\n")
    job_spec = container_spec(engines["podman"], fake_python, job_dir, container_gpus=True,
                              env_files=(str(node_env), str(tmp_path / "absent.env")))
    engine, inside, _script = launch(job_spec, job_dir, env_files=job_spec.env_files)
    argv = engine["argv"]
    assert argv[:4] == ["run", "--rm", "--name", "gpufleet-j-n1-0123456789ab"]
    assert pairs(argv, "--network") == ["host"] and pairs(argv, "--ipc") == ["host"] and "--init" in argv
    assert pairs(argv, "--ulimit") == ["memlock=-1:-1", "stack=67108864:67108864"]
    assert pairs(argv, "--device") == ["nvidia.com/gpu=all"] and "--gpus" not in argv  # CDI
    assert pairs(argv, "--label") == ["gpufleet.run_token=0123456789abcdef0123.1", "gpufleet.job_dir=%s" % job_dir]
    # The job folder (with the working directory in it) and the readable environment file, at the same paths.
    assert pairs(argv, "--volume") == ["%s:%s" % (job_dir, job_dir), "%s:%s:ro" % (node_env, node_env)]
    assert pairs(argv, "--workdir") == [str(job_dir / "code")]
    # Only the run's own variables, by name: no value of the job's environment is in the container's configuration.
    assert pairs(argv, "--env") == ["GPUFLEET_IN_CONTAINER=1", "GPUFLEET_RUN_ID", "GPUFLEET_RUN_TOKEN",
                                    "GPUFLEET_MASTER_PORT", "GPUFLEET_ATTEMPT", "GPUFLEET_RESTART_REASON",
                                    "GPUFLEET_NODE_RANK", "GPUFLEET_MASTER_ADDR", "GPUFLEET_NPROC", "GPUFLEET_NNODES",
                                    "GPUFLEET_WORLD_SIZE", "GPUFLEET_MPI_HOSTS", "GPUFLEET_ALL_HOSTS",
                                    "GPUFLEET_STOP_FILE", "GPUFLEET_STOP_GRACE_S"]
    assert argv[-3:] == [IMAGE_ID, "/bin/bash", str(job_dir / "launch.sh")]
    assert not any(SECRET in arg or "plain value" in arg for arg in argv)
    # Inside: the job's environment and secret sourced from the mounted folder, the attempt's port, the launcher.
    assert inside["env"]["API_TOKEN"] == SECRET and inside["env"]["VISIBLE"] == "plain value"
    assert inside["env"]["NCCL_SOCKET_IFNAME"] == "eth7" and inside["env"]["MASTER_PORT"] == "29777"
    assert inside["env"]["GPUFLEET_RUN_TOKEN"] == "0123456789abcdef0123.1" and "NOT_PASSED" not in inside["env"]
    assert inside["env"]["GPUFLEET_RESTART_REASON"] == "node0 (node_rank 0) failed with exit code 1"
    assert inside["argv"][:2] == [str(job_dir / "launcher_entry.py"), "torch.distributed.run"]
    assert "--node-rank=1" in inside["argv"]


def test_docker_gets_the_gpus_through_its_runtime_and_a_node_without_gpus_gets_none(engines, fake_python, tmp_path):
    engine, _inside, _script = launch(container_spec(engines["docker"], fake_python, tmp_path / "a", container_gpus=True),
                                      tmp_path / "a")
    assert pairs(engine["argv"], "--gpus") == ["all"] and "--device" not in engine["argv"]
    engine, _inside, _script = launch(container_spec(engines["podman"], fake_python, tmp_path / "b"), tmp_path / "b")
    assert "--gpus" not in engine["argv"] and "--device" not in engine["argv"]


def test_the_users_volumes_ulimits_and_arguments_and_a_workdir_outside_the_job_folder(engines, fake_python, tmp_path):
    workdir = tmp_path / "shared" / "code"
    workdir.mkdir(parents=True)
    job_spec = container_spec(engines["podman"], fake_python, tmp_path / "j", workdir=str(workdir),
                              script="/data/scripts/train.py", container_volumes=("/data:/data:ro",),
                              container_ulimits=("memlock=8192:8192",), container_run_args=("--shm-size", "8g"))
    engine, _inside, _script = launch(job_spec, tmp_path / "j")
    argv = engine["argv"]
    assert pairs(argv, "--ulimit") == ["memlock=8192:8192"]
    assert pairs(argv, "--volume") == ["/data:/data:ro", "%s:%s" % (tmp_path / "j", tmp_path / "j"),
                                       "%s:%s" % (workdir, workdir), "/data/scripts:/data/scripts"]
    assert pairs(argv, "--shm-size") == ["8g"] and pairs(argv, "--workdir") == [str(workdir)]


def test_the_infiniband_devices_are_given_where_the_node_has_them(engines, fake_python, tmp_path):
    _engine, _inside, script = launch(container_spec(engines["podman"], fake_python, tmp_path / "j"), tmp_path / "j")
    assert "if [ -d /dev/infiniband ]; then extra+=(--device /dev/infiniband); fi" in script


def test_the_engine_commands_that_end_a_container():
    assert containers.stop_argv("docker", "gpufleet-j-n0-abc", 4.2) == ["docker", "stop", "--time", "5", "gpufleet-j-n0-abc"]
    assert containers.remove_argv("/opt/bin/podman", "c") == ["/opt/bin/podman", "rm", "--force", "c"]
    assert containers.list_argv("podman", "/jobs/j") == ["podman", "ps", "--all", "--quiet", "--filter",
                                                          "label=gpufleet.job_dir=/jobs/j"]
    spec = {"job": "j", "node_rank": 0, "run_id": "0123456789abcdef", "container_engine": "podman"}
    assert containers.container_of(spec) == "gpufleet-j-n0-0123456789ab"


def test_the_preflight_check_runs_the_images_python_with_the_jobs_settings():
    spec = {"container_engine": "docker", "container_image_id": IMAGE_ID, "container_gpus": True}
    argv = containers.check_argv(spec, "python3", needs_torch=True)
    assert argv[:3] == ["docker", "run", "--rm"] and pairs(argv, "--gpus") == ["all"]
    assert argv[-6:-3] == [IMAGE_ID, "/bin/bash", "-c"] and argv[-1] == "python3" and "import torch" in argv[-3]
    assert "import torch" not in containers.check_argv(spec, "python3", needs_torch=False)[-3]


@pytest.mark.parametrize("params, message", [
    ({"container_engine": "lxc", "container_image_id": IMAGE_ID}, "container_engine: 'lxc' is not one of docker, podman"),
    ({"container_engine": "podman", "container_image_id": "train:1"}, "container_image_id: 'train:1' is not an image ID"),
    ({"container_engine": "podman", "container_image_id": IMAGE_ID, "launcher": "mpirun"},
     "launcher=mpirun does not run inside containers yet"),
    ({"container_engine": "/usr/local/bin/podman", "container_image_id": IMAGE_ID, "scheduler": "slurm"},
     "container_image with scheduler=slurm is not supported yet"),
])
def test_launches_that_cannot_run_in_a_container_are_refused(params, message):
    assert message in containers.launch_problem(params)


def test_a_launch_without_an_engine_runs_on_the_host():
    assert containers.launch_problem({"container_engine": "", "launcher": "mpirun"}) == ""
