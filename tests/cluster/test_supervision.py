"""Fault injection on the 3-node container cluster: gang fail-fast, node loss, hangs, restarts, Ctrl-C.

Each test runs tests/cluster/scripts/faulty_train.py (torch.distributed over
gloo, one all_reduce per step) through train.yml over SSH, breaks something,
and measures how long it takes until no process of the job is left on any
node. The bound is printed ("BOUND ...") and asserted. Faults are injected
through podman (signals by PID, a stopped container, a disconnected network),
never through the job's own tools.
"""

import json
import os
import signal
import threading
import time

import pytest

import testbed
from bounds import report as report_bound

HERE = os.path.dirname(os.path.abspath(__file__))
FAULTY = os.path.join(HERE, "scripts", "faulty_train.py")

# Run inside a node by /usr/bin/python3: the job's processes (by their environment, or the supervisor by its
# command line), its state.json and how many step lines its log has.
PROBE = r"""
import json, os, sys
job = sys.argv[1]
folder = "/root/.gpufleet/jobs/" + job
found = []
for name in os.listdir("/proc"):
    if not name.isdigit():
        continue
    try:
        with open("/proc/%s/environ" % name, "rb") as f:
            env = dict(e.decode("utf-8", "replace").split("=", 1) for e in f.read().split(b"\0") if b"=" in e)
        with open("/proc/%s/cmdline" % name, "rb") as f:
            cmd = [c.decode("utf-8", "replace") for c in f.read().split(b"\0")]
        with open("/proc/%s/stat" % name) as f:
            stat = f.read()
    except OSError:
        continue
    if stat[stat.rfind(")") + 2:].startswith("Z"):
        continue
    supervisor = len(cmd) > 1 and cmd[1] == folder + "/supervisor.py"
    if supervisor or env.get("GPUFLEET_JOB") == job:
        kind = "supervisor" if supervisor else ("worker" if "LOCAL_RANK" in env else "agent")
        found.append({"pid": int(name), "kind": kind, "rank": env.get("RANK"), "local_rank": env.get("LOCAL_RANK")})
state = None
try:
    with open(folder + "/state.json") as f:
        state = json.load(f)
except (OSError, ValueError):
    pass
steps = 0
try:
    with open(folder + "/job.log", errors="replace") as f:
        steps = sum(1 for line in f if line.startswith("step "))
except OSError:
    pass
print(json.dumps({"processes": found, "state": state, "steps": steps}))
"""


def probe(cluster, node, job):
    done = cluster.node_exec(node, "python3", "-c", PROBE, job)
    if done.returncode != 0:
        return {"processes": [], "state": None, "steps": 0, "unreachable": True}
    return json.loads(done.stdout.decode())


def probe_all(cluster, job, nodes=None):
    """Every node probed at once (one podman exec each, in threads)."""
    nodes = nodes or cluster.nodes
    found = {}
    threads = [threading.Thread(target=lambda n=n: found.__setitem__(n, probe(cluster, n, job))) for n in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return found


def wait_for(predicate, timeout=120.0, step=0.3, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("%s not met within %.0f s" % (what, timeout))


def wait_training(cluster, job, steps=3, nodes=None):
    """Until every node's log shows at least steps training steps."""
    return wait_for(lambda: (lambda f: f if all(p["steps"] >= steps for p in f.values()) else None)(
        probe_all(cluster, job, nodes)), what="training on every node")


def wait_gone(cluster, job, nodes=None, timeout=60.0):
    """Until no process of the job is left on the nodes; returns the wall-clock time it was seen so."""
    wait_for(lambda: not any(p["processes"] for p in probe_all(cluster, job, nodes).values()), timeout=timeout,
             step=0.1, what="no process of %s on %s" % (job, ", ".join(nodes or cluster.nodes)))
    return time.time()


def pid_of(found, kind, rank=None):
    for process in found["processes"]:
        if process["kind"] == kind and (rank is None or process["rank"] == str(rank)):
            return process["pid"]
    raise AssertionError("no %s (rank %s) in %s" % (kind, rank, found))


def train(cluster, job, *extra, script_args="--steps 400", nproc=1):
    return cluster.start_playbook(
        "train.yml", "-e", "script=%s" % FAULTY, "-e", "job=%s" % job, "-e", "nproc_per_node=%d" % nproc,
        "-e", "script_args='%s'" % script_args, *extra, log_name="%s.out" % job)


def train_detached(cluster, job, steps):
    run = cluster.playbook("train.yml", "-e", "script=%s" % FAULTY, "-e", "job=%s" % job, "-e", "nproc_per_node=1",
                           "-e", "script_args='--steps %d'" % steps, "-e", "wait=false")
    assert run.rc == 0, run.out[-3000:]


def logs_fetched(cluster, job):
    return {node: os.path.getsize(os.path.join(cluster.state, "logs", job, "%s.log" % node))
            for node in cluster.nodes if os.path.exists(os.path.join(cluster.state, "logs", job, "%s.log" % node))}


def kill_in_node(cluster, node, pid, signum=signal.SIGKILL):
    cluster.node_exec(node, "kill", "-%d" % signum, str(pid), check=True)
    return time.time()


@pytest.fixture(autouse=True)
def _cluster_ready(provisioned):
    return provisioned


def test_a_rank_exiting_1_stops_the_gang_and_keeps_the_checkpoint(cluster):
    job = "sup-exit"
    run = train(cluster, job, script_args="--steps 400 --fail-rank 1 --fail-step 24")
    failed = wait_for(lambda: (lambda p: p if (p["state"] or {}).get("attempts") else None)(
        probe(cluster, "node1", job)), what="node1's part ending")
    fault_at = failed["state"]["attempts"][0]["first_exit_at"]
    report_bound("rank exit 1 -> nothing left on any node", wait_gone(cluster, job) - fault_at, 10)
    done = run.finish()
    assert done.rc != 0
    assert "job sup-exit failed on node1 (node_rank 1): global rank 1 (local rank 0) exited with code 1" in done.out
    assert "rank 1 fails on purpose at step 24" in done.out  # the last lines of that rank's log
    assert set(logs_fetched(cluster, job)) == set(cluster.nodes)
    checkpoint = cluster.node_exec("node0", "cat", "/root/.gpufleet/jobs/%s/code/checkpoint-rank0.json" % job,
                                   check=True)
    assert json.loads(checkpoint.stdout)["step"] >= 5


def test_a_sigkilled_rank_names_its_global_and_local_rank(cluster):
    job = "sup-kill-rank"
    run = train(cluster, job, nproc=2)
    found = wait_training(cluster, job)
    fault_at = kill_in_node(cluster, "node1", pid_of(found["node1"], "worker", rank=3))
    report_bound("SIGKILL of a rank -> nothing left on any node", wait_gone(cluster, job) - fault_at, 10)
    done = run.finish()
    assert done.rc != 0
    assert "job sup-kill-rank failed on node1 (node_rank 1): global rank 3 (local rank 1) was killed by SIGKILL" \
        in done.out
    assert set(logs_fetched(cluster, job)) == set(cluster.nodes)


def test_a_sigkilled_torchrun_agent_fails_the_job_and_its_orphaned_ranks_are_ended(cluster):
    job = "sup-kill-agent"
    run = train(cluster, job)
    found = wait_training(cluster, job)
    fault_at = kill_in_node(cluster, "node2", pid_of(found["node2"], "agent"))
    report_bound("SIGKILL of a node's torchrun agent -> nothing left on any node", wait_gone(cluster, job) - fault_at,
                 10)
    done = run.finish()
    assert done.rc != 0
    assert "job sup-kill-agent failed on node2 (node_rank 2): the launcher was killed by SIGKILL" in done.out
    assert set(logs_fetched(cluster, job)) == set(cluster.nodes)


def test_a_sigkilled_supervisor_is_noticed_by_the_other_nodes(cluster):
    job = "sup-kill-supervisor"
    run = train(cluster, job)
    found = wait_training(cluster, job)
    fault_at = kill_in_node(cluster, "node1", pid_of(found["node1"], "supervisor"))
    report_bound("SIGKILL of a node's supervisor -> nothing left on any node", wait_gone(cluster, job) - fault_at, 10)
    done = run.finish()
    assert done.rc != 0
    assert "job sup-kill-supervisor failed on node1 (node_rank 1): the supervisor (pid" in done.out
    assert set(logs_fetched(cluster, job)) == set(cluster.nodes)
    # The other nodes' parts ended too: stopped by the gang (on node1's silence or state, or on the failure of a
    # rank that died in a collective with node1's dead ranks), or failed in that collective themselves.
    for node in ("node0", "node2"):
        state = probe(cluster, node, job)["state"]
        assert state["state"] in ("stopped", "failed"), state
        if state["state"] == "stopped":
            assert state["stop_reason"].startswith("stopped by gpufleet: "), state


def test_sigstop_on_a_rank_is_stopped_and_reported_as_hung(cluster):
    job = "sup-hang"
    hang_timeout = 8
    run = train(cluster, job, "-e", "hang_timeout=%d" % hang_timeout)
    found = wait_training(cluster, job)
    fault_at = kill_in_node(cluster, "node1", pid_of(found["node1"], "worker", rank=1), signal.SIGSTOP)
    report_bound("SIGSTOP of a rank with hang_timeout=%d -> nothing left on any node" % hang_timeout,
                 wait_gone(cluster, job) - fault_at, hang_timeout + 10)
    done = run.finish()
    assert done.rc != 0
    assert "job sup-hang hung and was stopped on every node: hung: no node wrote to its log for" in done.out
    assert [probe(cluster, node, job)["state"]["state"] for node in cluster.nodes] == ["hung"] * 3


def test_max_restarts_relaunches_the_gang_and_the_job_completes(cluster):
    job = "sup-restart"
    run = train(cluster, job, "-e", "max_restarts=1",
                script_args="--steps 24 --fail-rank 2 --fail-step 12 --fail-attempt 1")
    done = run.finish(timeout=400)
    assert done.rc == 0, done.out[-3000:]
    table = done.out.split("job %s" % job)[-1]
    for node in cluster.nodes:
        row = [line for line in table.splitlines() if line.startswith(node + " ")][0].split()
        assert row[2] == "succeeded" and row[4] == "2", row  # state, attempts
    states = {node: probe(cluster, node, job)["state"] for node in cluster.nodes}
    ports = {state["attempts"][1]["master_port"] for state in states.values()}
    assert len(ports) == 1 and ports != {states["node0"]["attempts"][0]["master_port"]}  # a fresh port, the same everywhere
    log = cluster.node_exec("node0", "cat", "/root/.gpufleet/jobs/%s/job.log" % job, check=True).stdout.decode()
    assert "rank 2 fails on purpose" not in log  # node0's own log: the failing rank is on node2
    assert "[gpufleet] attempt 2 of 2" in log and "rank 0 resumes from step" in log


def test_two_jobs_side_by_side_stopping_one_leaves_the_other_to_succeed(cluster):
    keep, stop = "sup-keep", "sup-stop"
    train_detached(cluster, keep, 160)
    train_detached(cluster, stop, 400)
    wait_training(cluster, keep)
    wait_training(cluster, stop)
    before = probe_all(cluster, keep)
    files_before = cluster.node_exec("node0", "ls", "-l", "--time-style=+%s", "/root/.gpufleet/jobs/%s" % keep,
                                     check=True).stdout
    stopped = cluster.playbook("stop.yml", "-e", "job=%s" % stop)
    assert stopped.rc == 0
    assert all(not found["processes"] for found in probe_all(cluster, stop).values())
    after = probe_all(cluster, keep)
    for node in cluster.nodes:
        assert [p["pid"] for p in after[node]["processes"]] == [p["pid"] for p in before[node]["processes"]]
    files_after = cluster.node_exec("node0", "ls", "-l", "--time-style=+%s", "/root/.gpufleet/jobs/%s" % keep,
                                    check=True).stdout
    # The stop wrote nothing in the other job's folder (the log and state may grow; names, modes and owners stay).
    assert [line.split()[-1] for line in files_before.decode().splitlines()[1:]] == \
        [line.split()[-1] for line in files_after.decode().splitlines()[1:]]
    final = wait_for(lambda: (lambda f: f if all((p["state"] or {}).get("state") in ("succeeded", "failed", "stopped",
                                                                                        "hung") for p in f.values())
                              else None)(probe_all(cluster, keep)), timeout=120, what="the kept job ending")
    assert [final[node]["state"]["state"] for node in cluster.nodes] == ["succeeded"] * 3
    assert all(found["state"]["state"] == "stopped" for found in probe_all(cluster, stop).values())


def test_ctrl_c_on_an_attached_run_stops_the_job_everywhere_and_fetches_logs(cluster):
    job = "sup-ctrl-c"
    run = train(cluster, job)
    wait_training(cluster, job)
    pressed_at = time.time()
    os.killpg(run.proc.pid, signal.SIGINT)  # what a terminal sends to its foreground job
    report_bound("Ctrl-C -> nothing left on any node", wait_gone(cluster, job) - pressed_at, 10)
    done = run.finish()
    assert done.rc != 0
    assert "job sup-ctrl-c was interrupted on the controller (Ctrl-C) and stopped on every node" in done.out
    assert set(logs_fetched(cluster, job)) == set(cluster.nodes)


def test_a_node_whose_container_stops_mid_training_attached(cluster):
    job = "sup-node-down"
    run = train(cluster, job)
    wait_training(cluster, job)
    try:
        cut_at = time.time()
        testbed.podman("stop", "--time", "0", testbed.PREFIX + "node2")
        report_bound("node2's container stopped -> nothing left on node0 and node1",
                     wait_gone(cluster, job, nodes=["node0", "node1"]) - cut_at, 20)
        done = run.finish()
    finally:
        testbed.podman("start", testbed.PREFIX + "node2")
        testbed.scan_host_key(cluster.addresses["node2"])
    assert done.rc != 0
    assert "job sup-node-down failed on node2 (node_rank 2): the node stopped answering" in done.out
    assert {"node0", "node1"} <= set(logs_fetched(cluster, job))


def test_a_node_cut_off_from_the_network_mid_training_detached(cluster):
    job = "sup-net-cut"
    train_detached(cluster, job, 400)
    wait_training(cluster, job)
    container = testbed.PREFIX + "node2"
    try:
        cut_at = time.time()
        testbed.podman("network", "disconnect", testbed.NETWORK, container)
        report_bound("node2 cut off (detached) -> nothing left on node0 and node1",
                     wait_gone(cluster, job, nodes=["node0", "node1"]) - cut_at, 20)
        # Cut off, node2 hears nobody either, and stops its own part.
        report_bound("node2 cut off (detached) -> nothing left on node2 itself",
                     wait_gone(cluster, job, nodes=["node2"]) - cut_at, 20)
    finally:
        testbed.podman("network", "connect", "--ip", cluster.addresses["node2"], testbed.NETWORK, container)
        testbed.scan_host_key(cluster.addresses["node2"])
    status = cluster.playbook("status.yml", "-e", "job=%s" % job)
    assert status.rc == 0
    for node in ("node0", "node1"):
        state = probe(cluster, node, job)["state"]
        assert state["state"] == "stopped" and "node2 (node_rank 2) lost: no heartbeat" in state["stop_reason"]
    assert "stopped (gang)" in status.out
