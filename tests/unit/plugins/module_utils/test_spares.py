"""Spare nodes with real supervisors and processes on three local "nodes" (127.0.0.1, .2 and .3): two nodes of a
job and a spare, each with its own jobs folder, as on three machines; torchrun is replaced by a stand-in that runs
the job's script with bash (as in test_supervisor.py). What this checks: a spare stands by running nothing, takes a
lost node's rank at the next attempt with the place launch.sh is given (node rank, master address, ranks), the
members and the spare record who replaced whom, and an unneeded spare ends 'unused'. The controller's side (probe,
launch, wait, report) runs on the container cluster (tests/cluster/test_supervision.py)."""

import os
import signal
import uuid

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import job_read, jobs
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import spares, supervisor_bundle
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gang import Gang
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.heartbeat import Heartbeat
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_processes import run_processes, run_token
from ansible_collections.gpufleet.cluster.plugins.module_utils._job.job_spec import JobSpec
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import ENDED_STATES
from test_supervisor import free_udp_port
from waiting import wait_for

SOURCE = supervisor_bundle.shipped_source()
KEY = "0123456789abcdef0123456789abcdef"
NODES = (("n0", "127.0.0.1"), ("n1", "127.0.0.2"))
SPARES = (("s0", "127.0.0.3"),)
THREE = NODES + (("n2", "127.0.0.4"),)
RUN = "spare-%s" % uuid.uuid4().hex[:8]
SAYS = 'echo "attempt $GPUFLEET_ATTEMPT node_rank $NODE_RANK master $MASTER_ADDR nproc $GPUFLEET_NPROC ' \
       'after: $GPUFLEET_RESTART_REASON"\n'


class WithSpare:
    """A job on n0 and n1 (or nodes) with the spare s0 (node_rank 2, or past the nodes')."""

    def __init__(self, tmp_path, body, nodes=NODES, spare_nodes=SPARES, **spec_args):
        fake = tmp_path / "fake-python"
        fake.write_text('#!/bin/bash\nwhile [ "$1" != "--max-restarts=0" ]; do shift; done; shift\nexec bash "$@"\n')
        fake.chmod(0o755)
        script = tmp_path / "train.sh"
        script.write_text(SAYS + body)
        self.paths = []
        port = free_udp_port()
        for rank, (name, _address) in enumerate(nodes + spare_nodes):
            args = dict(job="g", node_rank=rank, nnodes=len(nodes), nproc_per_node=1, world_size=len(nodes),
                        master_addr="127.0.0.1", master_port=port, python=str(fake), script=str(script),
                        workdir=str(tmp_path), grace_s=1.0, nodes=nodes, spares=spare_nodes, slots=(1,) * len(nodes),
                        heartbeat_s=0.2, heartbeat_misses=5,
                        join_timeout_s=10.0, **spec_args)
            path = job_read.job_dir(str(tmp_path / name), "g")
            jobs.start(path, JobSpec(**args), RUN, SOURCE, check_mode=False, gang_key=KEY)
            self.paths.append(path)

    def status(self, index):
        return job_read.status(self.paths[index], tail=50)

    def ended(self, indexes=(0, 1, 2)):
        found = [self.status(index) for index in indexes]
        return found if all(s["state"] in ENDED_STATES for s in found) else None

    def log(self, index):
        return open(self.status(index)["log_path"]).read()

    def stop_all(self):
        for path in self.paths:
            jobs.stop(path, "test teardown", check_mode=False)


@pytest.fixture
def with_spare(tmp_path):
    made = []

    def make(body, nodes=NODES, spare_nodes=SPARES, **spec_args):
        made.append(WithSpare(tmp_path, body, nodes, spare_nodes, **spec_args))
        return made[-1]

    yield make
    for one in made:
        one.stop_all()


def test_a_spare_takes_a_lost_nodes_rank_and_the_job_succeeds(with_spare):
    body = 'if [ "$GPUFLEET_ATTEMPT" = 1 ]; then exec sleep 1000; fi\nsleep 0.5; echo done\n'
    job = with_spare(body, max_restarts=1, restart_ports=(free_udp_port(),))
    wait_for(lambda: [job.status(i)["state"] for i in (0, 1, 2)] == ["running", "running", "standby"])
    assert not run_processes(run_token(job_read.read_spec(job.paths[2])))  # standing by, the spare runs nothing
    # n1 goes away whole: its supervisor and its part.
    lost = job.status(1)
    os.kill(lost["supervisor_pid"], signal.SIGKILL)
    for pid in run_processes(run_token(job_read.read_spec(job.paths[1]))):
        os.kill(pid, signal.SIGKILL)
    node0, spare = wait_for(lambda: job.ended((0, 2)), timeout=40)
    assert node0["state"] == "succeeded" and spare["state"] == "succeeded", (node0, spare)
    why = "n1 lost; s0 takes node_rank 1"
    assert node0["restarts"] == [why]
    assert [(r["node_rank"], r["host"], r["by"], r["attempt"], r["why"]) for r in node0["replaced"]] == [
        (1, "n1", "s0", 2, why)]
    assert spare["node_rank"] == 1 and spare["took_place_of"]["host"] == "n1" and spare["took_place_of"]["attempt"] == 2
    assert [a["attempt"] for a in spare["attempts"]] == [2]
    # The spare has the members' count of the restart budget (their heartbeat's), not a fresh one.
    assert node0["restarts_used"] == spare["restarts_used"] == 1, (node0, spare)
    # The spare ran node_rank 1's part of attempt 2, told why, with node 0's address and its ranks.
    said = "attempt 2 node_rank 1 master 127.0.0.1 nproc 1 after: %s" % why
    assert said in job.log(2) and "done" in job.log(2)
    assert "[gpufleet] s0 takes node_rank 1 in place of n1 from attempt 2" in job.log(0)
    assert "attempt 2 node_rank 0 master 127.0.0.1 nproc 1 after: %s" % why in job.log(0)


def test_a_spare_the_job_did_not_need_ends_unused(with_spare):
    job = with_spare("sleep 1; echo done\n")
    ended = wait_for(job.ended, timeout=30)
    assert [s["state"] for s in ended] == ["succeeded", "succeeded", "unused"], ended
    assert ended[2]["exit_code"] == 0 and "standing by as a spare for n0, n1" in job.log(2)
    assert "attempts" not in ended[2] or ended[2]["attempts"] == []


def test_node1_alone_after_losing_node0_replaces_nobody(with_spare):
    body = 'if [ "$GPUFLEET_ATTEMPT" = 1 ]; then exec sleep 1000; fi\nsleep 0.5; echo done\n'
    job = with_spare(body, max_restarts=1, restart_ports=(free_udp_port(),))
    wait_for(lambda: [job.status(i)["state"] for i in (0, 1, 2)] == ["running", "running", "standby"])
    os.kill(job.status(0)["supervisor_pid"], signal.SIGKILL)
    for pid in run_processes(run_token(job_read.read_spec(job.paths[0]))):
        os.kill(pid, signal.SIGKILL)
    node1, spare = wait_for(lambda: job.ended((1, 2)), timeout=40)
    # Two nodes, node 0 lost: node1 hears exactly half the gang without node 0, so it may be the one cut off.
    assert node1["state"] != "succeeded" and node1["no_restart"].startswith(
        "not restarting: this node (n1) lost contact with n0, half the gang or more"), node1
    assert spare["state"] == "unused"


def test_a_lost_node_zero_is_replaced_and_the_master_address_moves_to_the_spare(with_spare):
    """Three nodes: n1 and n2 hear the majority, replace n0 by s0, and every part of attempt 2 (n1's and n2's too)
    takes its rendezvous at s0's address."""
    body = 'if [ "$GPUFLEET_ATTEMPT" = 1 ]; then exec sleep 1000; fi\nsleep 0.5; echo done\n'
    job = with_spare(body, nodes=THREE, max_restarts=1, restart_ports=(free_udp_port(),))
    wait_for(lambda: [job.status(i)["state"] for i in range(4)] == ["running", "running", "running", "standby"])
    os.kill(job.status(0)["supervisor_pid"], signal.SIGKILL)
    for pid in run_processes(run_token(job_read.read_spec(job.paths[0]))):
        os.kill(pid, signal.SIGKILL)
    ended = wait_for(lambda: job.ended((1, 2, 3)), timeout=40)
    assert [s["state"] for s in ended] == ["succeeded"] * 3, ended
    assert ended[2]["node_rank"] == 0 and ended[2]["took_place_of"]["host"] == "n0"
    for index, rank in ((1, 1), (2, 2), (3, 0)):
        assert "attempt 2 node_rank %d master 127.0.0.3 nproc 1 after: n0 lost; s0 takes node_rank 0" % rank \
            in job.log(index)


class _Member:
    """What spares.reshape uses of a member's supervisor, with a real Gang (its socket on 127.0.0.1)."""

    def __init__(self, job_dir):
        self.job_dir = str(job_dir)
        self.spec = {"node_rank": 0, "run_id": "r", "nodes": [list(n) for n in NODES], "spares": [list(SPARES[0])],
                     "master_port": free_udp_port()}
        self.gang = Gang(self.spec, KEY.encode())
        self.state, self.lines, self.attempt = {}, [], 1

    def save(self, **changes):
        self.state.update(changes)

    def log(self, line):
        self.lines.append(line)


def test_a_member_records_who_replaced_whom_and_whether_for_a_hardware_fault(tmp_path):
    member = _Member(tmp_path)
    try:
        parts = [Heartbeat(rank=0, outcome="stopped", stopped_for="n1"),
                 Heartbeat(rank=1, outcome="failed", hardware_fault=True, reason="n1 GPU 0: XID 79")]
        spares.reshape(member, {1: "s0"}, (), "n1 failed; s0 takes node_rank 1", parts)
        record = member.state["replaced"][0]
        assert (record["node_rank"], record["host"], record["by"], record["attempt"], record["hardware_fault"]) == (
            1, "n1", "s0", 2, True)
        assert member.state["members"] == ["n0", "s0"] and member.spec["nodes"][1] == ["s0", "127.0.0.3"]
        assert member.lines == ["s0 takes node_rank 1 in place of n1 from attempt 2"]
        assert member.gang.ready_spares() == []  # a member now, no longer a spare to give
        assert (tmp_path / "hostfile").read_text() == "127.0.0.1 slots=1\n127.0.0.3 slots=1\n"
    finally:
        member.gang.close()


def test_an_attempt_and_the_spares_return_what_the_supervisor_takes_on_and_assign_none_of_its_attributes():
    """spares.stand_by returns a Placement and Attempt its PartOutcome; the supervisor alone sets its node rank,
    attempt and restart reason (they were assigned from spares.py before), also after a reshape of the gang."""
    import re

    runtime = os.path.dirname(spares.__file__)
    for name in ("spares.py", "attempt.py"):
        with open(os.path.join(runtime, name)) as handle:
            assigned = re.findall(r"\bnode\.(\w+)\s*=(?!=)", handle.read())
        assert assigned == [], (name, assigned)


# -- min_nodes: the gang goes on smaller ------------------------------------------------------------------------------

SIZE = 'echo "attempt $GPUFLEET_ATTEMPT nnodes $NNODES world $WORLD_SIZE $MLP_WORKER_NUM hosts $MLP_WORKER_ALL_HOSTS"\n'


def test_without_a_spare_the_gang_goes_on_without_a_lost_node_zero_renumbered_while_min_nodes_remain(with_spare):
    """Three nodes, no spare, min_nodes=2: n0 (node 0) goes away whole; n1 and n2 go on as node ranks 0 and 1 of two
    nodes, the rendezvous at n1's address, the world size and the contract's names of it two, the hostfile
    rewritten, and state.json says who was left out from which attempt."""
    body = SIZE + 'if [ "$GPUFLEET_ATTEMPT" = 1 ]; then exec sleep 1000; fi\nsleep 0.5; echo done\n'
    job = with_spare(body, nodes=THREE, spare_nodes=(), min_nodes=2, max_restarts=1,
                     restart_ports=(free_udp_port(),))
    wait_for(lambda: [job.status(i)["state"] for i in range(3)] == ["running"] * 3)
    os.kill(job.status(0)["supervisor_pid"], signal.SIGKILL)
    for pid in run_processes(run_token(job_read.read_spec(job.paths[0]))):
        os.kill(pid, signal.SIGKILL)
    ended = wait_for(lambda: job.ended((1, 2)), timeout=40)
    assert [s["state"] for s in ended] == ["succeeded"] * 2, ended
    why = "n0 lost; the gang goes on without n0 (node_rank 0) on 2 nodes (min_nodes=2)"
    for index, rank in ((1, 0), (2, 1)):
        state, log = ended[index - 1], job.log(index)
        assert state["node_rank"] == rank and state["members"] == ["n1", "n2"], state
        assert [(r["node_rank"], r["host"], r["attempt"], r["nodes"], r["why"]) for r in state["left_out"]] == [
            (0, "n0", 2, 2, why)], state
        assert "attempt 2 node_rank %d master 127.0.0.2 nproc 1 after: %s" % (rank, why) in log, log[-2000:]
        assert "attempt 2 nnodes 2 world 2 2 hosts 127.0.0.2,127.0.0.4" in log, log[-2000:]
        assert "[gpufleet] attempt 2 goes on without n0, on 2 nodes: %s" % why in log
        assert "[gpufleet] attempt 2 of 2, master port" in log and ", on 2 of 3 nodes" in log
        with open(os.path.join(job.paths[index], "hostfile")) as handle:
            assert handle.read() == "127.0.0.2 slots=1\n127.0.0.4 slots=1\n"
    assert "attempt 1 nnodes 3 world 3 3 hosts 127.0.0.1,127.0.0.2,127.0.0.4" in job.log(1)
