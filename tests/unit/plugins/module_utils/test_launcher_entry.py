"""launcher_entry.py, torchrun's entry point in the job folder: the module runs as with `python -m`, what it prints
and its exit status are kept, and the interpreter's teardown is skipped (why: the module's docstring)."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import launcher_entry, supervisor_bundle


@pytest.fixture(name="entry")
def entry_file(tmp_path):
    """The entry point as the job folder holds it, in a folder of its own (nothing of the collection importable)."""
    path = tmp_path / "job" / "launcher_entry.py"
    path.parent.mkdir()
    path.write_text(supervisor_bundle.entry_source())
    return path


def run(entry, tmp_path, source, *args, direct=False):
    """The module `main_mod` (source) run through the entry point, or with `python -m` (direct), from tmp_path."""
    (tmp_path / "main_mod.py").write_text(textwrap.dedent(source))
    start = ["-m"] if direct else [str(entry)]
    return subprocess.run([sys.executable, "-s", *start, "main_mod", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_module_runs_as_main_with_its_arguments_and_from_the_current_folder(entry, tmp_path):
    done = run(entry, tmp_path, """
        import sys
        print(__name__, sys.argv[1:], sys.path[0] == __import__("os").getcwd(), end="")
    """, "--a=1", "b c")
    assert (done.returncode, done.stdout) == (0, "__main__ ['--a=1', 'b c'] True"), done.stderr


def test_the_interpreters_teardown_is_skipped(entry, tmp_path):
    """An object's __del__ at teardown runs with `python -m` and not through the entry point: the teardown (torch's
    final collection and its modules' teardown, ~0.3 CPU s) is what it saves."""
    source = """
        class AtTeardown:
            def __del__(self):
                print("torn down")
        KEPT = AtTeardown()
        print("trained")
    """
    assert run(entry, tmp_path, source, direct=True).stdout == "trained\ntorn down\n"
    assert run(entry, tmp_path, source).stdout == "trained\n"


def test_what_a_normal_exit_does_for_the_output_is_done(entry, tmp_path):
    """Buffered output, a non-daemon thread's last line, an atexit handler and a logging handler that writes only
    when logging shuts down: each reaches the output, as at a normal exit."""
    done = run(entry, tmp_path, """
        import atexit, logging, logging.handlers, sys, threading, time
        held = logging.handlers.MemoryHandler(100, target=logging.StreamHandler(sys.stderr))
        logging.getLogger().addHandler(held)
        logging.getLogger().warning("logged, held until shutdown")
        atexit.register(lambda: print("atexit ran"))
        threading.Thread(target=lambda: (time.sleep(0.3), print("thread done"))).start()
        sys.stdout.write("no newline, buffered")
    """)
    assert done.returncode == 0
    assert done.stdout == "no newline, bufferedthread done\natexit ran\n"
    assert done.stderr == "logged, held until shutdown\n"


@pytest.mark.parametrize("body, status, said", [
    ("import sys; sys.exit(3)", 3, ""),
    ("import sys; sys.exit(None)", 0, ""),
    ("import sys; sys.exit('no data under /data')", 1, "no data under /data\n"),
])
def test_system_exit_keeps_its_meaning(entry, tmp_path, body, status, said):
    done = run(entry, tmp_path, body)
    direct = run(entry, tmp_path, body, direct=True)
    assert (done.returncode, done.stderr) == (status, said) == (direct.returncode, direct.stderr)


def test_an_exception_is_printed_from_the_modules_own_frames_and_exits_1(entry, tmp_path):
    source = """
        def fail():
            raise ValueError("bad batch")
        fail()
    """
    done = run(entry, tmp_path, source)
    direct = run(entry, tmp_path, source, direct=True)
    assert done.returncode == direct.returncode == 1
    assert done.stderr.splitlines()[0] == "Traceback (most recent call last):"
    assert done.stderr.splitlines()[-1] == "ValueError: bad batch"
    assert "launcher_entry" not in done.stderr and "runpy" not in done.stderr
    # What `python -m` prints, less its runpy frames.
    frames = [line for line in direct.stderr.splitlines() if "runpy" not in line]
    assert [line for line in done.stderr.splitlines() if line.startswith("  File")] == [
        line for line in frames if line.startswith("  File")]


def test_a_keyboard_interrupt_ends_the_process_by_sigint_as_pythons_own_exit_does(entry, tmp_path):
    done = run(entry, tmp_path, "raise KeyboardInterrupt")
    assert done.returncode == run(entry, tmp_path, "raise KeyboardInterrupt", direct=True).returncode == -signal.SIGINT
    assert done.stderr.splitlines()[-1] == "KeyboardInterrupt"


def test_without_a_module_it_says_its_usage(entry, tmp_path):
    done = subprocess.run([sys.executable, str(entry)], capture_output=True, text=True, check=False, cwd=tmp_path)
    assert (done.returncode, done.stderr) == (2, "usage: launcher_entry.py MODULE [ARG...]\n")


def test_the_shipped_text_is_the_modules_own():
    with open(launcher_entry.__file__) as handle:
        assert supervisor_bundle.entry_source() == handle.read()


TORCH_RANK = """
import os, time
import torch.distributed as dist
dist.init_process_group("gloo")
os.write(1, ("rank %s in\\n" % os.environ["RANK"]).encode())  # one write: the two ranks' lines do not interleave
dist.barrier()  # both have said so before rank 1 fails
if os.environ["RANK"] == "1":
    os._exit(7)
time.sleep(60)
"""


def test_torchrun_through_the_entry_point_reports_a_failed_rank_and_fails(entry, tmp_path):
    """The real torchrun (torch from the dev environment): a rank that exits 7 is in its summary, the other rank is
    ended, and the launcher exits 1, as with `python -m torch.distributed.run`."""
    script = tmp_path / "train.py"
    script.write_text(TORCH_RANK)
    from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.free_ports import pick_free_ports
    port = pick_free_ports(1)[0]
    done = subprocess.run(
        [sys.executable, str(entry), "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
         "--master-addr=127.0.0.1", "--master-port=%d" % port, "--rdzv-backend=static", "--max-restarts=0",
         str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "rank 1 in" in done.stdout and "rank 0 in" in done.stdout
    assert "exitcode  : 7" in done.stderr and "ChildFailedError" in done.stderr, done.stderr
