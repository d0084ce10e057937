"""Every rank's stack on a hang (module_utils/_runtime/rank_stacks.py): real Python processes read by the real py-spy (the
venv's, pinned as python_env pins it), found by their run token by the supervisor's rank watch. What this does not
check: ranks of torchrun on several nodes (tests/cluster/test_hang_stacks.py does), a node where ptrace is refused
(its wording is checked with a py-spy stand-in that answers as py-spy does)."""

import os
import subprocess
import sys
import uuid

import pytest
from waiting import wait_for

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import rank_stacks
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_processes import TOKEN_VAR, RankWatch

# A token unique to this test session: two sessions on one machine must not read each other's "ranks".
TOKEN = "t-%s.0" % uuid.uuid4().hex[:8]
STUCK = "import time\ndef stuck_in_here():\n    time.sleep(600)\nprint('ready', flush=True)\nstuck_in_here()\n"


@pytest.fixture
def ranks(tmp_path):
    """Two 'ranks' of the session's token (RANK 4 and 5), each a Python stuck in stuck_in_here (script.py line 3)."""
    script = tmp_path / "script.py"
    script.write_text(STUCK)
    started = []
    for rank in (4, 5):
        env = dict(os.environ, **{TOKEN_VAR: TOKEN, "RANK": str(rank), "LOCAL_RANK": str(rank - 4)})
        started.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE))
    for proc in started:
        assert proc.stdout.readline() == b"ready\n"
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def dump(tmp_path, python):
    """The ranks as the supervisor's rank watch finds them (by the run token, their rank from their environment),
    read."""
    watch = RankWatch(TOKEN)
    watch.scan()
    try:
        found = rank_stacks.StackDump(str(tmp_path), "node2", python, watch.rank_of_pid)
        wait_for(found.done, timeout=30)
        return found.finish()
    finally:
        watch.close()


def test_each_rank_s_stack_is_read_and_written_naming_its_rank_and_frame(tmp_path, ranks):
    stacks = dump(tmp_path, sys.executable)  # py-spy beside the venv's python
    assert stacks["error"] is None and stacks["file"] == "stacks.txt"
    assert [(r["rank"], r["local_rank"], r["pid"], r["error"]) for r in stacks["ranks"]] == [
        (4, 0, ranks[0].pid, None), (5, 1, ranks[1].pid, None)]
    for rank in stacks["ranks"]:
        assert rank["frames"][0][0] == "stuck_in_here" and rank["frames"][0][2] == 3
        assert rank["frames"][0][1].endswith("script.py") and rank["frames"][1][0] == "<module>"
    text = (tmp_path / "stacks.txt").read_text()
    assert "=== node2 rank 4 (local rank 0, pid %d) ===" % ranks[0].pid in text
    assert "    stuck_in_here (%s:3)" % (tmp_path / "script.py") in text


def test_without_py_spy_the_node_says_so_and_writes_nothing(tmp_path, ranks, monkeypatch):
    del ranks
    monkeypatch.setenv("PATH", str(tmp_path))
    stacks = dump(tmp_path, "/nowhere/bin/python")
    assert stacks["error"] == ("py-spy is not on this node (neither beside /nowhere/bin/python nor on PATH): "
                               "provision.yml --tags python_env installs it")
    assert stacks["ranks"] == [] and stacks["file"] is None and not (tmp_path / "stacks.txt").exists()


def test_a_rank_py_spy_may_not_read_is_named_with_py_spy_s_words(tmp_path, ranks):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    fake = bin_dir / "py-spy"  # answers as py-spy 0.4.1 does when ptrace is refused
    fake.write_text("#!/bin/sh\necho 'Error: Failed to open process - check if it is running.' >&2\n"
                    "echo 'Reason: Operation not permitted (os error 1)' >&2\nexit 1\n")
    fake.chmod(0o755)
    stacks = dump(tmp_path, str(bin_dir / "python"))
    assert [r["rank"] for r in stacks["ranks"]] == [4, 5] and all(r["frames"] == [] for r in stacks["ranks"])
    assert stacks["ranks"][0]["error"] == (
        "py-spy: Error: Failed to open process - check if it is running. Reason: Operation not permitted (os error 1) "
        "(reading another process needs the same user and kernel.yama.ptrace_scope 0, or root)")
    assert "not read: py-spy: Error: Failed to open process" in (tmp_path / "stacks.txt").read_text()


def test_no_rank_found_is_said(tmp_path):
    stacks = dump(tmp_path, sys.executable)
    assert stacks["error"] == "no rank process of the job found on this node" and stacks["ranks"] == []


def test_where_a_hang_was_is_each_ranks_innermost_frame_without_its_line():
    stacks = {"ranks": [{"rank": 0, "frames": [["wait", "c10d.py", 10], ["step", "train.py", 5]]},
                        {"rank": 1, "frames": [["wait", "c10d.py", 12]]}, {"rank": 2, "error": "gone", "frames": []}]}
    assert rank_stacks.hung_in(stacks) == "wait (c10d.py)"
    assert rank_stacks.hung_in(None) is None and rank_stacks.hung_in({"ranks": []}) is None
