"""job_wait's pause between two polls ends as soon as Ctrl-C is pressed on the controller."""

import json
import threading
import time

from ansible_collections.gpufleet.cluster.plugins.action import job_wait


def test_the_pause_between_polls_ends_at_ctrl_c(tmp_path, monkeypatch):
    flag = tmp_path / "interrupted"
    monkeypatch.setenv(job_wait.INTERRUPT_VAR, str(flag))
    threading.Timer(0.3, flag.touch).start()
    started = time.monotonic()
    job_wait.sleep_unless_interrupted(30)
    assert time.monotonic() - started < 10  # woken by the flag, not after the 30 s


def test_the_pause_is_whole_without_ctrl_c(tmp_path, monkeypatch):
    monkeypatch.setenv(job_wait.INTERRUPT_VAR, str(tmp_path / "never"))
    started = time.monotonic()
    job_wait.sleep_unless_interrupted(0.3)
    assert time.monotonic() - started >= 0.3


# The wait's loop, with the node replaced by two callables (status and stop).

def job(state, **extra):
    return {"jobs": [dict({"state": state}, **extra)]}


class FakeNode:
    """Answers job_status from a script of answers (the last one repeats) and records job_stop's reasons."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.stops = []
        self.cancels = []
        self.tails = []

    def status(self, tail):
        self.tails.append(tail)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def stop(self, reason, cancel_scheduler=True, stopped_for=None):
        self.stops.append(reason)
        self.stopped_for = stopped_for
        self.cancels.append(cancel_scheduler)


def gang_wait(tmp_path, node, host="node1", hosts=("node0", "node1"), **options):
    said = []
    options.setdefault("poll_s", 0)
    wait = job_wait.GangWait(host, 1, list(hosts), str(tmp_path / "gang"), node.status, node.stop, say=said.append,
                             **options)
    return wait, said


def test_polls_until_the_part_ends_and_returns_the_final_state_with_the_tail(tmp_path, monkeypatch):
    monkeypatch.delenv(job_wait.INTERRUPT_VAR, raising=False)
    node = FakeNode(job("running"), job("running"), job("succeeded", exit_code=0), job("succeeded", tail=["done"]))
    wait, _ = gang_wait(tmp_path, node)
    final = wait.run(tail=7)
    assert final == {"state": "succeeded", "tail": ["done"], "host": "node1", "node_rank": 1}
    assert node.tails == [None, None, None, 7] and node.stops == []
    # Every poll told the other waits this node's state.
    assert json.loads((tmp_path / "gang" / "node1.json").read_text())["state"] == "succeeded"


def test_another_nodes_failure_stops_this_part_once_naming_that_node(tmp_path, monkeypatch):
    monkeypatch.delenv(job_wait.INTERRUPT_VAR, raising=False)
    job_wait.write_state(str(tmp_path / "gang"), "node0", {"host": "node0", "node_rank": 0, "state": "failed",
                                                           "ended_at": 5.0, "stopped_for": None})
    node = FakeNode(job("running"), job("running"), job("stopped"))
    wait, said = gang_wait(tmp_path, node)
    final = wait.run(tail=30)
    assert node.stops == ["stopped by gpufleet: node0 (node_rank 0) failed"]
    assert node.stopped_for == "node0"  # the supervisor takes the stop as the gang's (test_supervisor.py)
    assert final["stopped_for"] == "node0" and final["state"] == "stopped"
    assert said == ["  [node1] stopped by gpufleet: node0 (node_rank 0) failed; stopping this node's part"]


def test_a_peer_stopped_for_another_node_is_not_a_cause(tmp_path):
    gang = str(tmp_path / "gang")
    job_wait.write_state(gang, "node0", {"host": "node0", "state": "stopped", "ended_at": 1.0, "stopped_for": "node2"})
    job_wait.write_state(gang, "node2", {"host": "node2", "state": "hung", "ended_at": 2.0, "stopped_for": None})
    assert job_wait.first_peer_failure(gang, "node1", ["node0", "node1", "node2"])["host"] == "node2"
    assert job_wait.first_peer_failure(gang, "node2", ["node0", "node1", "node2"]) is None


def test_a_node_that_stops_answering_is_unreachable_after_max_misses(tmp_path, monkeypatch):
    monkeypatch.delenv(job_wait.INTERRUPT_VAR, raising=False)
    node = FakeNode(job("running"), {"failed": True, "msg": "ssh: timeout"})
    wait, _ = gang_wait(tmp_path, node, max_misses=3)
    final = wait.run(tail=30)
    assert final["state"] == "unreachable" and final["error"] == "ssh: timeout"
    assert node.tails == [None, None, None, None]  # 1 answer, 3 misses; no final poll of an unreachable node


def test_progress_says_a_new_attempt_and_changed_lines_only(tmp_path, monkeypatch):
    monkeypatch.delenv(job_wait.INTERRUPT_VAR, raising=False)
    node = FakeNode(job("running", last_line="epoch 1", attempt=1), job("running", last_line="epoch 1", attempt=1),
                    job("running", last_line="epoch 1", attempt=2, max_restarts=1, master_port=29501),
                    job("succeeded"))
    wait, said = gang_wait(tmp_path, node, progress=True, progress_s=0)
    wait.run(tail=0)
    assert said[0] == "  waiting for the job on every node; the master's last log line every 0 s:"
    assert [line.split("] ", 1)[1] for line in said[1:]] == [
        "epoch 1", "the job failed; attempt 2 of 2 on master port 29501"]


def test_ctrl_c_stops_this_part_and_marks_the_result(tmp_path, monkeypatch):
    flag = tmp_path / "interrupted"
    flag.touch()
    monkeypatch.setenv(job_wait.INTERRUPT_VAR, str(flag))
    node = FakeNode(job("running"), job("stopped"))
    wait, _ = gang_wait(tmp_path, node)
    final = wait.run(tail=30)
    assert node.stops == ["stopped by gpufleet: interrupted on the controller (Ctrl-C)"]
    assert final["interrupted"] is True
    assert node.cancels == [True]  # Ctrl-C cancels a Slurm job too


def test_a_gang_stop_leaves_the_slurm_job_to_end_by_itself(tmp_path, monkeypatch):
    monkeypatch.delenv(job_wait.INTERRUPT_VAR, raising=False)
    job_wait.write_state(str(tmp_path / "gang"), "node0", {"host": "node0", "node_rank": 0, "state": "failed",
                                                           "ended_at": 5.0, "stopped_for": None})
    node = FakeNode(job("running"), job("stopped"))
    gang_wait(tmp_path, node)[0].run(tail=0)
    assert node.cancels == [False]  # so that Slurm records the job as failed, not cancelled


def test_progress_says_slurm_s_queue_state_as_it_changes_then_the_start(tmp_path, monkeypatch):
    monkeypatch.delenv(job_wait.INTERRUPT_VAR, raising=False)
    queued = {"slurm_job_id": "7"}
    node = FakeNode(job("queued", slurm={"state": "PENDING", "reason": "None"}, **queued),
                    job("queued", slurm={"state": "PENDING", "reason": "Resources"}, **queued),
                    job("queued", slurm={"state": "PENDING", "reason": "Resources"}, **queued),
                    job("starting", slurm={"state": "RUNNING", "job_id": "7", "nodes": "node[7-9]"}, **queued),
                    job("running", last_line="epoch 1"), job("succeeded"))
    wait, said = gang_wait(tmp_path, node, progress=True, progress_s=0)
    wait.run(tail=0)
    assert said[0].startswith("  waiting for the job on every node")
    assert [line.split("] ", 1)[1] for line in said[1:]] == [
        "Slurm job 7: pending", "Slurm job 7: pending (Resources)", "Slurm job 7 started", "epoch 1"]
