"""The GPU health gate of train.yml on the container cluster: node1 gets two stand-in GPUs (tests/cluster/gpu_standin.py:
a stand-in nvidia-smi driven by a state file, a fake kernel log), and each bad state refuses the launch before
anything is launched, naming the node, the GPU and the fact; the warnings let it through.

What this checks: the probe's reading of nvidia-smi's formats over SSH on a real node, the gate's decisions in the
play, the refusal before any job folder is written on any node, the acknowledgement and allow_busy_gpus. What it
does not: a real GPU or driver (tests/gpu/ does, where one is lent); the stand-in's figures are the test's."""

import csv
import json
import os
import re
import struct
import time

import pytest

import gpu_standin
import jobfaults
from bounds import report as report_bound

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


def job_folders(cluster, job=JOB):
    return {node: cluster.node_exec(node, "sh", "-c", "ls -d /root/.gpufleet/jobs/%s 2>/dev/null" % job).stdout.strip()
            for node in cluster.nodes}


XID_79 = gpu_standin.xid_line("0000:19:00", 79)

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
    ("an NVLink link down", {"gpus": [{}, {}], "nvlink": {"0": [UP] * 4, "1": [UP, "<inactive>", UP, UP]}}, [], [],
     "node1 GPU 1 (0000:19:00.0): NVLink link 1 down while 7 other links of the node's GPUs are up"),
]
# Three refusals of the node's hardware, one per launch, which then quarantine it (the quarantine test below).
HARDWARE_REFUSALS = [
    ("uncorrectable ECC", {"gpus": [{}, {"ecc.errors.uncorrected.volatile.total": 2}]}, [],
     "node1 GPU 1 (0000:19:00.0): 2 uncorrectable ECC errors since the driver loaded; reset the GPU"),
    ("a pending row remap", {"gpus": [{"remapped_rows.pending": "Yes"}, {}]}, [],
     "node1 GPU 0 (0000:18:00.0): a row remap is pending; reset the GPU (nvidia-smi -r -i 0"),
    ("an unacknowledged hardware XID", {"gpus": [{}, {}]}, [XID_79],
     "node1 GPU 1 (0000:19:00.0): XID 79 (GPU has fallen off the bus), last at"),
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
    narrow PCIe link, clocks held down at idle and a GPU with no NVLink link up beside one with its links up (no
    NVLink switch on this node: a GPU without its bridge) only warn. The job then runs and succeeds."""
    pid = foreign_process(cluster)
    try:
        gpu_standin.write_state(NODE, {"gpus": [{"pcie.link.width.current": 8},
                                                {"clocks_event_reasons.active": "0x0000000000000041"}],
                                       "processes": [{"gpu": 0, "pid": pid, "name": "python3", "memory": 512}],
                                       "nvlink": {"0": [UP] * 4, "1": "all inactive"}})
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
    # (The warnings are printed as YAML, whose single-quoted strings double the apostrophe of "node's".)
    assert ("node1 GPU 1 (0000:19:00.0): none of its NVLink links is up (nvidia-smi: all links are inActive) while 4 "
            "links of the node") in out and "other GPUs are up; the job runs, reaching it over PCIe" in out
    assert "GPU health: no GPU on node0" in out
    # node2's fake sysfs has an H100 on its PCI bus (testbed.FAKE_SYS) and no nvidia-smi.
    assert "node2: 1 NVIDIA GPU on the PCI bus but nvidia-smi is not installed, so the job runs without it here" in out


def test_a_healthy_node_launches_without_a_word_of_its_gpus(cluster, gpus):
    run = cluster.playbook("train.yml", *ARGS)
    assert run.rc == 0, run.out[-3000:]
    assert "node1 GPU" not in run.out and "GPU health: no GPU on node0" in " ".join(run.out.split())


def test_an_xid_79_while_training_stops_every_node_within_5_s_naming_node_gpu_and_xid(cluster, gpus):
    """node1's supervisor follows its kernel log (gpu_watch.py): an XID 79 line written there while the job trains
    fails node1's part at once, and the others stop theirs on its heartbeat. Measured as the fault rows are: from
    the injection to no process of the job left on any node. The GPUs are sampled every second into gpus.csv, which
    is fetched with the logs. A restart remains (max_restarts=1) and is not used: it would meet the same GPU."""
    job = "gpu-xid"
    run = jobfaults.train(cluster, job, *gpu_standin.KERNEL_LOG_ARGS, "-e", "gpu_sample_s=1", "-e", "max_restarts=1")
    try:
        jobfaults.wait_training(cluster, job, steps=8, run=run)
        injected = gpu_standin.log_kernel(NODE, XID_79)
        report_bound("XID 79 in one node's kernel log -> nothing left on any node",
                     jobfaults.wait_gone(cluster, job) - injected, 5)
        done = run.finish()
    finally:
        for node in cluster.nodes:
            cluster.node_exec(node, "rm", "-rf", "/root/.gpufleet/jobs/%s" % job)
    out = " ".join(done.out.split())
    assert done.rc != 0
    assert ("job gpu-xid failed on node1 (node_rank 1): node1 GPU 1 (0000:19:00.0): XID 79, GPU has fallen off the "
            "bus (not restarted: a restart on the same nodes would meet it again)") in out, done.out[-3000:]
    for node in ("node0", "node1"):
        with open(os.path.join(cluster.state, "logs", job, "%s.log" % node)) as handle:
            log = handle.read()
        assert "attempt 2 of 2" not in log and "not restarting: node1 GPU 1 (0000:19:00.0): XID 79" in log, log[-3000:]
    assert re.search(r"node1 +1 +failed \(XID 79\)", done.out), done.out[-3000:]
    # The fault is in the fleet's history (plugin_utils/_control/history.py), which quarantines a repeat offender.
    with open(os.path.join(cluster.state, "logs", "history.jsonl")) as handle:
        records = [json.loads(line) for line in handle]
    mine = [r for r in records if r["job"] == job]
    assert [(r["node"], r["kind"], r["class"]) for r in mine] == [("node1", "fault", "gpu")], records
    assert "XID 79" in mine[0]["fact"] and "Recorded in the fleet's history" in out
    with open(os.path.join(cluster.state, "logs", job, "node1.gpus.csv")) as handle:
        rows = list(csv.DictReader(handle))
    assert rows and {row["index"] for row in rows} == {"0", "1"} and {row["host"] for row in rows} == {"node1"}
    assert not os.path.exists(os.path.join(cluster.state, "logs", job, "node0.gpus.csv"))  # node0 has no GPU
    # The picture of the run, drawn from the fetched samples: a PNG of 1000 x 600 pixels.
    with open(os.path.join(cluster.state, "logs", job, "gpus.png"), "rb") as handle:
        head = handle.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", head[16:24]) == (1000, 600)


def test_a_node_whose_gpus_are_throttled_during_the_run_is_named_a_likely_straggler(cluster, gpus):
    """node1 (two stand-in GPUs) and node2 (one, at the bus address of its fake sysfs H100) train at full load; once
    training runs, node1's GPUs report HW thermal slowdown at a lower SM clock. The report names node1."""
    job = "gpu-straggler"
    busy = {"utilization.gpu": 96, "memory.used": 30000, "clocks.sm": 1980, "clocks_event_reasons.active": "0x0"}
    gpu_standin.install("node2", {"gpus": [busy]})
    try:
        gpu_standin.write_state(NODE, {"gpus": [busy, busy]})
        run = jobfaults.train(cluster, job, *gpu_standin.KERNEL_LOG_ARGS, "-e", "gpu_sample_s=1",
                              script_args="--steps 80")
        jobfaults.wait_training(cluster, job, steps=3, run=run)
        hot = dict(busy, **{"clocks.sm": 1100, "clocks_event_reasons.active": "0x0000000000000040"})
        gpu_standin.write_state(NODE, {"gpus": [hot, hot]})
        done = run.finish()
        # status.yml of the job says the same from the nodes' samples (fetched again).
        status = cluster.playbook("status.yml", "-e", "job=%s" % job)
    finally:
        gpu_standin.remove("node2")
        for node in cluster.nodes:
            cluster.node_exec(node, "rm", "-rf", "/root/.gpufleet/jobs/%s" % job)
    out = " ".join(done.out.split())
    assert done.rc == 0, done.out[-3000:]
    assert re.search(r"node1 is a likely straggler: its clocks were held down \d+% of the run \(HW thermal slowdown\)",
                     out), done.out[-3000:]
    assert "node2 is a likely straggler" not in out
    assert re.search(r"node2: 1 GPU, mean utilisation 96%, peak memory 29.3 GiB", out), done.out[-3000:]
    assert os.path.exists(os.path.join(cluster.state, "logs", job, "gpus.png"))
    assert status.rc == 0 and re.search(r"node1 is a likely straggler: its clocks were held down \d+% of the run",
                                        " ".join(status.out.split())), status.out[-3000:]


def test_three_hardware_faults_over_three_launches_quarantine_a_node_and_the_spare_takes_its_place(cluster, gpus):
    """node1's stand-in GPUs show three hardware faults, one per launch (uncorrectable ECC, a pending row remap, an
    XID 79): each launch is refused by the gate before anything is written, naming the GPU and the fault, and the
    gate records the fault in the fleet's history. The fourth launch places node1's rank on the spare node2 and
    trains; fleet.yml shows node1 quarantined with its three faults and returns it to service."""
    inventory = cluster.with_spare("node2")  # node0 and node1 the job's, node2 their spare
    at = ARGS.index("job=%s" % JOB)
    args = ARGS[:at - 1] + ARGS[at + 1:]  # ARGS without its job: each launch names its own
    try:
        for number, (_name, state, lines, needle) in enumerate(HARDWARE_REFUSALS, 1):
            gpu_standin.write_state(NODE, state)
            for line in lines:
                gpu_standin.log_kernel(NODE, line)
            refused = cluster.playbook("train.yml", *args, "-e", "job=gpu-q%d" % number, inventory=inventory)
            assert refused.rc != 0 and needle in " ".join(refused.out.split()), refused.out[-3000:]
            assert job_folders(cluster, "gpu-q%d" % number) == {node: b"" for node in cluster.nodes}
        with open(os.path.join(cluster.state, "logs", "history.jsonl")) as handle:
            records = [json.loads(line) for line in handle]
        assert [(r["node"], r["class"], r["job"]) for r in records] == [
            ("node1", "gpu", "gpu-q1"), ("node1", "gpu", "gpu-q2"), ("node1", "gpu", "gpu-q3")], records
        run = cluster.playbook("train.yml", *args, "-e", "job=gpu-q4", inventory=inventory)
        said = " ".join(run.out.split())
        assert run.rc == 0, run.out[-3000:]
        assert "node1 is quarantined (3 hardware faults within 7d: " in said and \
            "spare node2 takes its place (node_rank 1)" in said, said[-3000:]
        assert re.search(r"node2 +1 +succeeded", run.out), run.out[-3000:]
        assert cluster.node_exec(NODE, "test", "-e", "/root/.gpufleet/jobs/gpu-q4").returncode != 0
        released = cluster.playbook("fleet.yml", "-e", "release=node1", inventory=inventory)
        assert released.rc == 0, released.out[-3000:]
        assert any(line.split()[:3] == ["node1", "in", "service"] for line in released.out.splitlines()), released.out
    finally:
        for node in cluster.nodes:
            cluster.node_exec(node, "rm", "-rf", "/root/.gpufleet/jobs/gpu-q4")
