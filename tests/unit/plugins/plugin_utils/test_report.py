"""The summary table and the failure message: the first failure by time, named by host, rank and exit code."""

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._postmortem import report

OK = {"host": "node0", "node_rank": 0, "state": "succeeded", "exit_code": 0, "duration_s": 75.2, "log": "logs/j/node0.log"}


def test_table_has_one_aligned_line_per_node_in_order():
    rows = [OK, dict(OK, host="node1", node_rank=1, duration_s=3725)]
    lines = report.format_table(rows).splitlines()
    assert lines[0].split() == ["node", "rank", "state", "exit", "attempts", "duration", "log"]
    assert lines[2].split() == ["node0", "0", "succeeded", "0", "-", "1:15", "logs/j/node0.log"]
    assert lines[3].split() == ["node1", "1", "succeeded", "0", "-", "1:02:05", "logs/j/node0.log"]
    assert lines[0].index("state") == lines[2].index("succeeded") == lines[3].index("succeeded")


def test_table_shows_the_workers_exit_code_and_gang_stops():
    failed = {"host": "n1", "node_rank": 1, "state": "failed", "exit_code": 1,
              "root_cause": {"rank": 3, "local_rank": 1, "exit_code": 3}}
    stopped = {"host": "n0", "node_rank": 0, "state": "stopped", "exit_code": 1, "stopped_for": "n1"}
    rows = report.table_rows([stopped, failed])
    assert rows[0]["state"] == "stopped (gang)"
    assert rows[1]["exit"] == "3"


def test_job_column_for_status():
    assert report.format_table([dict(OK, job="llama")], show_job=True).splitlines()[0].split()[:2] == ["node", "job"]


def test_slurm_column_only_for_jobs_run_by_slurm():
    assert "slurm" not in report.format_table([OK]).splitlines()[0]
    table = report.format_table([dict(OK, slurm={"job_id": "12", "state": "FAILED"}), OK]).splitlines()
    assert table[0].split() == ["node", "rank", "state", "exit", "attempts", "duration", "slurm", "log"]
    assert "12 FAILED" in table[2] and " - " in table[3]


def test_no_failure_no_message():
    assert report.failure_message("j", [OK]) is None


def test_first_failure_by_time_and_stopped_nodes_are_not_the_cause():
    results = [
        dict(OK, state="stopped", ended_at=5.0, stopped_for="node2"),
        dict(OK, host="node1", node_rank=1, state="failed", exit_code=7, ended_at=9.0, log_tail=["later"]),
        dict(OK, host="node2", node_rank=2, state="failed", exit_code=1, ended_at=4.0,
             root_cause={"rank": 5, "local_rank": 1, "exit_code": 3}, log_tail=["x%d" % i for i in range(40)]),
    ]
    message = report.failure_message("train", results)
    first_line = message.splitlines()[0]
    assert first_line.startswith("job train failed on node2 (node_rank 2): global rank 5 (local rank 1) exited with code 3")
    assert "; failed after it: node1; stopped on the other nodes: node0." in first_line
    assert message.splitlines()[1] == "Last 30 lines of node2 (logs/j/node0.log):"
    assert message.splitlines()[2:] == ["x%d" % i for i in range(10, 40)]


def test_a_node_whose_rank_ended_before_it_was_stopped_says_so():
    first = dict(OK, state="failed", exit_code=143, signal="SIGTERM", first_exit_at=2.0, rank_ended_first=True)
    later = dict(OK, host="node1", node_rank=1, state="failed", exit_code=3, first_exit_at=3.0)
    assert report.failure_message("j", [first, later]).splitlines()[0] == (
        "job j failed on node0 (node_rank 0): a rank ended first, and then the launcher was killed by SIGTERM; "
        "failed after it: node1.")


def test_signal_and_unreachable_messages():
    root = {"rank": 0, "local_rank": 0, "exit_code": -9, "signal": "SIGKILL"}
    killed = dict(OK, state="failed", exit_code=137, signal=None, root_cause=root)
    assert "was killed by SIGKILL" in report.failure_message("j", [killed])
    gone = dict(OK, state="unreachable")
    assert "stopped answering" in report.failure_message("j", [gone])


def test_attempts_column_counts_the_gang_relaunches():
    rows = report.table_rows([dict(OK, attempts=[{"attempt": 1}, {"attempt": 2}])])
    assert rows[0]["attempts"] == "2"


def test_a_hung_job_is_reported_as_hung_not_as_one_nodes_failure():
    reason = "hung: no node wrote to its log for 31 s (hang_timeout=30)"
    results = [dict(OK, state="hung", stop_reason=reason, ended_at=3.0),
               dict(OK, host="node1", node_rank=1, state="hung", stop_reason=reason, ended_at=2.0)]
    message = report.failure_message("j", results)
    assert message == "job j hung and was stopped on every node: %s." % reason


def test_a_hung_job_that_restarted_says_why_each_restart_happened_and_why_the_restarts_stopped():
    reason = "hung: no node wrote to its log for 9 s (hang_timeout=8)"
    refused = "not restarting: the same failure twice within 300 s of a restart (min_progress_s): %s" % reason
    results = [dict(OK, host=host, node_rank=rank, state="hung", stop_reason=reason, ended_at=3.0, restarts=[reason],
                    no_restart=refused) for rank, host in enumerate(("node0", "node1"))]
    assert report.restarts_said(results) == "attempt 2 after: %s" % reason
    assert report.restarts_said([OK]) == ""
    assert report.failure_message("j", results) == "job j hung and was stopped on every node: %s; %s." % (
        reason, refused)


def test_a_hung_job_with_stacks_names_the_odd_rank_and_where_the_stacks_are():
    reason = "hung: no node wrote to its log for 31 s (hang_timeout=30)"
    waiting = [["all_reduce", "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 2941],
               ["main", "/w/train.py", 42]]
    sleeping = [["slow", "/w/train.py", 12], ["main", "/w/train.py", 40]]

    def stacks(*ranks):
        return {"file": "stacks.txt", "error": None, "ranks": [
            {"rank": rank, "local_rank": 0, "pid": 9, "error": None, "frames": frames} for rank, frames in ranks]}
    results = [dict(OK, state="hung", stop_reason=reason, stacks=stacks((0, waiting))),
               dict(OK, host="node1", node_rank=1, state="hung", stop_reason=reason, log="logs/j/node1.log",
                    stacks=stacks((1, sleeping)), ended_at=1.0),
               dict(OK, host="node2", node_rank=2, state="hung", stop_reason=reason, log="logs/j/node2.log",
                    stacks=stacks((2, waiting)))]
    assert report.failure_message("j", results) == (
        "job j hung and was stopped on every node: %s; ranks 0, 2 in all_reduce (train.py:42), rank 1 in slow "
        "(train.py:12): rank 1 on node1 is the likely cause; every rank's stack: logs/j/node0.stacks.txt, "
        "logs/j/node1.stacks.txt, logs/j/node2.stacks.txt." % reason)


def test_an_interrupted_job_fails_and_says_so():
    results = [dict(OK, state="stopped", interrupted=True), dict(OK, host="node1", state="stopped", interrupted=True)]
    assert report.table_rows(results)[0]["state"] == "stopped (Ctrl-C)"
    message = report.failure_message("j", results)
    assert message.startswith("job j was interrupted on the controller (Ctrl-C) and stopped on every node")


def test_the_recorded_error_is_in_the_failure_message():
    failed = dict(OK, host="n1", node_rank=1, state="failed", exit_code=1,
                  root_cause={"rank": 3, "local_rank": 1, "exit_code": 1, "error": "ValueError: loss is NaN"})
    message = report.failure_message("j", [failed])
    assert message.startswith("job j failed on n1 (node_rank 1): global rank 3 (local rank 1) exited with code 1: "
                              "ValueError: loss is NaN.")


def test_the_first_failure_is_the_first_process_exit_not_the_first_launcher_end():
    # node1's rank was killed first; node0's ranks failed a moment later in a collective but its launcher ended first.
    results = [dict(OK, state="failed", exit_code=1, first_exit_at=10.02, ended_at=10.3),
               dict(OK, host="node1", node_rank=1, state="failed", exit_code=1, first_exit_at=10.0, ended_at=10.9)]
    assert report.first_failure(results)["host"] == "node1"


def test_a_lost_node_came_first_when_the_others_last_heard_it_before_the_collective_failed():
    results = [dict(OK, state="stopped", stopped_for="node1", peers_lost={"node1": 99.4}),
               dict(OK, host="node1", node_rank=1, state="lost", lost_reason="the supervisor (pid 7) is gone"),
               dict(OK, host="node2", node_rank=2, state="failed", exit_code=1, first_exit_at=100.0, ended_at=100.2)]
    assert report.first_failure(results)["host"] == "node1"
    assert "job j failed on node1 (node_rank 1): the supervisor (pid 7) is gone" in report.failure_message("j", results)


def test_a_lost_node_that_no_peer_counted_lost_comes_first_by_when_it_was_last_heard():
    # The others ended before counting node1 lost (node2's rank failed in a collective with node1's dead ranks):
    # what they recorded is when they last heard node1, before node2's rank failed.
    results = [dict(OK, state="stopped", stopped_for="node2", peers_last_heard={"node1": 99.1, "node2": 100.1}),
               dict(OK, host="node1", node_rank=1, state="lost", lost_reason="the supervisor (pid 7) is gone"),
               dict(OK, host="node2", node_rank=2, state="failed", exit_code=1, first_exit_at=100.0, ended_at=100.2,
                    peers_last_heard={"node1": 99.6, "node0": 100.2})]
    assert report.first_failure(results)["host"] == "node1"


def test_a_rank_that_ran_on_another_node_than_the_launcher_is_named_with_its_node():
    failed = dict(OK, state="failed", exit_code=3,
                  root_cause={"rank": 4, "local_rank": 0, "exit_code": 3, "host": "node2"})
    assert report.failure_message("j", [failed]).startswith(
        "job j failed on node0 (node_rank 0): global rank 4 (local rank 0 on node2) exited with code 3")


def test_a_hardware_xid_is_the_cause_even_when_a_rank_elsewhere_exited_first():
    """node1's GPU fell off the bus (its supervisor's gpu_watch); node0's rank failed in a collective a moment before
    node1's own part ended: the XID is named, and the table marks it."""
    xid = "node1 GPU 1 (0000:19:00.0): XID 79, GPU has fallen off the bus"
    node0 = {"host": "node0", "node_rank": 0, "state": "failed", "exit_code": 1, "first_exit_at": 100.2,
             "root_cause": {"rank": 0, "local_rank": 0, "exit_code": 1}}
    node1 = {"host": "node1", "node_rank": 1, "state": "failed", "exit_code": 1, "first_exit_at": 100.9,
             "gpu_fault": xid, "gpu_fault_at": 100.1, "stop_reason": xid}
    node2 = {"host": "node2", "node_rank": 2, "state": "stopped", "exit_code": 1, "stopped_for": "node1"}
    assert report.first_failure([node0, node1, node2]) is node1
    assert report.failure_message("j", [node0, node1, node2]) == (
        "job j failed on node1 (node_rank 1): node1 GPU 1 (0000:19:00.0): XID 79, GPU has fallen off the bus; failed "
        "after it: node0; stopped on the other nodes: node2.")
    assert [row["state"] for row in report.table_rows([node0, node1, node2])] == [
        "failed", "failed (XID 79)", "stopped (gang)"]
    node1["no_restart"] = "not restarting: %s is a hardware fault, which a restart on the same nodes would meet again" % xid
    assert report.failure_message("j", [node0, node1, node2]).startswith(
        "job j failed on node1 (node_rank 1): %s (not restarted: a restart on the same nodes would meet it again); "
        "failed after it: node0" % xid)


# -- spares: the node a spare replaced is not the job's failure ------------------------------------------------------

REPLACED = {"node_rank": 1, "host": "node1", "by": "node2", "attempt": 2, "why": "node1 lost; node2 takes node_rank 1",
            "at": 1700000000.0}


def test_a_node_a_spare_replaced_is_marked_and_is_not_the_jobs_failure():
    results = [{"host": "node0", "node_rank": 0, "state": "succeeded", "exit_code": 0, "replaced": [REPLACED]},
               {"host": "node1", "node_rank": 1, "state": "unreachable"},
               {"host": "node2", "node_rank": 1, "state": "succeeded", "exit_code": 0,
                "took_place_of": {"node_rank": 1, "host": "node1", "attempt": 2}}]
    assert report.failure_message("j", results) is None
    rows = report.table_rows(results)
    assert [(r["host"], r["node_rank"], r["state"]) for r in rows] == [
        ("node0", "0", "succeeded"), ("node1", "1", "replaced by node2"), ("node2", "1", "succeeded")]
    assert report.replacements_said(results) == (
        "node2 replaced node1 (node_rank 1) from attempt 2, after: node1 lost; node2 takes node_rank 1")


def test_a_node_the_gang_went_on_without_is_marked_left_out_and_not_the_jobs_failure():
    why = "node2 lost; the gang goes on without node2 (node_rank 2) on 2 nodes (min_nodes=2)"
    left = {"node_rank": 2, "host": "node2", "attempt": 2, "why": why, "at": 1.0, "nodes": 2, "hardware_fault": False}
    results = [{"host": "node0", "node_rank": 0, "state": "succeeded", "exit_code": 0, "left_out": [left]},
               {"host": "node1", "node_rank": 1, "state": "succeeded", "exit_code": 0, "left_out": [left]},
               {"host": "node2", "node_rank": 2, "state": "unreachable"}]
    assert report.failure_message("j", results) is None
    assert [(r["host"], r["state"]) for r in report.table_rows(results)] == [
        ("node0", "succeeded"), ("node1", "succeeded"), ("node2", "left out (attempt 2)")]
    assert report.left_out_said(results) == "attempt 2 ran on 2 of 3 nodes, without node2 (node_rank 2), after: " + why
    assert report.left_out_said([{"host": "node0"}]) == ""


def test_after_a_replacement_the_failure_of_the_last_attempt_is_the_one_named():
    results = [{"host": "node0", "node_rank": 0, "state": "stopped", "stopped_for": "node2", "replaced": [REPLACED]},
               {"host": "node1", "node_rank": 1, "state": "unreachable"},
               {"host": "node2", "node_rank": 1, "state": "failed", "exit_code": 3}]
    message = report.failure_message("j", results)
    assert message.startswith("job j failed on node2 (node_rank 1): the launcher exited with code 3"), message
    assert "node1" not in message.split(".")[0]
    assert report.replacements_said([{"host": "node0"}]) == ""


def test_what_earlier_attempts_left_is_said_by_attempt_with_where_it_was_fetched():
    kept = [{"attempt": 1, "dir": "/j/attempts/1", "files": ["stacks.txt", "flight_recorder/rank_0"]},
            {"attempt": 2, "dir": "/j/attempts/2", "files": ["flight_recorder/rank_0"]}]
    results = [dict(OK, host="node0", earlier_attempts=kept),
               dict(OK, host="node1", earlier_attempts=[{"attempt": 1, "dir": "/j/attempts/1",
                                                          "files": ["stacks.txt", "flight_recorder/rank_1"]}]),
               dict(OK, host="node2")]
    assert report.earlier_attempts_said(results, "logs/llama") == (
        "logs/llama/attempt1/ (stacks of 2 nodes, 2 flight recorder dumps); logs/llama/attempt2/ (1 flight recorder dump)")
    assert report.earlier_attempts_said([OK], "logs/llama") == ""
