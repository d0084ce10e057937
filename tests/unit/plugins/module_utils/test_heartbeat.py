"""The heartbeat (module_utils/_runtime/heartbeat.py): one typed reader and writer of what a node's supervisor tells
the others. Its wire form round-trips, a field of the wrong type reads as absent, and no other file of the runtime
reads a heartbeat's keys itself."""

import os
import re

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import gang
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.heartbeat import Heartbeat
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import (
    STOPPED_FOR,
    HeartbeatPhase,
    JobState,
    PartOutcome,
)

RUNTIME = os.path.dirname(gang.__file__)
FAILING = Heartbeat(rank=1, attempt=2, phase=HeartbeatPhase.RUNNING, outcome=JobState.FAILED,
                    reason="node1 GPU 1 (0000:19:00.0): XID 79, GPU has fallen off the bus", hardware_fault=True,
                    silent_s=3.5, restart_reason="node0 (node_rank 0) failed with exit code 7", failed_rank=3,
                    rank_exit=137, failed_at="train.py:88", restarts_used=1,
                    members=("node0", "node1"), host="node1", run="r1", sent_at=1700000000.25)


def test_a_heartbeat_survives_the_wire_signed_and_verified():
    key = b"k" * 32
    message = gang.verify(key, gang.sign(key, FAILING.to_wire()))
    assert Heartbeat.from_wire(message) == FAILING
    # The node stopped for is under the key state.json uses for it too.
    assert STOPPED_FOR in message and "stopped_for" == STOPPED_FOR


@pytest.mark.parametrize("key, value, field, read", [
    ("rank", "1", "rank", -1),
    ("rank", True, "rank", -1),
    ("attempt", 1.5, "attempt", 0),
    ("exit_code", "7", "exit_code", None),
    ("silent_s", "3", "silent_s", None),
    ("members", "node0,node1", "members", None),
    ("restart_reason", None, "restart_reason", ""),
    ("rank_exit", "137", "rank_exit", None),
    ("failed_at", 88, "failed_at", None),
    ("restarts_used", "1", "restarts_used", 0),
    ("phase", 3, "phase", None),
])
def test_a_field_of_the_wrong_type_reads_as_absent(key, value, field, read):
    wire = dict(FAILING.to_wire(), **{key: value})
    assert getattr(Heartbeat.from_wire(wire), field) == read


def test_a_newer_supervisors_key_is_left_out_and_a_missing_one_is_its_default():
    assert Heartbeat.from_wire(dict(FAILING.to_wire(), progress={"step": 9})) == FAILING
    assert Heartbeat.from_wire({}) == Heartbeat()


def test_a_nodes_own_part_reads_as_its_peers_news_does():
    part = PartOutcome(JobState.STOPPED, 143, attempt=3, signal="SIGTERM", reason="stopped by gpufleet: node1 lost",
                       stopped_for="node1")
    failed = PartOutcome(JobState.FAILED, 1, attempt=2, failed_rank=5, rank_exit=137, failed_at="train.py:88")
    beat = Heartbeat.of_part(failed, 1, None)
    assert (beat.failed_rank, beat.rank_exit, beat.failed_at) == (5, 137, "train.py:88")
    beat = Heartbeat.of_part(part, 0, "wait (torch/distributed/c10d.py)")
    assert (beat.rank, beat.attempt, beat.outcome, beat.exit_code, beat.signal, beat.stopped_for, beat.hung_in) == (
        0, 3, JobState.STOPPED, 143, "SIGTERM", "node1", "wait (torch/distributed/c10d.py)")
    assert Heartbeat.unheard(2, 3) == Heartbeat(rank=2, attempt=3, outcome=JobState.FAILED)


# The runtime's readers of heartbeats read fields, never the wire's keys (gang.news.get(rank) is a lookup by rank).
READERS = ("gang.py", "gang_rules.py", "spares.py", "attempt.py", "supervisor.py")
RAW = re.compile(r"(?<![.\w])(news|part|parts|p|leader|said|message|beat|telling|outcome)\s*(\.get\(|\[\")")


@pytest.mark.parametrize("name", READERS)
def test_no_reader_of_heartbeats_reads_a_raw_key(name):
    with open(os.path.join(RUNTIME, name)) as handle:
        found = [(number, line.strip()) for number, line in enumerate(handle, 1) if RAW.search(line)]
    assert not found, found
