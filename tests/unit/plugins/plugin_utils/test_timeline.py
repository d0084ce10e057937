"""One timeline of a job (plugin_utils/_postmortem/timeline.py): every node's events in time order, on node 0's clock."""

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._postmortem import timeline

T = 1795612000.0  # 2026-11-16 ... UTC, any instant


def test_events_of_nodes_whose_clocks_differ_are_put_in_order_on_node_0_s_clock():
    # node1's clock is 2.5 s behind node0's (and the heartbeat's trip 1 ms): its hang at its 11.0 s was at node0's
    # 13.5 s, after node0's own at 13.2 s, although its own stamp is earlier.
    results = [
        {"host": "node0", "clock_offsets": {"node1": 2.501, "node2": -0.2}, "events": [
            [T + 10.0, "attempt 1 of 1, master port 29500"], [T + 13.2, "hung: no node wrote to its log for 8 s"]]},
        {"host": "node1", "events": [[T + 7.5, "attempt 1 of 1, master port 29500"], [T + 11.0, "stacks of ranks 2, 3"]]},
        {"host": "node2", "events": [[T + 13.6, "rank 4 (local rank 0, pid 9) ended"]]},
    ]
    lines = timeline.merge(results)
    assert lines[0] == ("# every node's events on node0's clock (UTC); node0 +0.000 s, node1 +2.501 s, "
                        "node2 -0.200 s")
    assert [line.split("  ", 1)[1] for line in lines[1:]] == [
        "node0  attempt 1 of 1, master port 29500", "node1  attempt 1 of 1, master port 29500",
        "node0  hung: no node wrote to its log for 8 s", "node2  rank 4 (local rank 0, pid 9) ended",
        "node1  stacks of ranks 2, 3"]
    assert lines[4].startswith("2026-") and lines[4][:23].endswith(".400")  # node2's 13.6 s less 0.2 s


def test_a_node_node_0_never_heard_keeps_its_clock_and_the_header_says_so():
    results = [{"host": "node0", "events": [[T, "a"]]}, {"host": "node1", "events": [[T - 1, "b"]]}]
    lines = timeline.merge(results)
    assert lines[0].endswith("node1 not measured: its own clock")
    assert [line.rsplit("  ", 1)[1] for line in lines[1:]] == ["b", "a"]
    assert timeline.merge([]) == ["# every node's events on node 0's clock (UTC); "]


def test_a_node_s_events_are_kept_with_their_time_and_the_latest_when_many():
    from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import job_events

    state = {}
    events = job_events.Events(state)
    events.add("attempt 1 of 1, master port 29500", at=T)
    events.rank_ended(41, 4, 0)
    events.rank_ended(42, None, None)
    assert state["events"][0] == [T, "attempt 1 of 1, master port 29500"]
    assert [what for _at, what in state["events"][1:]] == ["rank 4 (local rank 0, pid 41) ended", "a rank (pid 42) ended"]
    for number in range(job_events.EVENTS_KEPT + 10):
        events.add("restart %d" % number)
    assert len(state["events"]) == job_events.EVENTS_KEPT and state["events"][-1][1] == "restart %d" % (
        job_events.EVENTS_KEPT + 9)
