"""Node facts: the training Python (and its torch), and the choice of a free rendezvous port."""

import random
import socket
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._node import node
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import free_ports

def fake_run(stdout, returncode=0):
    def run(cmd, **_kwargs):
        return subprocess.CompletedProcess(cmd, returncode, stdout=stdout, stderr="")
    return run


def test_free_port_skips_ports_in_use_and_stays_in_range():
    busy = {29500, 29501, 29502}
    port = free_ports.pick_free_port(range(29500, 29504), in_use=lambda p: p in busy, rng=random.Random(1))
    assert port == 29503


def test_free_port_is_random_among_free_ones():
    picks = {free_ports.pick_free_port(range(29500, 29600), in_use=lambda p: False, rng=random.Random(seed))
             for seed in range(20)}
    assert len(picks) > 5 and all(29500 <= p < 29600 for p in picks)


def test_a_free_preferred_port_comes_first_and_a_taken_or_foreign_one_is_passed_over():
    """The ports the port check remembers a pass on (port_memory.fresh_ports) are tried first, in random order."""
    assert free_ports.pick_free_port(prefer=[29517], in_use=lambda p: False) == 29517
    assert free_ports.pick_free_port(prefer=[29517, 29518], in_use=lambda p: p == 29517) == 29518
    picked = free_ports.pick_free_port(prefer=[29517, 80], in_use=lambda p: p == 29517, rng=random.Random(2))
    assert picked not in (29517, 80) and 29500 <= picked <= 29999


def test_no_free_port_is_an_error():
    with pytest.raises(RuntimeError, match="no free TCP port in 29500-29501"):
        free_ports.pick_free_port([29500, 29501], in_use=lambda p: True)


def test_port_in_use_sees_a_real_listener():
    with socket.socket() as listener:
        listener.bind(("", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert free_ports.port_in_use(port) is True
    assert free_ports.port_in_use(port) is False


def test_port_in_use_sees_a_gangs_udp_socket_on_the_port():
    """A started job's supervisor holds its master port over UDP (the gang) before torchrun's TCP store listens: the
    port is taken for the next job's pick (CI once saw a second job pick the first's port and fail to join its gang)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as gang:
        gang.bind(("127.0.0.1", 0))
        port = gang.getsockname()[1]
        assert free_ports.port_in_use(port) is True
        with pytest.raises(RuntimeError, match="no free TCP port"):
            free_ports.pick_free_port(candidates=[port], prefer=[port])
    assert free_ports.port_in_use(port) is False


def test_python_info_of_this_interpreter():
    info = node.python_info(sys.executable)
    assert info["found"] is True and info["version"].startswith("%d.%d" % sys.version_info[:2])
    assert isinstance(info["torch"], bool)


def test_python_info_reads_torchs_version_without_importing_it(tmp_path):
    """The one torch probe: found by find_spec, its version from the installed metadata (as stack_facts reports it)."""
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("raise SystemExit('torch was imported')\n")
    (site / "torch-2.13.0+cpu.dist-info").mkdir()
    (site / "torch-2.13.0+cpu.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0+cpu\n")
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\nPYTHONPATH=%s exec %s -S \"$@\"\n" % (site, sys.executable))
    python.chmod(0o755)
    info = node.python_info(str(python))
    assert info["found"] is True and info["torch"] is True and info["torch_version"] == "2.13.0+cpu"


def test_python_info_without_torch(tmp_path):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\nexec %s -S \"$@\"\n" % sys.executable)
    python.chmod(0o755)
    info = node.python_info(str(python))
    assert info["found"] is True and info["torch"] is False and info["torch_version"] is None


def test_python_info_of_a_missing_interpreter():
    assert node.python_info("/nonexistent/bin/python")["found"] is False
    assert node.python_info("no-such-python-here")["found"] is False


def test_pick_free_ports_are_distinct_free_and_not_excluded():
    taken = {29500, 29501}
    ports = free_ports.pick_free_ports(5, exclude=[29502, None], in_use=lambda p: p in taken, rng=random.Random(3))
    assert len(set(ports)) == 5
    assert not set(ports) & {29500, 29501, 29502}
    assert free_ports.pick_free_ports(0) == []


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


def _site_python(tmp_path, dist_infos):
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("raise SystemExit('torch was imported')\n")
    for name, version in dist_infos:
        (site / name).mkdir()
        (site / name / "METADATA").write_text("Metadata-Version: 2.1\nName: x\nVersion: %s\n\nVersion: 0.0 (the body)\n"
                                              % version)
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\nPYTHONPATH=%s exec %s -S \"$@\"\n" % (site, sys.executable))
    python.chmod(0o755)
    return str(python)


@pytest.mark.parametrize("dist_infos, expected", [
    # Another distribution whose name starts with torch's is not torch's (old tools did not normalise the dashes).
    ([("torch-tb-profiler-0.4.3.dist-info", "0.4.3"), ("torch-2.13.0+cpu.dist-info", "2.13.0+cpu")], "2.13.0+cpu"),
    ([("torch_tb_profiler-0.4.3.dist-info", "0.4.3"), ("Torch-2.12.1.dist-info", "2.12.1")], "2.12.1"),
])
def test_python_info_reads_torchs_own_dist_info_beside_it(tmp_path, dist_infos, expected):
    assert node.python_info(_site_python(tmp_path, dist_infos))["torch_version"] == expected


def test_python_info_with_two_torch_dist_infos_asks_importlib_metadata(tmp_path):
    """Two left by an upgrade: not read beside the package, but as importlib.metadata reads them (one of the two)."""
    info = node.python_info(_site_python(tmp_path, [("torch-2.12.1.dist-info", "2.12.1"),
                                                    ("torch-2.13.0.dist-info", "2.13.0")]))
    assert info["torch"] is True and info["torch_version"] in ("2.12.1", "2.13.0")


def test_python_info_does_not_import_importlib_metadata_where_torch_has_its_dist_info(tmp_path):
    python = _site_python(tmp_path, [("torch-2.13.0.dist-info", "2.13.0")])
    check = node.PYTHON_CHECK + "\nprint(json.dumps('importlib.metadata' in sys.modules))\n"
    done = subprocess.run([python, "-c", check], capture_output=True, text=True, check=True)
    assert done.stdout.split()[-1] == "false", done.stdout
