"""Every rank's stack on a hang (module_utils/_runtime/rank_stacks.py): real Python processes read by the real py-spy (the
venv's, pinned as python_env pins it), found by their run token by the supervisor's rank watch. What this does not
check: ranks of torchrun on several nodes (tests/cluster/test_hang_stacks.py does), a node where ptrace is refused
(its wording is checked with a py-spy stand-in that answers as py-spy does)."""

import os
import re
import shlex
import subprocess
import sys
import threading
import time
import uuid

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import rank_stacks, supervisor_bundle
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_processes import TOKEN_VAR, RankWatch

# A token unique to this test session: two sessions on one machine must not read each other's "ranks".
TOKEN = "t-%s.0" % uuid.uuid4().hex[:8]
# 'ready' is said from inside stuck_in_here (line 3), so that a stack taken once a rank said it is in stuck_in_here:
# said before the call, a loaded machine could take it between the two, at <module>.
STUCK = "import time\ndef stuck_in_here():\n    print('ready', flush=True); time.sleep(600)\nstuck_in_here()\n"


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
        deadline = time.monotonic() + 30
        return found.taken(lambda: time.sleep(0.05) if time.monotonic() < deadline else pytest.fail("no dump in 30 s"))
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


# What py-spy prints when the kernel refuses it a rank as a non-root user (kernel.yama.ptrace_scope=1 and the rank not
# its descendant): the fixture, verbatim from py-spy's source (tests/fixtures/py_spy/README.md).
PTRACE_FIXTURE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "py_spy", "ptrace_refused.txt")
# A rank with a thread of its own besides the main one, both stuck.
STUCK_WITH_THREAD = ("import threading, time\ndef loader():\n    time.sleep(600)\n"
                     "threading.Thread(target=loader, daemon=True).start()\n" + STUCK)


def start_hooked_ranks(tmp_path, script_text, extra_path=""):
    """Ranks 4 and 5 started as the launch script starts them: the job folder's stack hook first on PYTHONPATH and
    the dumps' folder named (launchers.torch_prelude)."""
    (tmp_path / rank_stacks.HOOK_DIR).mkdir()
    (tmp_path / rank_stacks.HOOK_FILE).write_text(supervisor_bundle.hook_source())
    (tmp_path / rank_stacks.STACK_DIR).mkdir()
    script = tmp_path / "script.py"
    script.write_text(script_text)
    started = []
    for rank in (4, 5):
        env = dict(os.environ, **{TOKEN_VAR: TOKEN, "RANK": str(rank), "LOCAL_RANK": str(rank - 4),
                                  "GPUFLEET_STACK_DIR": str(tmp_path / rank_stacks.STACK_DIR),
                                  "PYTHONPATH": str(tmp_path / rank_stacks.HOOK_DIR) + extra_path})
        started.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE))
    for proc in started:
        assert proc.stdout.readline() == b"ready\n"
    return started


@pytest.fixture
def hooked_ranks(tmp_path):
    started = start_hooked_ranks(tmp_path, STUCK_WITH_THREAD)
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def refusing_py_spy(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    fake = bin_dir / "py-spy"
    fake.write_text("#!/bin/sh\ncat %s >&2\nexit 1\n" % shlex.quote(os.path.abspath(PTRACE_FIXTURE)))  # replays it
    fake.chmod(0o755)
    return str(bin_dir / "python")


def test_where_py_spy_is_refused_each_rank_s_own_faulthandler_names_its_frame(tmp_path, hooked_ranks):
    """The hang's stuck frame is still named on a node where ptrace is refused: each rank's hook (stack_hook.py,
    registered through PYTHONPATH, the script unchanged) writes its threads when its supervisor asks."""
    stacks = dump(tmp_path, refusing_py_spy(tmp_path))
    assert stacks["error"] is None and stacks["file"] == "stacks.txt"
    assert [(r["rank"], r["pid"], r["error"]) for r in stacks["ranks"]] == [
        (4, hooked_ranks[0].pid, None), (5, hooked_ranks[1].pid, None)]
    for rank in stacks["ranks"]:
        # the main thread's frames, innermost first (not the loader thread's)
        assert [frame[0] for frame in rank["frames"][:2]] == ["stuck_in_here", "<module>"], rank
        assert rank["frames"][0][1].endswith("script.py") and rank["frames"][0][2] == 7
    assert rank_stacks.hung_in(stacks) == "stuck_in_here (%s)" % (tmp_path / "script.py")
    text = (tmp_path / "stacks.txt").read_text()
    assert "read by the rank's own faulthandler (Python frames only); py-spy: Permission Denied: Try running" in text
    assert "    loader (%s:3)" % (tmp_path / "script.py") in text  # every thread
    assert re.search(r"^Thread 0x[0-9a-f]+$", text, re.M), text
    assert all(proc.poll() is None for proc in hooked_ranks)  # asked, not ended


def test_without_py_spy_the_ranks_own_hook_is_asked(tmp_path, hooked_ranks, monkeypatch):
    del hooked_ranks
    monkeypatch.setenv("PATH", str(tmp_path))
    stacks = dump(tmp_path, "/nowhere/bin/python")
    assert stacks["error"] is None and [r["frames"][0][0] for r in stacks["ranks"]] == ["stuck_in_here"] * 2
    assert "py-spy is not on this node" in (tmp_path / "stacks.txt").read_text()


def test_a_rank_without_the_hook_is_never_sent_its_signal(tmp_path, ranks):
    """The ranks of the fixture run without the hook: nothing is sent to them (a real-time signal nobody catches
    would end the rank), and each is named with py-spy's words."""
    (tmp_path / rank_stacks.STACK_DIR).mkdir()
    for proc in ranks:  # a dump file that names a signal, as a rank's hook would, but the rank does not catch it
        (tmp_path / rank_stacks.STACK_DIR / ("%d.txt" % proc.pid)).write_text("gpufleet stack hook: signal 40\n")
    stacks = dump(tmp_path, refusing_py_spy(tmp_path))
    assert [r["error"].startswith("py-spy: Permission Denied") for r in stacks["ranks"]] == [True, True], stacks
    time.sleep(0.5)
    assert all(proc.poll() is None for proc in ranks)


def test_the_hook_runs_the_sitecustomize_it_hides(tmp_path):
    """A sitecustomize of the environment's own, later on PYTHONPATH, still runs; and a Python that is not a rank
    (no LOCAL_RANK) registers nothing."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIRS_RAN'] = '1'\n")
    started = start_hooked_ranks(tmp_path, "import os, sys\nprint('ready', flush=True)\n"
                                 "print(os.environ.get('THEIRS_RAN'), sys.modules['sitecustomize'].__file__, flush=True)\n",
                                 extra_path=os.pathsep + str(theirs))
    for proc in started:
        assert proc.stdout.read().decode().split() == ["1", str(theirs / "sitecustomize.py")]
        proc.wait()
    env = dict(os.environ, PYTHONPATH=str(tmp_path / rank_stacks.HOOK_DIR),
               GPUFLEET_STACK_DIR=str(tmp_path / rank_stacks.STACK_DIR))
    env.pop("LOCAL_RANK", None)
    ran = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], env=env, capture_output=True,
                         text=True, check=True)
    assert not (tmp_path / rank_stacks.STACK_DIR / ("%s.txt" % ran.stdout.strip())).exists()


def test_faulthandler_s_dump_is_read_as_py_spy_s_threads():
    """A dump Python writes now, in this process (faulthandler.dump_traceback), with a second thread."""
    import faulthandler
    import tempfile

    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, daemon=True)
    thread.start()
    with tempfile.TemporaryFile("w+") as handle:
        faulthandler.dump_traceback(file=handle, all_threads=True)
        handle.seek(0)
        text = handle.read()
    stop.set()
    threads = rank_stacks.faulthandler_threads(text)
    assert len(threads) >= 2 and "Current thread 0x" in text
    current = re.search(r"Current thread (0x[0-9a-f]+)", text).group(1)
    here = next(t for t in threads if t["os_thread_id"] == current)
    assert here["frames"][0]["name"] == "test_faulthandler_s_dump_is_read_as_py_spy_s_threads"
    assert any(t["frames"] and t["frames"][0]["name"] == "wait" for t in threads)
    assert rank_stacks.faulthandler_threads("no dump here\n") == []
