"""The GPU health gate of train.yml on the container cluster: node1 gets two stand-in GPUs (tests/cluster/gpu_standin.py:
a stand-in nvidia-smi driven by a state file, a fake kernel log), and each bad state refuses the launch before
anything is launched, naming the node, the GPU and the fact; the warnings let it through.

What this checks: the probe's reading of nvidia-smi's formats over SSH on a real node, the gate's decisions in the
play, the refusal before any job folder is written on any node, the acknowledgement and allow_busy_gpus. What it
does not: a real GPU or driver (tests/gpu/ does, where one is lent); the stand-in's figures are the test's."""

import os
import re
import time

import pytest

import gpu_standin

pytestmark = pytest.mark.cluster

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
JOB = "gpu-gate"
ARGS = ["-e", "script=%s/examples/train.py" % REPO, "-e", "job=%s" % JOB, "-e", "nproc_per_node=1",
        "-e", '{"script_args": "--epochs 1"}'] + gpu_standin.KERNEL_LOG_ARGS
NODE = "node1"
UP = "26.562 GB/s"


@pytest.fixture
def gpus(cluster, provisioned):
    """node1 with two healthy stand-in GPUs (a test changes their state); removed afterwards, with the job's folder."""
    del provisioned
    gpu_standin.install(NODE, {"gpus": [{}, {}]})
    yield
    gpu_standin.remove(NODE)
    for node in cluster.nodes:
        cluster.node_exec(node, "rm", "-rf", "/root/.gpufleet/jobs/%s" % JOB)


def foreign_process(cluster):
    """A process of another user's job on node1 (a sleep: its pid is real, so the gate can name its user)."""
    started = cluster.node_exec(NODE, "sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!", check=True)
    return int(started.stdout.decode().strip())


def job_folders(cluster):
    return {node: cluster.node_exec(node, "sh", "-c", "ls -d /root/.gpufleet/jobs/%s 2>/dev/null" % JOB).stdout.strip()
            for node in cluster.nodes}


XID_79 = gpu_standin.xid_line("0000:19:00", 79, "GPU has fallen off the bus.")

# (case, state of node1's stand-in, kernel log lines, more arguments, what the refusal must say)
REFUSALS = [
    ("a GPU missing", {"gpus": [{}, {"state": "lost"}]}, [], [],
     "node1 GPU at 0000:19:00.0: nvidia-smi cannot reach it (Unknown Error)"),
    ("fewer GPUs than gpufleet_gpus", {"gpus": [{}]}, [], ["-e", "gpufleet_gpus=2"],
     "node1: nvidia-smi lists 1 GPU, gpufleet_gpus says 2"),
    ("a GPU in an error state", {"gpus": [{}, {"state": "reset"}]}, [], [],
     "node1 GPU 1 (0000:19:00.0): nvidia-smi reports [GPU requires reset]; reset the GPU (nvidia-smi -r -i 1"),
    ("a foreign process on a GPU", "busy", [], [],
     "node1 GPU 0 (0000:18:00.0): is held by another process: pid {pid} (root, python3, 10240 MiB); stop that "
     "process, or launch with -e allow_busy_gpus=true"),
    ("an unacknowledged hardware XID", {"gpus": [{}, {}]}, [XID_79], [],
     "node1 GPU 1 (0000:19:00.0): XID 79 (GPU has fallen off the bus), last at"),
    ("uncorrectable ECC", {"gpus": [{}, {"ecc.errors.uncorrected.volatile.total": 2}]}, [], [],
     "node1 GPU 1 (0000:19:00.0): 2 uncorrectable ECC errors since the driver loaded; reset the GPU"),
    ("a pending row remap", {"gpus": [{"remapped_rows.pending": "Yes"}, {}]}, [], [],
     "node1 GPU 0 (0000:18:00.0): a row remap is pending; reset the GPU (nvidia-smi -r -i 0"),
    ("an NVLink link down", {"gpus": [{}, {}], "nvlink": {"0": [UP] * 4, "1": [UP, "<inactive>", UP, UP]}}, [], [],
     "node1 GPU 1 (0000:19:00.0): NVLink link 1 down while 7 other links of the node's GPUs are up"),
]


@pytest.mark.parametrize("case", REFUSALS, ids=[case[0] for case in REFUSALS])
def test_a_bad_gpu_refuses_the_launch_before_anything_is_written(cluster, gpus, case):
    _name, state, log_lines, more, needle = case
    pid = None
    if state == "busy":
        pid = foreign_process(cluster)
        state = {"gpus": [{}, {}], "processes": [{"gpu": 0, "pid": pid, "name": "python3", "memory": 10240}]}
    try:
        gpu_standin.write_state(NODE, state)
        for line in log_lines:
            gpu_standin.log_kernel(NODE, line)
        run = cluster.playbook("train.yml", *ARGS, *more)
    finally:
        if pid:
            cluster.node_exec(NODE, "kill", str(pid))
    assert run.rc != 0
    assert needle.format(pid=pid) in " ".join(run.out.split()), run.out[-3000:]
    assert job_folders(cluster) == {node: b"" for node in cluster.nodes}


def test_an_acknowledged_xid_and_a_shared_gpu_launch_with_the_warnings_shown(cluster, gpus):
    """The acknowledgement lets an XID logged before it through, allow_busy_gpus a GPU another process holds; a
    narrow PCIe link and clocks held down at idle only warn. The job then runs and succeeds."""
    pid = foreign_process(cluster)
    try:
        gpu_standin.write_state(NODE, {"gpus": [{"pcie.link.width.current": 8},
                                                {"clocks_event_reasons.active": "0x0000000000000041"}],
                                       "processes": [{"gpu": 0, "pid": pid, "name": "python3", "memory": 512}]})
        gpu_standin.log_kernel(NODE, XID_79, at=time.time() - 120)
        refused = cluster.playbook("train.yml", *ARGS, "-e", "allow_busy_gpus=true")
        assert refused.rc != 0 and "XID 79" in refused.out
        # The fix the refusal names, used as it is written.
        acknowledgement = re.search(r"gpufleet_xids_acknowledged_before: '([^']+)'", refused.out).group(1)
        run = cluster.playbook("train.yml", *ARGS, "-e", "allow_busy_gpus=true",
                               "-e", "gpufleet_xids_acknowledged_before=%s" % acknowledgement)
    finally:
        cluster.node_exec(NODE, "kill", str(pid))
    out = " ".join(run.out.split())
    assert run.rc == 0, run.out[-3000:]
    assert ("node1 GPU 0 (0000:18:00.0): its PCIe link runs at x8, narrower than its x16; the job runs, with slower "
            "host transfers") in out
    assert "node1 GPU 1 (0000:19:00.0): its clocks are held down (HW thermal slowdown) at 0% utilisation" in out
    assert "GPU health: no GPU on node0" in out
    # node2's fake sysfs has an H100 on its PCI bus (testbed.FAKE_SYS) and no nvidia-smi.
    assert "node2: 1 NVIDIA GPU on the PCI bus but nvidia-smi is not installed, so the job runs without it here" in out


def test_a_healthy_node_launches_without_a_word_of_its_gpus(cluster, gpus):
    run = cluster.playbook("train.yml", *ARGS)
    assert run.rc == 0, run.out[-3000:]
    assert "node1 GPU" not in run.out and "GPU health: no GPU on node0" in " ".join(run.out.split())
