"""The fleet's history and quarantine (plugin_utils/_control/history.py): which faults a job's results record, the
quarantine rule (hardware faults within the window, since the last release; a node lost or an application's failure
does not count), the release, and the refusals of bad settings and of a history line that is not a record."""

import json

import pytest

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import history

DAY = 86400.0
NOW = 1_800_000_000.0
XID = "XID 79 on GPU 0 (0000:18:00.0): GPU has fallen off the bus"


def fault(node, days_ago, klass="gpu", job="j"):
    return history.record(node, "fault", XID, job, klass, at=NOW - days_ago * DAY)


def test_a_job_records_hardware_faults_and_lost_nodes_but_not_the_application_s_failures():
    results = [{"host": "node0", "state": "failed", "exit_code": 1},  # the rank's own exception: not recorded
               {"host": "node1", "state": "failed", "gpu_fault": XID},
               {"host": "node2", "state": "stopped"}]
    replaced = {"node2": {"by": "spare0", "why": "node2 lost", "hardware_fault": False, "at": NOW},
                "node3": {"by": "spare1", "why": XID, "hardware_fault": True, "at": NOW}}
    found = history.job_faults("llm", results, replaced, at=NOW)
    assert [(f["node"], f["class"], f["fact"]) for f in found] == [
        ("node2", "node lost", "replaced by spare0: node2 lost"),
        ("node3", "gpu", "replaced by spare1: " + XID),
        ("node1", "gpu", XID)]
    assert all(f["kind"] == "fault" and f["job"] == "llm" for f in found)
    left = {"node1": {"attempt": 2, "why": "node1 failed: " + XID, "hardware_fault": True, "at": NOW}}
    assert [(f["node"], f["class"], f["fact"]) for f in history.job_faults("llm", results, {}, at=NOW, left_out=left)
            ] == [("node1", "gpu", "left out from attempt 2: node1 failed: " + XID)]  # once, not again for gpu_fault


def test_three_hardware_faults_in_the_window_quarantine_and_a_release_returns_the_node():
    records = [fault("node7", 6), fault("node7", 3), fault("node7", 1, klass="node lost"), fault("node1", 1)]
    window = history.window_seconds("7d")
    assert history.quarantined(history.standing(records, ["node7", "node1"], 3, window, NOW)) == {}
    assert history.warnings(history.standing(records, ["node7"], 3, window, NOW), 3, "7d")[0].startswith(
        "node7 has had 2 hardware fault(s) within 7d (3 quarantine it): ")
    records.append(fault("node7", 0, klass="network"))
    held = history.quarantined(history.standing(records, ["node7", "node1"], 3, window, NOW))
    assert list(held) == ["node7"] and len(held["node7"]) == 3
    said = history.refusal("node7", held["node7"], "7d", "/logs/history.jsonl")
    assert said.startswith("node7 is quarantined: 3 hardware faults within 7d (")
    assert "(job j): " + XID in said and "-e release=node7" in said and "/logs/history.jsonl" in said
    # Older than the window: not counted.
    assert history.quarantined(history.standing(records, ["node7"], 3, history.window_seconds("2d"), NOW)) == {}
    released = history.release(records, "node7", ["node1", "node7"], 3, window, NOW)
    assert released["kind"] == "release" and released["node"] == "node7"
    records.append(released)
    assert history.quarantined(history.standing(records, ["node7"], 3, window, NOW)) == {}
    assert history.standing(records, ["node7"], 3, window, NOW)["node7"]["state"] == "in service"


def test_release_refuses_a_node_not_quarantined_or_not_in_the_inventory():
    records = [fault("node7", 1)]
    with pytest.raises(history.HistoryError, match=r"^release=node9: no such node in the inventory$"):
        history.release(records, "node9", ["node7"], 3, DAY * 7, NOW)
    with pytest.raises(history.HistoryError, match=r"^release=node7: the node is neither quarantined \(1 hardware fault"):
        history.release(records, "node7", ["node7"], 3, DAY * 7, NOW)


@pytest.mark.parametrize("text, seconds", [("7d", 7 * DAY), ("36h", 36 * 3600.0), ("90m", 5400.0), ("3600", 3600.0),
                                           ("2w", 14 * DAY), (" 1.5d ", 1.5 * DAY)])
def test_windows_parse(text, seconds):
    assert history.window_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "7 days", "-1d", "0", "d7", "1y", None])
def test_a_window_that_does_not_parse_is_refused_naming_the_variable(text):
    with pytest.raises(history.HistoryError, match=r"^gpufleet_quarantine_window=.* does not parse"):
        history.window_seconds(text)


@pytest.mark.parametrize("value", ["0", "-2", "three", "1.5"])
def test_quarantine_after_must_be_1_or_more(value):
    with pytest.raises(history.HistoryError, match=r"^gpufleet_quarantine_after="):
        history.quarantine_after(value)


def test_the_history_is_appended_never_rewritten_and_a_bad_line_is_refused_naming_it(tmp_path):
    path = str(tmp_path / "logs" / "history.jsonl")
    assert history.read(path) == []
    history.append(path, [fault("node1", 1)])
    history.append(path, [fault("node2", 0)])
    assert [r["node"] for r in history.read(path)] == ["node1", "node2"]
    with open(path, "a") as handle:
        handle.write('{"node": "node3", "kind": "fault"\n')
    before = open(path).read()
    with pytest.raises(history.HistoryError, match=r"history\.jsonl, line 3, is not JSON .*mend or remove that line"):
        history.read(path)
    assert open(path).read() == before  # left as it was
    (tmp_path / "other.jsonl").write_text(json.dumps(["node1"]) + "\n")
    with pytest.raises(history.HistoryError, match=r"line 1, is not a record with a node and a kind"):
        history.read(str(tmp_path / "other.jsonl"))


def test_the_standing_table_has_a_line_per_node():
    records = [fault("node7", 1), fault("node7", 1), fault("node7", 1)]
    table = history.standing_table(history.standing(records, ["node1", "node7"], 3, 7 * DAY, NOW)).splitlines()
    assert table[0].split() == ["node", "state", "faults", "last", "health", "check", "GPUs", "driver", "last",
                                "fault", "or", "release"]
    assert table[2].split() == ["node1", "in", "service", "0", "never", "-", "-", "-"]
    assert table[3].split()[:4] == ["node7", "quarantined", "3", "never"]
    # A health check is shown with what it saw, and is not the last fault.
    records.append(history.check("node7", "refused", "GPU 0: a row remap is pending", 8, "580.95.05", at=NOW))
    row = history.standing_table(history.standing(records, ["node7"], 3, 7 * DAY, NOW)).splitlines()[2]
    assert " refused  8     580.95.05  " in row and row.endswith(": %s" % records[2]["fact"])


def test_a_report_read_again_records_nothing_twice_but_a_new_run_of_the_same_job_does():
    results = [{"host": "node1", "gpu_fault": XID, "run_id": "r1", "ended_at": NOW}]
    first = history.job_faults("llm", results, {})
    assert first[0]["run"] == "r1" and first[0]["at"] == NOW
    assert history.not_yet_recorded(first, history.job_faults("llm", results, {})) == []  # stop.yml after train.yml
    again = history.job_faults("llm", [dict(results[0], run_id="r2")], {})
    assert history.not_yet_recorded(first, again) == again


def test_a_spare_in_service_takes_a_quarantined_node_s_place_in_rank_order():
    records = [fault("node1", day) for day in (1, 2, 3)] + [fault("spare0", day) for day in (1, 2, 3)]
    found = history.standing(records, ["node0", "node1", "node2", "spare0", "spare1"], 3, 7 * DAY, NOW)
    placed, left, said = history.stand_in(["node0", "node1", "node2"], ["spare0", "spare1"], found, "7d", "/h")
    assert placed == ["node0", "spare1", "node2"] and left == []
    assert said[0].startswith("spare spare0 is quarantined (3 hardware faults within 7d: ") and said[0].endswith(
        ") and left out")
    assert said[1].startswith("node1 is quarantined (3 hardware faults within 7d: ") and said[1].endswith(
        "); spare spare1 takes its place (node_rank 1)")


def test_a_quarantined_node_no_spare_is_left_for_is_refused_naming_its_faults():
    records = [fault(node, day) for node in ("node0", "node1") for day in (1, 2, 3)]
    found = history.standing(records, ["node0", "node1", "spare0"], 3, 7 * DAY, NOW)
    with pytest.raises(history.HistoryError) as refused:
        history.stand_in(["node0", "node1"], ["spare0"], found, "7d", "/h")
    said = str(refused.value)
    assert "node1 is quarantined: 3 hardware faults within 7d (" in said and "node0 is quarantined" not in said
    assert said.endswith("no spare in service is left to take its place")
    assert history.stand_in(["node0"], ["spare0"], found, "7d", "/h")[:2] == (["spare0"], [])
