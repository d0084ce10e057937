"""The gang's rules (module_utils/gang_rules.py) as pure decisions, without sockets or processes; the supervisors
that apply them on real heartbeats are tested in test_supervisor.py and on the container cluster."""

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils import gang_rules
from ansible_collections.gpufleet.cluster.plugins.module_utils.gang import LoneNode
from ansible_collections.gpufleet.cluster.plugins.module_utils.job_states import HeartbeatPhase, JobState, StopReason

PEER_FAILED = StopReason(JobState.STOPPED, "stopped by gpufleet: node1 (node_rank 1) failed with exit code 1", "node1")
USER_STOP = StopReason(JobState.STOPPED, "stopped by SIGTERM", None)


def test_the_job_is_hung_only_when_every_node_has_been_silent_that_long():
    assert gang_rules.hang_reason([31.0, 40.0, 35.5], 30).outcome == JobState.HUNG
    assert gang_rules.hang_reason([31.0, 40.0, 35.5], 30).reason == \
        "hung: no node wrote to its log for 31 s (hang_timeout=30)"
    assert gang_rules.hang_reason([31.0, 29.9, 35.5], 30) is None  # one node still writes
    assert gang_rules.hang_reason([31.0, None], 30) is None  # a peer not heard yet says nothing of its log
    assert gang_rules.hang_reason([1000.0], 0) is None  # hang_timeout=0: the watchdog is off


@pytest.mark.parametrize("parts, stop_requested, verdict", [
    ([{"outcome": "succeeded"}, {"outcome": "succeeded"}], False, JobState.SUCCEEDED),
    ([{"outcome": "succeeded"}, {"outcome": "failed"}], False, JobState.FAILED),  # a restart may help
    ([{"outcome": "stopped", "stopped_for": "node1"}, {"outcome": "failed"}], False, JobState.FAILED),
    ([{"outcome": "stopped"}, {"outcome": "failed"}], False, JobState.STOPPED),  # a user's stop: no restart
    ([{"outcome": "hung"}, {"outcome": "stopped", "stopped_for": None}], False, JobState.STOPPED),
    ([{"outcome": "hung"}, {"outcome": "hung"}], False, JobState.FAILED),  # a hang: a restart may help
    ([{"outcome": "failed"}], True, JobState.STOPPED),
])
def test_how_an_attempt_ended_for_the_gang(parts, stop_requested, verdict):
    assert gang_rules.attempt_verdict(parts, stop_requested) == verdict


def test_a_hardware_fault_on_any_node_refuses_the_restart():
    fault = "node1 GPU 3 (0000:bb:00.0): XID 79, GPU has fallen off the bus"
    assert gang_rules.no_restart_for([{"outcome": "stopped", "stopped_for": "node1"},
                                      {"outcome": "failed", "reason": fault, "hardware_fault": True}]) == (
        "not restarting: %s is a hardware fault, which a restart on the same nodes would meet again" % fault)
    assert gang_rules.no_restart_for([{"outcome": "failed", "exit_code": 1}, {"outcome": "stopped"}]) is None
    assert gang_rules.no_restart_for([{"outcome": "failed", "hardware_fault": False}]) is None


@pytest.mark.parametrize("news, done", [
    ({"attempt": 1, "phase": HeartbeatPhase.ENDED}, True),
    ({"attempt": 1, "phase": HeartbeatPhase.RUNNING}, False),
    ({"attempt": 2, "phase": HeartbeatPhase.RUNNING}, True),  # it has moved on
    ({"attempt": 1, "phase": HeartbeatPhase.RUNNING, "final": True}, True),
    ({}, False),
])
def test_a_peer_is_done_with_the_attempt(news, done):
    assert gang_rules.peer_done(news, 1) is done


def test_a_launcher_already_ending_on_its_own_gets_its_grace_but_not_for_a_users_stop():
    assert gang_rules.ending_on_its_own(PEER_FAILED, first_exit_at=100.0)
    assert not gang_rules.ending_on_its_own(PEER_FAILED, first_exit_at=None)
    assert not gang_rules.ending_on_its_own(USER_STOP, first_exit_at=100.0)


def test_a_node_that_failed_before_the_news_counts_as_failed():
    assert gang_rules.failed_before(PEER_FAILED, 1, first_exit_at=100.0, stop_decided_at=100.5)
    assert not gang_rules.failed_before(PEER_FAILED, 1, first_exit_at=101.0, stop_decided_at=100.5)
    assert not gang_rules.failed_before(PEER_FAILED, 0, first_exit_at=100.0, stop_decided_at=100.5)
    assert not gang_rules.failed_before(USER_STOP, 1, first_exit_at=100.0, stop_decided_at=100.5)


def test_a_lone_node_has_no_gang_to_fail_or_lose():
    assert gang_rules.failure_reason(LoneNode(), 1) is None
    with pytest.raises(TypeError):
        gang_rules.lost_reason(LoneNode(), [1])


def test_a_peer_failing_now_is_described_by_its_reason():
    """A node whose GPU raised a hardware XID tells the others while its part is still ending (gpu_watch.py): its
    heartbeat carries the outcome and the reason, and no exit code yet."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.gang import describe

    failing = {"attempt": 1, "phase": HeartbeatPhase.RUNNING, "outcome": JobState.FAILED, "exit_code": None,
               "reason": "node1 GPU 1 (0000:19:00.0): XID 79, GPU has fallen off the bus"}
    assert describe("node1", 1, failing) == \
        "node1 (node_rank 1) failed: node1 GPU 1 (0000:19:00.0): XID 79, GPU has fallen off the bus"
    assert describe("node1", 1, dict(failing, phase=HeartbeatPhase.ENDED, exit_code=1)) == \
        "node1 (node_rank 1) failed with exit code 1"
    # Its ended part, when that is the first news heard of it (the two heartbeats in one read): still the fault.
    assert describe("node1", 1, dict(failing, phase=HeartbeatPhase.ENDED, exit_code=143, signal="SIGTERM",
                                     hardware_fault=True)) == \
        "node1 (node_rank 1) failed: node1 GPU 1 (0000:19:00.0): XID 79, GPU has fallen off the bus"


HOSTS = ("node0", "node1", "node2")
RANK_FAILED = [{"rank": 0, "outcome": "stopped", "stopped_for": "node1"}, {"rank": 1, "outcome": "failed", "exit_code": 7},
               {"rank": 2, "outcome": "stopped", "stopped_for": "node1"}]
HUNG = [{"rank": r, "outcome": "hung", "exit_code": 143, "reason": "hung: no node wrote to its log for 9 s "
         "(hang_timeout=8)"} for r in range(3)]


def test_a_restart_says_why_and_the_same_failure_soon_after_a_restart_stops_the_restarts():
    first = gang_rules.restart_decision(RANK_FAILED, HOSTS.__getitem__, None, 5.0, 300)
    assert first.refused is None and first.reason == "node1 (node_rank 1) failed with exit code 7"
    again = gang_rules.restart_decision(RANK_FAILED, HOSTS.__getitem__, first.signature, 40.0, 300)
    assert again.refused == ("not restarting: the same failure twice within 300 s of a restart (min_progress_s): "
                             "node1 (node_rank 1) failed with exit code 7")
    # The same failure after the restart had run min_progress_s is a new one; so is another failure soon.
    assert gang_rules.restart_decision(RANK_FAILED, HOSTS.__getitem__, first.signature, 301.0, 300).refused is None
    other = [dict(part, exit_code=9) if part["rank"] == 1 else part for part in RANK_FAILED]
    assert gang_rules.restart_decision(other, HOSTS.__getitem__, first.signature, 40.0, 300).refused is None
    moved = [dict(part, rank=(part["rank"] + 1) % 3) for part in RANK_FAILED]  # node2 failed this time
    assert gang_rules.restart_decision(moved, HOSTS.__getitem__, first.signature, 40.0, 300).refused is None


def test_a_hang_restarts_and_hangs_again_soon_is_the_same_failure_whatever_the_exit_codes():
    first = gang_rules.restart_decision(HUNG, HOSTS.__getitem__, None, 20.0, 300)
    assert first.refused is None and first.reason == "hung: no node wrote to its log for 9 s (hang_timeout=8)"
    again = [dict(part, exit_code=137) for part in HUNG]
    assert gang_rules.restart_decision(again, HOSTS.__getitem__, first.signature, 20.0, 300).refused.startswith(
        "not restarting: the same failure twice within 300 s of a restart (min_progress_s): hung: ")


def test_a_hardware_fault_is_refused_before_any_other_rule():
    fault = [{"rank": 1, "outcome": "failed", "hardware_fault": True, "reason": "node1 GPU 0: XID 79"}]
    decision = gang_rules.restart_decision(fault, HOSTS.__getitem__, None, 5.0, 300)
    assert decision.refused.startswith("not restarting: node1 GPU 0: XID 79 is a hardware fault")


def test_a_lost_node_with_no_spare_is_not_restarted_and_named():
    parts = [{"rank": 0, "outcome": "stopped", "stopped_for": "node2"}]
    decision = gang_rules.restart_decision(parts, HOSTS.__getitem__, None, 50.0, 300, lost={"node2": 1700000000.0})
    assert decision.refused == "not restarting: node2 lost, and no spare node is available to take its place"
    assert decision.reason == "node2 lost"
