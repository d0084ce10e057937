"""The gang's rules (module_utils/_runtime/gang_rules.py) as pure decisions, without sockets or processes; the supervisors
that apply them on real heartbeats are tested in test_supervisor.py and on the container cluster. Each node's part is
written as its heartbeat carries it on the wire, and read as the supervisor reads it (heartbeat.Heartbeat)."""

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import gang_rules
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gang import LoneNode
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.heartbeat import Heartbeat
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import HeartbeatPhase, JobState, StopReason

PEER_FAILED = StopReason(JobState.STOPPED, "stopped by gpufleet: node1 (node_rank 1) failed with exit code 1", "node1")
USER_STOP = StopReason(JobState.STOPPED, "stopped by SIGTERM", None)


def beats(parts):
    """The parts, each as the supervisor reads a heartbeat that carried it."""
    return [Heartbeat.from_wire(part) for part in parts]


def restart_decision(parts, *args, **kwargs):
    return gang_rules.restart_decision(beats(parts), *args, **kwargs)


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
    assert gang_rules.attempt_verdict(beats(parts), stop_requested) == verdict


def test_a_hardware_fault_on_any_node_refuses_the_restart():
    fault = "node1 GPU 3 (0000:bb:00.0): XID 79, GPU has fallen off the bus"
    assert gang_rules.no_restart_for(beats([{"outcome": "stopped", "stopped_for": "node1"},
                                      {"outcome": "failed", "reason": fault, "hardware_fault": True}])) == (
        "not restarting: %s is a hardware fault, which a restart on the same nodes would meet again" % fault)
    assert gang_rules.no_restart_for(beats([{"outcome": "failed", "exit_code": 1}, {"outcome": "stopped"}])) is None
    assert gang_rules.no_restart_for(beats([{"outcome": "failed", "hardware_fault": False}])) is None


@pytest.mark.parametrize("news, done", [
    ({"attempt": 1, "phase": HeartbeatPhase.ENDED}, True),
    ({"attempt": 1, "phase": HeartbeatPhase.RUNNING}, False),
    ({"attempt": 2, "phase": HeartbeatPhase.RUNNING}, True),  # it has moved on
    ({"attempt": 1, "phase": HeartbeatPhase.RUNNING, "final": True}, True),
    ({}, False),
])
def test_a_peer_is_done_with_the_attempt(news, done):
    assert gang_rules.peer_done(Heartbeat.from_wire(news), 1) is done


def test_a_launcher_already_ending_on_its_own_gets_its_grace_but_not_for_a_users_stop():
    assert gang_rules.ending_on_its_own(PEER_FAILED, first_exit_at=100.0)
    assert not gang_rules.ending_on_its_own(PEER_FAILED, first_exit_at=None)
    assert not gang_rules.ending_on_its_own(USER_STOP, first_exit_at=100.0)


def test_a_node_that_failed_before_the_news_counts_as_failed():
    assert gang_rules.failed_before(PEER_FAILED, 1, first_exit_at=100.0, stop_decided_at=100.5)
    assert not gang_rules.failed_before(PEER_FAILED, 1, first_exit_at=101.0, stop_decided_at=100.5)
    assert not gang_rules.failed_before(PEER_FAILED, 0, first_exit_at=100.0, stop_decided_at=100.5)
    assert not gang_rules.failed_before(USER_STOP, 1, first_exit_at=100.0, stop_decided_at=100.5)
    assert not gang_rules.failed_before(USER_STOP, 1, first_exit_at=100.0, stop_decided_at=100.5, failed_first=True)


BARE_SIGTERM = StopReason(JobState.STOPPED, "stopped by SIGTERM", None, False, True)


def test_a_bare_signal_after_a_rank_of_this_node_failed_on_its_own_is_that_failure():
    """Slurm's --kill-on-bad-exit SIGTERMs this node's supervisor once the others' parts ended at its news."""
    assert gang_rules.failed_before(BARE_SIGTERM, 143, first_exit_at=100.0, stop_decided_at=100.5, failed_first=True)
    # A rank that ended well, or after the signal, or a launcher that ended well: the signal's stop.
    assert not gang_rules.failed_before(BARE_SIGTERM, 143, first_exit_at=100.0, stop_decided_at=100.5)
    assert not gang_rules.failed_before(BARE_SIGTERM, 143, first_exit_at=101.0, stop_decided_at=100.5,
                                        failed_first=True)
    assert not gang_rules.failed_before(BARE_SIGTERM, 0, first_exit_at=100.0, stop_decided_at=100.5, failed_first=True)


def test_a_lone_node_has_no_gang_to_fail_or_lose():
    assert gang_rules.failure_reason(LoneNode(), 1) is None
    with pytest.raises(TypeError):
        gang_rules.lost_reason(LoneNode(), [1])


def test_a_peer_failing_now_is_described_by_its_reason():
    """A node whose GPU raised a hardware XID tells the others while its part is still ending (gpu_watch.py): its
    heartbeat carries the outcome and the reason, and no exit code yet."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gang_rules import describe

    failing = {"attempt": 1, "phase": HeartbeatPhase.RUNNING, "outcome": JobState.FAILED, "exit_code": None,
               "reason": "node1 GPU 1 (0000:19:00.0): XID 79, GPU has fallen off the bus"}
    assert describe("node1", 1, Heartbeat.from_wire(failing)) == \
        "node1 (node_rank 1) failed: node1 GPU 1 (0000:19:00.0): XID 79, GPU has fallen off the bus"
    assert describe("node1", 1, Heartbeat.from_wire(dict(failing, phase=HeartbeatPhase.ENDED, exit_code=1))) == \
        "node1 (node_rank 1) failed with exit code 1"
    # Its ended part, when that is the first news heard of it (the two heartbeats in one read): still the fault.
    assert describe("node1", 1, Heartbeat.from_wire(dict(failing, phase=HeartbeatPhase.ENDED, exit_code=143,
                                                         signal="SIGTERM", hardware_fault=True))) == \
        "node1 (node_rank 1) failed: node1 GPU 1 (0000:19:00.0): XID 79, GPU has fallen off the bus"


def test_a_part_that_succeeded_is_described_so():
    """The timeline's "this node's part ended: ..." of a part that succeeded said "was stopped (stop requested)"
    (seen on a lent H200, 2026-11-27)."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gang_rules import describe

    assert describe("node0", 0, Heartbeat(rank=0, attempt=1, outcome=JobState.SUCCEEDED)) == "node0 (node_rank 0) succeeded"


HOSTS = ("node0", "node1", "node2")
RANK_FAILED = [{"rank": 0, "outcome": "stopped", "stopped_for": "node1"}, {"rank": 1, "outcome": "failed", "exit_code": 7},
               {"rank": 2, "outcome": "stopped", "stopped_for": "node1"}]
HUNG = [{"rank": r, "outcome": "hung", "exit_code": 143, "reason": "hung: no node wrote to its log for 9 s "
         "(hang_timeout=8)"} for r in range(3)]


def test_a_restart_says_why_and_the_same_failure_soon_after_a_restart_stops_the_restarts():
    first = restart_decision(RANK_FAILED, HOSTS.__getitem__, None, 5.0, 300)
    assert first.refused is None and first.reason == "node1 (node_rank 1) failed with exit code 7"
    again = restart_decision(RANK_FAILED, HOSTS.__getitem__, first.signature, 40.0, 300)
    assert again.refused == ("not restarting: the same failure twice within 300 s of a restart (min_progress_s): "
                             "node1 (node_rank 1) failed with exit code 7")
    # The same failure after the restart had run min_progress_s is a new one; so is another failure soon.
    assert restart_decision(RANK_FAILED, HOSTS.__getitem__, first.signature, 301.0, 300).refused is None
    other = [dict(part, exit_code=9) if part["rank"] == 1 else part for part in RANK_FAILED]
    assert restart_decision(other, HOSTS.__getitem__, first.signature, 40.0, 300).refused is None
    moved = [dict(part, rank=(part["rank"] + 1) % 3) for part in RANK_FAILED]  # node2 failed this time
    assert restart_decision(moved, HOSTS.__getitem__, first.signature, 40.0, 300).refused is None


def test_a_hang_restarts_and_hangs_again_soon_is_the_same_failure_whatever_the_exit_codes():
    first = restart_decision(HUNG, HOSTS.__getitem__, None, 20.0, 300)
    assert first.refused is None and first.reason == "hung: no node wrote to its log for 9 s (hang_timeout=8)"
    again = [dict(part, exit_code=137) for part in HUNG]
    assert restart_decision(again, HOSTS.__getitem__, first.signature, 20.0, 300).refused.startswith(
        "not restarting: the same failure twice within 300 s of a restart (min_progress_s): hung: ")


def test_a_hardware_fault_is_refused_before_any_other_rule():
    fault = [{"rank": 1, "outcome": "failed", "hardware_fault": True, "reason": "node1 GPU 0: XID 79"}]
    decision = restart_decision(fault, HOSTS.__getitem__, None, 5.0, 300)
    assert decision.refused.startswith("not restarting: node1 GPU 0: XID 79 is a hardware fault")


def test_a_lost_node_with_no_spare_is_not_restarted_and_named():
    parts = [{"rank": 0, "outcome": "stopped", "stopped_for": "node2"}]
    decision = restart_decision(parts, HOSTS.__getitem__, None, 50.0, 300, lost={"node2": 1700000000.0})
    assert decision.refused == "not restarting: node2 lost, and no spare node is available to take its place"
    assert decision.reason == "node2 lost"


# -- spares: who replaces whom (gang_rules.placing, restart_decision with a SpareView) ----------------------------

MEMBERS = ["node0", "node1", "node2"]


def test_a_lost_node_is_replaced_by_the_first_ready_spare_at_its_node_rank():
    parts = [{"rank": 0, "outcome": "stopped", "stopped_for": "node1"}, {"rank": 2, "outcome": "stopped"}]
    view = gang_rules.SpareView(MEMBERS, ["spare0", "spare1"], 0)
    decision = restart_decision(parts, HOSTS.__getitem__, None, 50.0, 300, lost={"node1": 1.0}, spares=view)
    assert decision.refused is None and decision.replaced == {1: "spare0"}
    assert decision.reason == "node1 lost; spare0 takes node_rank 1"


def test_two_lost_nodes_take_the_spares_in_inventory_order_by_node_rank():
    view = gang_rules.SpareView(MEMBERS + ["node3", "node4"], ["spare0", "spare1", "spare2"], 0)
    assert gang_rules.placing([4, 1], view) == ({1: "spare0", 4: "spare1"}, ())
    # A gang is launched whole or not at all (min_nodes all of them): two bad nodes and one spare replace nothing.
    assert gang_rules.placing([4, 1], view._replace(ready=["spare0"])) == ({}, ())
    # With min_nodes=4 of 5, the spare takes node_rank 1 and the gang goes on without node4.
    assert gang_rules.placing([4, 1], view._replace(ready=["spare0"], min_nodes=4)) == ({1: "spare0"}, (4,))
    assert gang_rules.placing([4, 1], view._replace(ready=[], min_nodes=4)) == ({}, ())
    assert gang_rules.placing([4, 1], view._replace(ready=[], min_nodes=3)) == ({}, (1, 4))


def test_no_ready_spare_left_is_the_no_spare_refusal():
    view = gang_rules.SpareView(MEMBERS, [], 0)
    decision = restart_decision([{"rank": 0, "outcome": "stopped"}], HOSTS.__getitem__, None, 50.0, 300,
                                           lost={"node2": 1.0}, spares=view)
    assert decision.refused == "not restarting: node2 lost, and no spare node is available to take its place"
    assert decision.replaced == {}


def test_a_node_that_hears_half_the_gang_or_less_replaces_nobody():
    """The side that may be cut off does not restart: it hears a minority, or exactly half without node 0."""
    parts = [{"rank": 2, "outcome": "stopped"}]
    cut_off = restart_decision(parts, HOSTS.__getitem__, None, 50.0, 300, lost={"node0": 1.0, "node1": 1.0},
                                          spares=gang_rules.SpareView(MEMBERS, ["spare0", "spare1"], 2))
    assert cut_off.refused == ("not restarting: this node (node2) lost contact with node0, node1, half the gang or "
                               "more; if it is the one cut off, the others carry on without it")
    two = ["node0", "node1"]
    # Two nodes: node0 alone with node 0 goes on; node1 alone, without node 0, does not.
    assert restart_decision(parts, HOSTS.__getitem__, None, 5.0, 300, lost={"node1": 1.0},
                                       spares=gang_rules.SpareView(two, ["spare0"], 0)).replaced == {1: "spare0"}
    assert restart_decision(parts, HOSTS.__getitem__, None, 5.0, 300, lost={"node0": 1.0},
                                       spares=gang_rules.SpareView(two, ["spare0"], 1)).refused.startswith(
        "not restarting: this node (node1) lost contact with node0, half the gang or more")


def test_a_hardware_fault_is_replaced_by_a_spare_instead_of_refused():
    fault = [{"rank": 0, "outcome": "stopped", "stopped_for": "node1"},
             {"rank": 1, "outcome": "failed", "hardware_fault": True, "reason": "node1 GPU 0: XID 79"}]
    decision = restart_decision(fault, HOSTS.__getitem__, None, 5.0, 300,
                                           spares=gang_rules.SpareView(MEMBERS, ["spare0"], 0))
    assert decision.refused is None and decision.replaced == {1: "spare0"}
    assert decision.reason == "node1 (node_rank 1) failed: node1 GPU 0: XID 79; spare0 takes node_rank 1"
    # Without a ready spare, the fault refuses the restart as before.
    assert restart_decision(fault, HOSTS.__getitem__, None, 5.0, 300, spares=gang_rules.SpareView(
        MEMBERS, [], 0)).refused.startswith("not restarting: node1 GPU 0: XID 79 is a hardware fault")


def test_a_hang_in_the_same_frame_is_the_same_failure_and_in_another_frame_is_not():
    def hung(where):
        return [dict(part, hung_in=where) for part in HUNG]
    first = restart_decision(hung("wait (torch/distributed/c10d.py)"), HOSTS.__getitem__, None, 20.0, 300)
    again = restart_decision(hung("wait (torch/distributed/c10d.py)"), HOSTS.__getitem__, first.signature,
                                        20.0, 300)
    assert again.refused.startswith("not restarting: the same failure twice within 300 s")
    elsewhere = restart_decision(hung("load (train.py)"), HOSTS.__getitem__, first.signature, 20.0, 300)
    assert elsewhere.refused is None


def test_a_node_that_decides_late_follows_the_members_a_peer_announced():
    """n2 counts node0 lost after node1 has already replaced it (and the spare, a member now, is no longer ready):
    it takes node1's members as they are rather than refusing for want of a spare."""
    parts = [{"rank": 2, "outcome": "stopped", "stopped_for": "node0"}]
    view = gang_rules.SpareView(MEMBERS, [], 2, (["spare0", "node1", "node2"], "node0 lost; spare0 takes node_rank 0"))
    decision = restart_decision(parts, HOSTS.__getitem__, None, 5.0, 300, lost={"node0": 1.0}, spares=view)
    assert decision.refused is None and decision.replaced == {0: "spare0"}
    assert decision.reason == "node0 lost; spare0 takes node_rank 0"
    # A node the others replaced (it was cut off, and they carried on) does not restart: its place is taken.
    mine = view._replace(rank=0, announced=(["spare0", "node1", "node2"], "node0 lost; spare0 takes node_rank 0"))
    assert restart_decision(parts, HOSTS.__getitem__, None, 5.0, 300, lost={"node1": 1.0, "node2": 1.0},
                                       spares=mine).refused == (
        "not restarting: spare0 took this node's place (node0, node_rank 0): node0 lost; spare0 takes node_rank 0")


# -- min_nodes: the gang goes on smaller (gang_rules.placing, next_members, changes) ---------------------------------

SHRUNK = "node2 lost; the gang goes on without node2 (node_rank 2) on 2 nodes (min_nodes=2)"


def test_a_lost_node_with_no_spare_is_left_out_while_min_nodes_remain():
    parts = [{"rank": 0, "outcome": "stopped", "stopped_for": "node2"}, {"rank": 1, "outcome": "stopped"}]
    view = gang_rules.SpareView(MEMBERS, [], 0, None, 2)
    decision = restart_decision(parts, HOSTS.__getitem__, None, 50.0, 300, lost={"node2": 1.0}, spares=view)
    assert decision.refused is None and decision.dropped == (2,) and decision.replaced == {}
    assert decision.reason == SHRUNK
    assert gang_rules.next_members(MEMBERS, decision.replaced, decision.dropped) == ["node0", "node1"]
    # node0 lost: node1 and node2 go on, renumbered 0 and 1 (node1 the new node 0).
    first = restart_decision(parts, HOSTS.__getitem__, None, 50.0, 300, lost={"node0": 1.0},
                             spares=view._replace(rank=1))
    assert first.dropped == (0,) and gang_rules.next_members(MEMBERS, {}, first.dropped) == ["node1", "node2"]


def test_min_nodes_all_of_them_ends_the_job_naming_the_lost_node_and_too_few_says_min_nodes():
    parts = [{"rank": 0, "outcome": "stopped", "stopped_for": "node2"}]
    whole = restart_decision(parts, HOSTS.__getitem__, None, 50.0, 300, lost={"node2": 1.0})
    assert whole.refused == "not restarting: node2 lost, and no spare node is available to take its place"
    four = MEMBERS + ["node3"]
    too_few = restart_decision(parts, (four).__getitem__, None, 50.0, 300, lost={"node2": 1.0, "node3": 1.0},
                               spares=gang_rules.SpareView(four, [], 0, None, 3))
    assert too_few.refused == ("not restarting: node2, node3 lost, and no spare node is available to take their "
                               "place, and the 2 nodes left would be fewer than min_nodes=3")


def test_a_hardware_fault_under_min_nodes_leaves_the_node_out_and_the_node_itself_ends():
    fault = [{"rank": 0, "outcome": "stopped", "stopped_for": "node1"},
             {"rank": 1, "outcome": "failed", "hardware_fault": True, "reason": "node1 GPU 0: XID 79"}]
    view = gang_rules.SpareView(MEMBERS, [], 0, None, 2)
    decision = restart_decision(fault, HOSTS.__getitem__, None, 5.0, 300, spares=view)
    assert decision.refused is None and decision.dropped == (1,)
    assert decision.reason == ("node1 (node_rank 1) failed: node1 GPU 0: XID 79; the gang goes on without node1 "
                               "(node_rank 1) on 2 nodes (min_nodes=2)")
    own = restart_decision(fault[1:], HOSTS.__getitem__, None, 5.0, 300, spares=view._replace(rank=1))
    assert own.refused.startswith("not restarting: the gang goes on without this node (node1, node_rank 1): node1 "
                                  "(node_rank 1) failed: node1 GPU 0: XID 79")
    # With a spare, the faulted node's own decision is that the spare took its place (not that it goes on itself).
    spared = restart_decision(fault[1:], HOSTS.__getitem__, None, 5.0, 300,
                              spares=gang_rules.SpareView(MEMBERS, ["spare0"], 1))
    assert spared.refused.startswith("not restarting: spare0 took this node's place (node1, node_rank 1)")


def test_a_spare_takes_the_first_bad_rank_and_the_gang_goes_on_without_the_next():
    parts = [{"rank": 0, "outcome": "stopped"}]
    view = gang_rules.SpareView(MEMBERS, ["spare0"], 0, None, 2)
    decision = restart_decision(parts, HOSTS.__getitem__, None, 5.0, 300, lost={"node1": 1.0, "node2": 2.0},
                                spares=view._replace(members=MEMBERS + ["node3"]))
    assert decision.replaced == {1: "spare0"} and decision.dropped == (2,)
    assert decision.reason == ("node1, node2 lost; spare0 takes node_rank 1; the gang goes on without node2 "
                               "(node_rank 2) on 3 nodes (min_nodes=2)")
    assert gang_rules.changes(MEMBERS + ["node3"], ["node0", "spare0", "node3"]) == ({1: "spare0"}, (2,))


def test_a_node_that_decides_late_follows_a_shrink_a_peer_announced():
    parts = [{"rank": 1, "outcome": "stopped", "stopped_for": "node2"}]
    view = gang_rules.SpareView(MEMBERS, [], 1, (["node0", "node1"], SHRUNK), 2)
    decision = restart_decision(parts, HOSTS.__getitem__, None, 5.0, 300, spares=view)
    assert decision.refused is None and decision.dropped == (2,) and decision.reason == SHRUNK
    left = restart_decision(parts, HOSTS.__getitem__, None, 5.0, 300, spares=view._replace(rank=2))
    assert left.refused == "not restarting: the gang goes on without this node (node2, node_rank 2): " + SHRUNK


def test_a_peers_part_of_an_attempt_is_kept_after_it_moved_on_to_the_next():
    """A faster peer ends attempt 1, restarts and beats for attempt 2 before this node has waited for the peers: its
    news of attempt 1 is still what this node judges attempt 1 by (a loaded machine made this node read the part
    as failed, and the restart reason was then 'n0 failed with exit code None' instead of the hang both had)."""
    import socket

    from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gang import Gang

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    gang = Gang({"node_rank": 1, "run_id": "r", "nodes": [["n0", "127.0.0.1"], ["n1", "127.0.0.1"]],
                 "master_port": port}, b"k")
    try:
        ended = {"run": "r", "rank": 0, "host": "n0", "attempt": 1, "phase": HeartbeatPhase.ENDED,
                 "outcome": JobState.HUNG, "reason": "hung: no node wrote to its log for 2 s"}
        gang._take(Heartbeat.from_wire(ended))  # pylint: disable=protected-access
        gang._take(Heartbeat.from_wire({"run": "r", "rank": 0, "host": "n0",  # pylint: disable=protected-access
                                        "attempt": 2, "phase": HeartbeatPhase.RUNNING}))
        assert gang.news[0].attempt == 2 and gang_rules.peer_done(gang.news[0], 1)
        assert gang.news_of(0, 1) == Heartbeat.from_wire(ended) and gang.news_of(0, 3) is None
        assert LoneNode().news_of(0, 1) is None
    finally:
        gang.close()


# Node 1's rank 5 raised at train.py:88 and exited 1 (torchrun, its launcher, exited 1 too).
RAISED = [{"rank": 0, "outcome": "stopped", "stopped_for": "node1"},
          {"rank": 1, "outcome": "failed", "exit_code": 1, "failed_rank": 5, "rank_exit": 1, "failed_at": "train.py:88"},
          {"rank": 2, "outcome": "stopped", "stopped_for": "node1"}]


@pytest.mark.parametrize("parts, lost, cause", [
    (RANK_FAILED, None, ("rank_exit", 7)),  # the launcher's code where the rank's was not read
    (RAISED, None, ("rank_exit", 1)),
    ([dict(RAISED[1], rank_exit=137)], None, ("rank_exit", 137)),  # the rank's own, not torchrun's 1
    (HUNG, None, ("hang", None)),
    (RANK_FAILED, {"node2": 100.0}, ("node_lost", None)),
    ([{"rank": 0, "outcome": "failed", "hardware_fault": True, "reason": "XID 79"}], None, ("hardware_fault", None)),
])
def test_a_failed_attempt_is_put_down_to_one_cause(parts, lost, cause):
    assert gang_rules.failure_cause(beats(parts), lost) == cause


@pytest.mark.parametrize("restart_on, refused", [
    (("hang", "node_lost"), "not restarting: a rank's failure (exit code 1) is not among the causes this job "
                            "restarts on (restart_on: hang, node_lost)"),
    (("1",), None),
    (("137",), "not restarting: a rank's failure (exit code 1) is not among"),
])
def test_a_rank_failure_restarts_only_when_restart_on_names_it_or_its_exit_code(restart_on, refused):
    decision = restart_decision(RAISED, HOSTS.__getitem__, None, 5.0, 300, restart_on=restart_on)
    assert (decision.refused or "").startswith(refused or "") and bool(decision.refused) == bool(refused), decision


def test_a_hang_or_a_lost_node_restarts_only_when_restart_on_names_it():
    assert restart_decision(HUNG, HOSTS.__getitem__, None, 20.0, 300, restart_on=("rank_exit",)).refused == (
        "not restarting: a hang is not among the causes this job restarts on (restart_on: rank_exit)")
    spares = gang_rules.SpareView(HOSTS, ("spare0",), 0)
    lost = restart_decision(RANK_FAILED, HOSTS.__getitem__, None, 5.0, 300, {"node2": 1.0}, spares,
                            restart_on=("hang",))
    assert lost.refused.startswith("not restarting: a node lost is not among") and lost.replaced == {}
    kept = restart_decision(RANK_FAILED, HOSTS.__getitem__, None, 5.0, 300, {"node2": 1.0}, spares)
    assert kept.refused is None and kept.replaced == {2: "spare0"}  # the default names node_lost


def test_a_rank_failing_twice_at_the_same_place_is_the_scripts_own_failure_however_long_it_ran():
    first = restart_decision(RAISED, HOSTS.__getitem__, None, 5.0, 300)
    assert first.refused is None
    said = ("not restarting: rank 5 (node1) failed twice in a row in train.py:88 with exit code 1: the script's own "
            "failure, which a restart would meet again")
    assert restart_decision(RAISED, HOSTS.__getitem__, first.signature, 5.0, 300).refused == said
    assert restart_decision(RAISED, HOSTS.__getitem__, first.signature, 86400.0, 300).refused == said
    assert restart_decision(RAISED, HOSTS.__getitem__, first.signature, 86400.0, 0).refused == said
    # Another place, another exit code, or no traceback: not the same failure at the same place.
    for change in ({"failed_at": "train.py:90"}, {"rank_exit": 137}):
        other = [dict(part, **change) if part["rank"] == 1 else part for part in RAISED]
        assert restart_decision(other, HOSTS.__getitem__, first.signature, 400.0, 300).refused is None
    # The rank's own exit code read in one attempt and not in the other (the rank ended before the supervisor's scan
    # found it: seen on a loaded machine, where a third attempt ran): the same failure, either way round. The part's
    # exit code still decides: another one is another failure.
    unread = [dict(part, rank_exit=None) if part["rank"] == 1 else part for part in RAISED]
    assert restart_decision(unread, HOSTS.__getitem__, first.signature, 5.0, 300).refused == said
    read_later = restart_decision(RAISED, HOSTS.__getitem__,
                                  restart_decision(unread, HOSTS.__getitem__, None, 5.0, 300).signature, 5.0, 300)
    assert read_later.refused == said
    other_part_exit = [dict(part, exit_code=2) if part["rank"] == 1 else part for part in unread]
    assert restart_decision(other_part_exit, HOSTS.__getitem__, first.signature, 5.0, 300).refused is None
    without = [dict(part, failed_at=None) if part["rank"] == 1 else part for part in RAISED]
    earlier = restart_decision(without, HOSTS.__getitem__, None, 5.0, 300).signature
    assert restart_decision(without, HOSTS.__getitem__, earlier, 400.0, 300).refused is None  # ran past min_progress_s
    assert restart_decision(without, HOSTS.__getitem__, earlier, 40.0, 300).refused.startswith(
        "not restarting: the same failure twice within 300 s")  # today's guard, where no place is known
