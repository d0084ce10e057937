"""job_wait's pause between two polls ends as soon as Ctrl-C is pressed on the controller."""

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


def node_wait(node, host="node1", **options):
    said = []
    options.setdefault("poll_s", 0)
    wait = job_wait.NodeWait(host, 1, node.status, node.stop, say=said.append, **options)
    return wait, said


def test_polls_until_the_part_ends_and_returns_the_final_state_with_the_tail(monkeypatch):
    monkeypatch.delenv(job_wait.INTERRUPT_VAR, raising=False)
    node = FakeNode(job("running"), job("running"), job("succeeded", exit_code=0), job("succeeded", tail=["done"]))
    wait, _ = node_wait(node)
    final = wait.run(tail=7)
    assert final == {"state": "succeeded", "tail": ["done"], "host": "node1", "node_rank": 1}
    assert node.tails == [None, None, None, 7] and node.stops == []


def test_a_part_the_supervisors_stopped_for_another_node_is_reported_so_and_the_wait_stops_nothing(monkeypatch):
    # The nodes' supervisors are the one fail-fast authority (gang_rules.py): node0 failed, so node1's supervisor
    # stopped node1's part and recorded why; the wait reads that from node1 and stops nothing itself.
    monkeypatch.delenv(job_wait.INTERRUPT_VAR, raising=False)
    stopped = job("stopped", stopped_for="node0", stop_reason="stopped by gpufleet: node0 (node_rank 0) failed with "
                                                              "exit code 1")
    node = FakeNode(job("running"), job("running"), stopped)
    wait, said = node_wait(node)
    final = wait.run(tail=30)
    assert node.stops == [] and said == []
    assert final["state"] == "stopped" and final["stopped_for"] == "node0"
    assert final["stop_reason"] == "stopped by gpufleet: node0 (node_rank 0) failed with exit code 1"


def test_a_node_that_stops_answering_is_unreachable_after_max_misses(monkeypatch):
    monkeypatch.delenv(job_wait.INTERRUPT_VAR, raising=False)
    node = FakeNode(job("running"), {"failed": True, "msg": "ssh: timeout"})
    wait, _ = node_wait(node, max_misses=3)
    final = wait.run(tail=30)
    assert final["state"] == "unreachable" and final["error"] == "ssh: timeout"
    assert node.tails == [None, None, None, None]  # 1 answer, 3 misses; no final poll of an unreachable node


def test_progress_says_a_new_attempt_and_changed_lines_only(monkeypatch):
    monkeypatch.delenv(job_wait.INTERRUPT_VAR, raising=False)
    node = FakeNode(job("running", last_line="epoch 1", attempt=1), job("running", last_line="epoch 1", attempt=1),
                    job("running", last_line="epoch 1", attempt=2, max_restarts=1, master_port=29501),
                    job("succeeded"))
    wait, said = node_wait(node, progress=True, progress_s=0)
    wait.run(tail=0)
    assert said[0] == "  waiting for the job on every node; the master's last log line every 0 s:"
    assert [line.split("] ", 1)[1] for line in said[1:]] == [
        "epoch 1", "the job failed; attempt 2 of 2 on master port 29501"]


def test_ctrl_c_stops_this_part_and_marks_the_result(tmp_path, monkeypatch):
    flag = tmp_path / "interrupted"
    flag.touch()
    monkeypatch.setenv(job_wait.INTERRUPT_VAR, str(flag))
    node = FakeNode(job("running"), job("stopped"))
    wait, _ = node_wait(node)
    final = wait.run(tail=30)
    assert node.stops == ["stopped by gpufleet: interrupted on the controller (Ctrl-C)"]
    assert final["interrupted"] is True
    assert node.cancels == [True]  # Ctrl-C cancels a Slurm job too


def test_progress_says_slurm_s_queue_state_as_it_changes_then_the_start(monkeypatch):
    monkeypatch.delenv(job_wait.INTERRUPT_VAR, raising=False)
    queued = {"slurm_job_id": "7"}
    node = FakeNode(job("queued", slurm={"state": "PENDING", "reason": "None"}, **queued),
                    job("queued", slurm={"state": "PENDING", "reason": "Resources"}, **queued),
                    job("queued", slurm={"state": "PENDING", "reason": "Resources"}, **queued),
                    job("starting", slurm={"state": "RUNNING", "job_id": "7", "nodes": "node[7-9]"}, **queued),
                    job("running", last_line="epoch 1"), job("succeeded"))
    wait, said = node_wait(node, progress=True, progress_s=0)
    wait.run(tail=0)
    assert said[0].startswith("  waiting for the job on every node")
    assert [line.split("] ", 1)[1] for line in said[1:]] == [
        "Slurm job 7: pending", "Slurm job 7: pending (Resources)", "Slurm job 7 started", "epoch 1"]


# The wake board: a steady part's node polls less often than the master; a change seen by any node's wait wakes the
# others at once.

def test_a_steady_peer_polls_less_often_than_the_progress_node_and_every_node_without_a_board(tmp_path):
    board = job_wait.WakeBoard(str(tmp_path / "wake"))
    pauses = {}
    for name, options, state in (("peer", {"board": board}, "running"), ("standby", {"board": board}, "standby"),
                                 ("master", {"board": board, "progress": True}, "running"),
                                 ("stopping", {"board": board}, "stopping"), ("no board", {}, "running")):
        wait, _ = node_wait(FakeNode(job(state)), poll_s=2, **options)
        wait.current = {"state": state}
        pauses[name] = wait.pause()
    assert pauses == {"peer": 2 * job_wait.PEER_POLL_FACTOR, "standby": 2 * job_wait.PEER_POLL_FACTOR,
                      "master": 2, "stopping": 2, "no board": 2}


def test_a_word_on_the_board_ends_another_waits_pause_at_once_but_not_its_own(tmp_path):
    path = str(tmp_path / "wake")
    mine, other = job_wait.WakeBoard(path), job_wait.WakeBoard(path)
    mine.tell()
    assert not mine.woken()  # its own word
    threading.Timer(0.3, mine.tell).start()
    started = time.monotonic()
    assert job_wait.sleep_unless_interrupted(30, woken=other.woken) is True
    assert time.monotonic() - started < 10  # woken by the board, not after the 30 s
    assert not job_wait.sleep_unless_interrupted(0.1, woken=other.woken)  # nothing new since


def test_a_new_state_a_new_attempt_a_miss_and_the_end_are_told_the_first_poll_is_not(tmp_path, monkeypatch):
    monkeypatch.delenv(job_wait.INTERRUPT_VAR, raising=False)
    path = tmp_path / "wake"
    node = FakeNode(job("running", attempt=1), job("running", attempt=1), job("running", attempt=2),
                    {"failed": True, "msg": "ssh: timeout"}, job("running", attempt=2), job("stopping", attempt=2),
                    job("stopped", attempt=2), job("stopped", tail=[]))
    wait, _ = node_wait(node, board=job_wait.WakeBoard(str(path)))
    assert wait.run(tail=0)["state"] == "stopped"
    # attempt 2, the miss, stopping, stopped (the poll after the miss is "running, attempt 2" again: not told).
    assert path.read_bytes() == b"...."


def test_a_woken_peer_polls_at_once_then_every_poll_s_for_a_while(tmp_path, monkeypatch):
    monkeypatch.delenv(job_wait.INTERRUPT_VAR, raising=False)
    path = str(tmp_path / "wake")
    wait, _ = node_wait(FakeNode(job("running")), poll_s=2, board=job_wait.WakeBoard(path))
    wait.current = {"state": "running"}
    assert wait.pause() == 2 * job_wait.PEER_POLL_FACTOR
    threading.Timer(0.3, job_wait.WakeBoard(path).tell).start()  # another node's wait, during this one's pause
    started = time.monotonic()
    wait.rest()
    assert time.monotonic() - started < 5  # not the 10 s pause
    assert wait.pause() == 2  # and every poll_s from now, for FAST_AFTER_WAKE_S
    wait.fast_until = time.monotonic()
    assert wait.pause() == 2 * job_wait.PEER_POLL_FACTOR
