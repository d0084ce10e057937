"""Node facts: GPU count from nvidia-smi, the training Python, and the choice of a free rendezvous port."""

import random
import socket
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils import node

NVIDIA_SMI_L = """GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1b2c)
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-3d4e)
"""


def fake_run(stdout, returncode=0):
    def run(cmd, **_kwargs):
        return subprocess.CompletedProcess(cmd, returncode, stdout=stdout, stderr="")
    return run


def test_gpu_count_from_nvidia_smi():
    assert node.gpu_count("/usr/bin/nvidia-smi", run=fake_run(NVIDIA_SMI_L)) == 2


def test_no_driver_means_no_gpu():
    assert node.gpu_count("/usr/bin/nvidia-smi", run=fake_run("NVIDIA-SMI has failed", returncode=9)) == 0
    assert node.gpu_count("/nonexistent/nvidia-smi") == 0


def test_free_port_skips_ports_in_use_and_stays_in_range():
    busy = {29500, 29501, 29502}
    port = node.pick_free_port(range(29500, 29504), in_use=lambda p: p in busy, rng=random.Random(1))
    assert port == 29503


def test_free_port_is_random_among_free_ones():
    picks = {node.pick_free_port(range(29500, 29600), in_use=lambda p: False, rng=random.Random(seed))
             for seed in range(20)}
    assert len(picks) > 5 and all(29500 <= p < 29600 for p in picks)


def test_no_free_port_is_an_error():
    with pytest.raises(RuntimeError, match="no free TCP port in 29500-29501"):
        node.pick_free_port([29500, 29501], in_use=lambda p: True)


def test_port_in_use_sees_a_real_listener():
    with socket.socket() as listener:
        listener.bind(("", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert node.port_in_use(port) is True
    assert node.port_in_use(port) is False


def test_python_info_of_this_interpreter():
    info = node.python_info(sys.executable)
    assert info["found"] is True and info["version"].startswith("%d.%d" % sys.version_info[:2])
    assert isinstance(info["torch"], bool)


def test_python_info_of_a_missing_interpreter():
    assert node.python_info("/nonexistent/bin/python")["found"] is False
    assert node.python_info("no-such-python-here")["found"] is False


def test_pick_free_ports_are_distinct_free_and_not_excluded():
    taken = {29500, 29501}
    ports = node.pick_free_ports(5, exclude=[29502, None], in_use=lambda p: p in taken, rng=random.Random(3))
    assert len(set(ports)) == 5
    assert not set(ports) & {29500, 29501, 29502}
    assert node.pick_free_ports(0) == []


def test_launcher_missing_names_what_the_node_lacks():
    python = {"found": True, "path": "/opt/venv/bin/python", "torch": True, "deepspeed": False, "horovod": False}
    nothing = lambda name: None  # noqa: E731
    assert node.launcher_missing("torchrun", python, nothing) == ""
    assert node.launcher_missing("none", python, nothing) == ""
    assert node.launcher_missing("deepspeed", python, nothing).startswith("needs DeepSpeed in gpufleet_python")
    assert node.launcher_missing("deepspeed", dict(python, deepspeed=True), nothing) == ""
    assert node.launcher_missing("mpirun", python, nothing).startswith("needs Open MPI's mpirun")
    assert node.launcher_missing("mpirun", python, lambda name: "/usr/bin/" + name) == ""
    assert node.launcher_missing("horovodrun", python, nothing).startswith("needs Horovod")


def test_env_file_names_reads_assignments_of_the_readable_files(tmp_path):
    first = tmp_path / "nccl.env"
    first.write_text("# gpufleet\nexport NCCL_SOCKET_IFNAME=eth0\nGLOO_SOCKET_IFNAME=eth0\n  export NCCL_IB_HCA='mlx5_0'\n"
                     "echo not=an_assignment\n")
    assert node.env_file_names([str(first), str(tmp_path / "missing.env")]) == [
        "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME"]
