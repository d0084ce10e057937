"""Fault injection on the 3-node container cluster: gang fail-fast, node loss, hangs, restarts, Ctrl-C.

Each test runs tests/cluster/scripts/faulty_train.py (torch.distributed over
gloo, one all_reduce per step) through train.yml over SSH, breaks something,
and measures how long it takes until no process of the job is left on any
node, read from the host's /proc (jobfaults.py, hostview.py). The bound is
printed ("BOUND ...") and asserted. Faults are injected from the host (signals
by PID) and through podman (a stopped container, a disconnected network),
never through the job's own tools.
"""

import json
import os
import re
import signal
import time

import pytest

import testbed
from bounds import report as report_bound
from jobfaults import (TERMINAL, kill_in_node, pid_of, probe, probe_all, train, train_detached, wait_for, wait_gone,
                       wait_training)


def logs_fetched(cluster, job):
    return {node: os.path.getsize(os.path.join(cluster.state, "logs", job, "%s.log" % node))
            for node in cluster.nodes if os.path.exists(os.path.join(cluster.state, "logs", job, "%s.log" % node))}


@pytest.fixture(autouse=True)
def _cluster_ready(provisioned):
    return provisioned


def test_a_rank_exiting_1_stops_the_gang_and_keeps_the_checkpoint(cluster):
    job = "sup-exit"
    run = train(cluster, job, script_args="--steps 400 --fail-rank 1 --fail-step 24")
    failed = wait_for(cluster, job, lambda: (lambda p: p if (p["state"] or {}).get("attempts") else None)(
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


def test_fewer_forks_than_nodes_launch_every_node_and_name_a_failing_last_node(cluster):
    """An installed collection runs with Ansible's default of 5 forks, not this checkout's ansible.cfg: with fewer
    forks than nodes (2 for 3 here) every node still launches, the job succeeds, and a rank that fails on the last
    node, whose wait runs only after the others', still fails the play naming that node."""
    ok = train(cluster, "sup-forks", "--forks", "2", script_args="--steps 8").finish()
    assert ok.rc == 0, ok.out[-3000:]
    for node in cluster.nodes:
        assert re.search(r"^%s\s+\d+\s+succeeded" % node, ok.out, re.M), ok.out[-2000:]
    failing = train(cluster, "sup-forks-fail", "--forks", "2", script_args="--steps 400 --fail-rank 2 --fail-step 10")
    done = failing.finish()
    assert done.rc != 0
    assert "job sup-forks-fail failed on node2 (node_rank 2): global rank 2 (local rank 0) exited with code 1" \
        in done.out, done.out[-3000:]


def test_a_sigkilled_rank_names_its_global_and_local_rank(cluster):
    job = "sup-kill-rank"
    run = train(cluster, job, nproc=2)
    found = wait_training(cluster, job, run=run)
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
    found = wait_training(cluster, job, run=run)
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
    found = wait_training(cluster, job, run=run)
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
    found = wait_training(cluster, job, run=run)
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
    # With every rank's stack taken first (py-spy reads the stopped job's ranks only).
    stopped = cluster.playbook("stop.yml", "-e", "job=%s" % stop, "-e", "dump_stacks=true")
    assert stopped.rc == 0
    # The logs land under logs/ where ansible-playbook runs (cwd is the cluster's state folder), not in playbooks/.
    assert set(logs_fetched(cluster, stop)) == set(cluster.nodes)
    stacks_fetched(cluster, stop, stopped.out)
    assert not os.path.exists(os.path.join(testbed.REPO, "playbooks", "logs", stop))
    assert all(not found["processes"] for found in probe_all(cluster, stop).values())
    after = probe_all(cluster, keep)
    for node in cluster.nodes:
        assert [p["pid"] for p in after[node]["processes"]] == [p["pid"] for p in before[node]["processes"]]
    files_after = cluster.node_exec("node0", "ls", "-l", "--time-style=+%s", "/root/.gpufleet/jobs/%s" % keep,
                                    check=True).stdout
    # The stop wrote nothing in the other job's folder (the log and state may grow; names, modes and owners stay).
    assert [line.split()[-1] for line in files_before.decode().splitlines()[1:]] == \
        [line.split()[-1] for line in files_after.decode().splitlines()[1:]]
    final = wait_for(cluster, keep, lambda: (lambda f: f if all((p["state"] or {}).get("state") in TERMINAL
                                                                  for p in f.values())
                                             else None)(probe_all(cluster, keep)), timeout=120,
                     what="the kept job ending")
    assert [final[node]["state"]["state"] for node in cluster.nodes] == ["succeeded"] * 3
    assert all(found["state"]["state"] == "stopped" for found in probe_all(cluster, stop).values())


def stacks_fetched(cluster, job, out):
    """Every node's stacks.txt, taken before the stop that asked for them, is fetched and holds its rank in
    faulty_train.py; the report says where the ranks were, naming the files."""
    logs = os.path.join(cluster.state, "logs", job)
    for rank, node in enumerate(cluster.nodes):
        with open(os.path.join(logs, "%s.stacks.txt" % node)) as handle:
            stacks = handle.read()
        assert re.search(r"^=== %s rank %d \(local rank 0, pid \d+\) ===$" % (node, rank), stacks, re.M), stacks
        assert "faulty_train.py:" in stacks, stacks
    said = " ".join(out.split())
    assert re.search(r"Where each rank was when the job was stopped: .*rank.* in \S+ \(faulty_train\.py:\d+\).*"
                     r"every rank's stack: \S*/node0\.stacks\.txt, \S*/node1\.stacks\.txt, \S*/node2\.stacks\.txt",
                     said), said[-3000:]


def test_ctrl_c_on_an_attached_run_stops_the_job_everywhere_and_fetches_logs(cluster):
    """With -e dump_stacks=true: every rank's stack is taken before the stop, which the bound includes."""
    job = "sup-ctrl-c"
    run = train(cluster, job, "-e", "dump_stacks=true")
    wait_training(cluster, job, run=run)
    pressed_at = time.time()
    os.killpg(run.proc.pid, signal.SIGINT)  # what a terminal sends to its foreground job
    report_bound("Ctrl-C (stacks taken first) -> nothing left on any node", wait_gone(cluster, job) - pressed_at, 10)
    done = run.finish()
    assert done.rc != 0
    assert "job sup-ctrl-c was interrupted on the controller (Ctrl-C) and stopped on every node" in done.out
    assert set(logs_fetched(cluster, job)) == set(cluster.nodes)
    stacks_fetched(cluster, job, done.out)


EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples",
                       "train.py")
# About 20 s of training on 2 ranks (12 epochs of 23 steps, 60 ms a step), a checkpoint every 10 steps.
SPARE_ARGS = ("-e", "script=%s" % EXAMPLE, "-e", "nproc_per_node=1", "-e", "max_restarts=2",
              "-e", "script_args='--epochs 12 --checkpoint-every 10 --step-s 0.06'")


def _stop_node2_after_a_checkpoint(cluster, job, run=None):
    """Once node0's log shows a saved epoch (a checkpoint exists), node2's container is stopped; it is started again
    (and its host key scanned) by the caller's finally."""
    wait_for(cluster, job, lambda: "epoch 2/12" in (cluster.view.node_file("node0", "/root/.gpufleet/jobs/%s/job.log"
                                                                           % job) or ""),
             what="node0's second epoch", run=run)
    stopped_at = time.time()
    testbed.podman("stop", "--time", "0", testbed.PREFIX + "node2")
    return stopped_at


def _restart_node2(cluster):
    testbed.podman("start", testbed.PREFIX + "node2")
    testbed.scan_host_key(cluster.addresses["node2"], testbed.ssh_port(2))


def _resumed_on_the_spare(cluster, job):
    """node1 ran node_rank 1 from attempt 2, and rank 0 resumed from a checkpoint (its step said) and finished."""
    spare = cluster.view.job_state("node1", job)
    assert spare["state"] == "succeeded" and spare["node_rank"] == 1, spare
    assert spare["took_place_of"]["host"] == "node2" and spare["took_place_of"]["attempt"] == 2, spare
    log = cluster.view.node_file("node0", "/root/.gpufleet/jobs/%s/job.log" % job)
    resumed = re.search(r"rank 0 resumes from step (\d+) \(epoch \d+\)", log)
    assert resumed and int(resumed.group(1)) >= 20, log[-3000:]
    assert "final test_accuracy" in log and "[gpufleet] node1 takes node_rank 1 in place of node2 from attempt 2" in log
    return int(resumed.group(1))


def test_a_node_whose_container_stops_ends_a_job_of_min_nodes_3_and_one_of_min_nodes_2_goes_on_without_it(cluster):
    """Two jobs side by side on the 3 nodes, no spare, one fault: node2's container is stopped. sup-node-down
    (faulty_train.py, max_restarts=1, min_nodes=3: all of them, today's behaviour) is not restarted, naming the lost
    node and the missing spare. sup-shrink (examples/train.py checkpointing, max_restarts=2, min_nodes=2) restarts
    on node0 and node1 as node ranks 0 and 1 with world size 2, resumes from the checkpoint and succeeds; the
    summary names the shrink and the table marks node2 left out."""
    job, shrink = "sup-node-down", "sup-shrink"
    run = train(cluster, job, "-e", "max_restarts=1", "-e", "min_nodes=3", script_args="--steps 400")
    wait_training(cluster, job, run=run)
    going_on = cluster.start_playbook("train.yml", "-e", "job=%s" % shrink, *SPARE_ARGS, "-e", "min_nodes=2",
                                      log_name="%s.out" % shrink)
    try:
        cut_at = _stop_node2_after_a_checkpoint(cluster, shrink, going_on)
        report_bound("node2's container stopped -> nothing left of %s on node0 and node1" % job,
                     wait_gone(cluster, job, nodes=["node0", "node1"]) - cut_at, 20)
        done, shrunk = run.finish(), going_on.finish()
    finally:
        _restart_node2(cluster)
    assert done.rc != 0
    said = " ".join(done.out.split())
    assert "job sup-node-down failed on node2 (node_rank 2): the node stopped answering; " in said, said[-3000:]
    # (node0's and node1's ranks may fail in gloo before their supervisors stop them: "failed after it" or "stopped")
    assert "; not restarting: node2 lost, and no spare node is available to take its place." in said, said[-3000:]
    assert {"node0", "node1"} <= set(logs_fetched(cluster, job))
    _went_on_without_node2(cluster, shrink, shrunk)


def _went_on_without_node2(cluster, job, done):
    """node0 and node1 ran attempt 2 as node ranks 0 and 1 of two nodes, rank 0 resumed from a checkpoint, world size 2."""
    said = " ".join(done.out.split())
    assert done.rc == 0, done.out[-4000:]
    why = "node2 lost; the gang goes on without node2 (node_rank 2) on 2 nodes (min_nodes=2)"
    assert "Fewer nodes: attempt 2 ran on 2 of 3 nodes, without node2 (node_rank 2), after: %s" % why in said, \
        said[-3000:]
    assert re.search(r"^node2\s+2\s+left out \(attempt 2\)", done.out, re.M), done.out[-3000:]
    for rank, node in enumerate(("node0", "node1")):
        state = cluster.view.job_state(node, job)
        assert state["state"] == "succeeded" and state["node_rank"] == rank and state["members"] == ["node0", "node1"]
        assert [(r["host"], r["attempt"], r["nodes"]) for r in state["left_out"]] == [("node2", 2, 2)], state
    log = cluster.view.node_file("node0", "/root/.gpufleet/jobs/%s/job.log" % job)
    resumed = re.search(r"rank 0 resumes from step (\d+) \(epoch \d+\)", log)
    assert resumed and int(resumed.group(1)) >= 20, log[-3000:]
    assert re.search(r"rank 1 of world size 2 on \S+ \(node_rank 1", cluster.view.node_file(
        "node1", "/root/.gpufleet/jobs/%s/job.log" % job)), log[-3000:]
    assert "final test_accuracy" in log and "world_size 2" in log.split("final test_accuracy")[-1], log[-2000:]
    assert "[gpufleet] attempt 2 of 3, master port" in log and ", on 2 of 3 nodes" in log, log[-3000:]
    print("resumed from step %s on 2 of 3 nodes" % resumed.group(1))


def test_a_lost_node_is_replaced_by_the_spare_which_resumes_from_the_checkpoint_attached(cluster):
    """2 nodes + 1 spare, max_restarts=2: node2's container is stopped mid-run; the gang restarts with node1 at
    node_rank 1, resumes from the checkpoint, and succeeds; the report names the replacement. node2 is the one
    stopped: node1's /etc/hosts is the container runtime's, which a restart would rewrite (without the etc_hosts
    role's block that molecule's verifiers read afterwards)."""
    job = "sup-spare"
    run = cluster.start_playbook("train.yml", "-e", "job=%s" % job, *SPARE_ARGS, log_name="%s.out" % job,
                                 inventory=cluster.with_spare("node1"))
    try:
        _stop_node2_after_a_checkpoint(cluster, job, run)
        done = run.finish()
    finally:
        _restart_node2(cluster)
    said = " ".join(done.out.split())
    assert done.rc == 0, done.out[-4000:]
    step = _resumed_on_the_spare(cluster, job)
    assert "Spares: node1 replaced node2 (node_rank 1) from attempt 2, after: node2 lost; node1 takes node_rank 1" \
        in said, said[-3000:]
    assert re.search(r"^node2\s+1\s+replaced by node1\s", done.out, re.M), done.out[-3000:]
    assert re.search(r"^node1\s+1\s+succeeded\s+0\s", done.out, re.M), done.out[-3000:]
    # The fleet's history records node2's loss, a fault that does not count toward quarantine (history.py).
    with open(os.path.join(cluster.state, "logs", "history.jsonl")) as handle:
        records = [json.loads(line) for line in handle if json.loads(line)["job"] == job]
    lost = ("node2", "node lost", "replaced by node1: node2 lost; node1 takes node_rank 1")
    assert [(r["node"], r["class"], r["fact"]) for r in records] == [lost], records
    print("resumed from step %d" % step)


def test_a_lost_node_is_replaced_by_the_spare_with_no_controller_detached(cluster):
    """The same, detached: no ansible-playbook runs while node2 is stopped; status.yml says who replaced whom."""
    job = "sup-spare-detached"
    inventory = cluster.with_spare("node1")
    launched = cluster.playbook("train.yml", "-e", "job=%s" % job, "-e", "wait=false", *SPARE_ARGS,
                                inventory=inventory)
    assert launched.rc == 0, launched.out[-3000:]
    try:
        stopped_at = _stop_node2_after_a_checkpoint(cluster, job)
        wait_for(cluster, job, lambda: all((cluster.view.job_state(node, job) or {}).get("state") in TERMINAL
                                           for node in ("node0", "node1")), timeout=120, what="the job's end")
    finally:
        _restart_node2(cluster)
    step = _resumed_on_the_spare(cluster, job)
    print("resumed from step %d, %.1f s after node2 was stopped" % (step, time.time() - stopped_at))
    status = cluster.playbook("status.yml", "-e", "job=%s" % job, inventory=inventory)
    said = " ".join(status.out.split())
    assert status.rc == 0 and "Spares: node1 replaced node2 (node_rank 1) from attempt 2" in said, said[-3000:]


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
        testbed.scan_host_key(cluster.addresses["node2"], testbed.ssh_port(2))
    status = cluster.playbook("status.yml", "-e", "job=%s" % job)
    assert status.rc == 0
    for node in ("node0", "node1"):
        state = probe(cluster, node, job)["state"]
        assert state["state"] == "stopped" and "node2 (node_rank 2) lost: no heartbeat" in state["stop_reason"]
    assert "stopped (gang)" in status.out
