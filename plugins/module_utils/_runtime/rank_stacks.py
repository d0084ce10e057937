# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Python stack of every rank of this node's part, taken with py-spy before a hung job is stopped.

py-spy (python_env installs a pinned one beside the training Python) reads a running Python process from outside:
``py-spy dump --nonblocking --json --pid PID``, one per rank, all at once. Non-blocking: the rank is read without
being paused, which also reads a rank that is itself stopped (SIGSTOP; a paused read fails there), and a hung rank
does not move while it is read. Reading another process needs the rights to trace it
(the same user, and kernel.yama.ptrace_scope 0, or root). Where py-spy could not read a rank (or is not on the node),
the rank's own faulthandler is asked (stack_hook.py, registered in every rank through the launch's PYTHONPATH): the
supervisor sends the signal the rank's dump file names, once /proc says the rank catches it, and reads the dump
(Python frames only). What could not be read either way is said, per rank, with py-spy's own words. The supervisor
keeps its heartbeats going while the dumps run (StackDump.taken), then writes ``stacks.txt`` (for people) into the
job folder and keeps each rank's main-thread frames in state.json, where the controller groups the ranks by frame
(plugin_utils/_postmortem/stack_groups.py). Shipped with the supervisor; standard library only, Python 3.8+.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from typing import Callable

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_processes import write_atomic

STACKS_FILE = "stacks.txt"
# How long the dumps may take together; py-spy reads a rank in well under a second.
DUMP_TIMEOUT_S = 10.0
# The frames of a rank's main thread kept in state.json, innermost first.
FRAMES_KEPT = 24
# In the job folder: the ranks' own stack dump (stack_hook.py, as HOOK_FILE, first on the ranks' PYTHONPATH), and the
# folder it writes each rank's dump to (<pid>.txt, its first line naming the signal that asks for it).
HOOK_DIR = "stack_hook"
HOOK_FILE = os.path.join(HOOK_DIR, "sitecustomize.py")
STACK_DIR = "rank_stacks"
# How long the ranks asked through their hook have to write their dump (faulthandler writes it at once, in C).
HOOK_WAIT_S = 2.0
_HOOK_HEADER = re.compile(r"^gpufleet stack hook: signal (\d+)$")
# faulthandler's lines (CPython's Python/traceback.c): a thread's heading, then its frames, innermost first.
_FH_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)(?: \[[^\]]*\])? \(most recent call first\):$")
_FH_FRAME = re.compile(r'^  File "(.*)", line (\d+|\?\?\?) in (.+)$')


def hooked_signal(job_dir: str, pid: int) -> tuple[str, int | None]:
    """A rank's dump file, named by its pid as the rank sees it (in a container's pid namespace, the last of NSpid),
    and the signal that asks for its dump: the one its hook registered (the file's first line), when the kernel says
    the rank catches it (SigCgt); else None: never sent blind. One read of /proc/<pid>/status for both."""
    status: dict[str, str] = {}
    try:
        with open("/proc/%d/status" % pid) as handle:
            status = dict(line.split(":", 1) for line in handle if ":" in line)
    except OSError:
        pass
    path = os.path.join(job_dir, STACK_DIR, "%s.txt" % (status.get("NSpid") or str(pid)).split()[-1])
    try:
        with open(path) as handle:
            header = _HOOK_HEADER.match(handle.readline().strip())
        caught = int(status.get("SigCgt") or "0", 16)
    except (OSError, ValueError):
        return path, None
    signum = int(header.group(1)) if header else 0
    return path, signum if signum and caught >> (signum - 1) & 1 else None


def faulthandler_threads(text: str) -> list[dict]:
    """faulthandler's dump as py-spy's JSON has it: each thread with its frames, innermost first; the main thread
    (its outermost frame the script's <module>, else the oldest, which faulthandler lists last) first."""
    threads: list[dict] = []
    for line in text.splitlines():
        heading = _FH_THREAD.match(line)
        frame = _FH_FRAME.match(line)
        if heading:
            # py-spy's active/idle is not known; faulthandler's "current" thread is only the one the signal came to
            threads.append({"os_thread_id": heading.group(2), "thread_name": "", "active": None, "frames": []})
        elif frame and threads:
            threads[-1]["frames"].append({"name": frame.group(3), "filename": frame.group(1),
                                          "line": int(frame.group(2)) if frame.group(2).isdigit() else 0})
    main = next((t for t in threads if t["frames"] and t["frames"][-1]["name"] == "<module>"),
                threads[-1] if threads else None)
    return [main] + [t for t in threads if t is not main] if main else []


def py_spy_for(python: str) -> str | None:
    """py-spy beside the training Python (a virtual environment's bin folder; not resolved through its symlink), or
    on PATH; None when there is none."""
    if os.sep in python:
        beside = os.path.join(os.path.dirname(python), "py-spy")
        if os.access(beside, os.X_OK):
            return beside
    return shutil.which("py-spy")


def main_frames(threads: list, pid: int) -> list[list]:
    """The frames of the process's main thread (its own thread id, else the first), innermost first, each as
    [function, file, line]."""
    chosen = next((t for t in threads if t.get("os_thread_id") == pid), threads[0] if threads else {})
    return [[str(f.get("name")), str(f.get("filename")), int(f.get("line") or 0)]
            for f in (chosen.get("frames") or [])[:FRAMES_KEPT]]


def render_stacks(host: str, dumps: list[dict]) -> str:
    """stacks.txt: each rank's threads, innermost frame first, or why it could not be read."""
    out = []
    for dump in dumps:
        out.append("=== %s rank %s (local rank %s, pid %d) ===" % (host, dump["rank"], dump["local_rank"], dump["pid"]))
        if dump.get("error"):
            out.append("not read: %s" % dump["error"])
        if dump.get("py_spy_error"):
            out.append("read by the rank's own faulthandler (Python frames only); %s" % dump["py_spy_error"])
        for thread in dump.get("threads") or []:
            name, active = thread.get("thread_name"), thread.get("active")
            out.append("Thread %s%s%s" % (thread.get("os_thread_id"), " (%s)" % name if name else "",
                                          "" if active is None else " active" if active else " idle"))
            out.extend("    %s (%s:%s)" % (f.get("name"), f.get("filename"), f.get("line"))
                       for f in thread.get("frames") or [])
        out.append("")
    return "\n".join(out)


def hung_in(stacks: dict | None) -> str | None:
    """Where a hang's ranks on this node were, alike from one hang to the next in the same place: each read rank's
    innermost frame (function and file, not the line), sorted; None when no stack was taken."""
    frames = sorted({"%s (%s)" % (r["frames"][0][0], r["frames"][0][1]) for r in (stacks or {}).get("ranks") or []
                     if r.get("frames")})
    return "; ".join(frames) or None


def stacks_said(stacks: dict) -> str:
    """The supervisor's log line about a dump: the ranks read, or why none was."""
    taken = [str(r["rank"]) for r in stacks["ranks"] if not r["error"]]
    if taken:
        return "stacks of ranks %s written to %s (%.1f s)" % (", ".join(taken), stacks["file"], stacks["seconds"])
    return "no stacks taken: %s" % (stacks["error"] or stacks["ranks"][0]["error"])


class StackDump:
    """One dump of every rank of this node's part: started at once, read when every py-spy has ended (or at the
    timeout), so that the caller can go on with its heartbeats meanwhile. The ranks are the supervisor's rank watch's
    (job_processes.RankWatch: each live rank's pid with its global and local rank)."""

    def __init__(self, job_dir: str, host: str, python: str, ranks: dict[int, tuple[int | None, int | None]]) -> None:
        self.job_dir, self.host = job_dir, host
        self.py_spy = py_spy_for(python)
        self.started = time.monotonic()
        self.ranks = dict(ranks)
        self.running: list[tuple[int, subprocess.Popen]] = []
        self.error: str | None = None
        self.dumps: dict[int, dict] = {}  # by pid, once py-spy is done
        self.asked: dict[int, tuple[str, int]] = {}  # the ranks asked through their hook: their dump file, its size
        self.asked_at = 0.0
        pids = sorted(self.ranks)
        if self.py_spy is None:
            self.error = ("py-spy is not on this node (neither beside %s nor on PATH): provision.yml --tags python_env "
                          "installs it" % python)
        elif not pids:
            self.error = "no rank process of the job found on this node"
        for pid in pids if self.py_spy else []:
            self.running.append((pid, subprocess.Popen(  # pylint: disable=consider-using-with
                [self.py_spy, "dump", "--nonblocking", "--json", "--pid", str(pid)], stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)))

    def taken(self, meanwhile: Callable[[], None]) -> dict:
        """The dump's result (finish), once every py-spy has ended or at the timeout, and the ranks py-spy could
        not read have written their own dump (or HOOK_WAIT_S has passed); meanwhile is called until then (the
        supervisor's loop: its heartbeats go on)."""
        while not self.done():
            meanwhile()
        self.ask_hooks()
        while not self.hooks_done():
            meanwhile()
        return self.finish()

    def ask_hooks(self) -> None:
        """py-spy's dumps collected; each rank it could not read (or every rank, without py-spy) is asked for its
        own dump, where its hook is registered."""
        self.dumps = {pid: self._collect(pid, proc) for pid, proc in self.running}
        if self.py_spy is None:
            self.dumps = {pid: {"pid": pid, "rank": rank, "local_rank": local, "error": self.error}
                          for pid, (rank, local) in self.ranks.items()}
        self.asked_at = time.monotonic()
        for pid in [pid for pid, dump in self.dumps.items() if dump.get("error")]:
            path, signum = hooked_signal(self.job_dir, pid)
            if not signum:
                continue
            try:
                size = os.path.getsize(path)
                os.kill(pid, signum)
            except OSError:
                continue
            self.asked[pid] = (path, size)

    def hooks_done(self) -> bool:
        if time.monotonic() - self.asked_at > HOOK_WAIT_S:
            return True
        return all(faulthandler_threads(_read_from(path, size)) and _settled(path) for path, size in self.asked.values())

    def done(self) -> bool:
        return (all(proc.poll() is not None for _pid, proc in self.running)
                or time.monotonic() - self.started > DUMP_TIMEOUT_S)

    def finish(self) -> dict:
        """Collect the dumps, write stacks.txt, and return what state.json keeps: the file, the error that stopped
        every dump, and each rank's main-thread frames or its error."""
        for pid, (path, size) in self.asked.items():
            threads = faulthandler_threads(_read_from(path, size))
            if threads:
                dump = self.dumps[pid]
                dump.update(threads=threads, py_spy_error=dump.pop("error"))
        dumps = sorted(self.dumps.values(), key=lambda d: (d["rank"] is None, d["rank"] or 0, d["pid"]))
        if any(d.get("threads") for d in dumps):
            self.error = None  # read, by py-spy or the ranks' own hook
        elif self.py_spy is None:
            dumps = []  # nothing read: the node's one reason says it
        if dumps:
            write_atomic(os.path.join(self.job_dir, STACKS_FILE), render_stacks(self.host, dumps))
        ranks = [{"rank": d["rank"], "local_rank": d["local_rank"], "pid": d["pid"], "error": d.get("error"),
                  "frames": main_frames(d.get("threads") or [], d["pid"])} for d in dumps]
        return {"file": STACKS_FILE if dumps else None, "error": self.error, "ranks": ranks,
                "seconds": round(time.monotonic() - self.started, 2)}

    def _collect(self, pid: int, proc: subprocess.Popen) -> dict:
        rank, local_rank = self.ranks[pid]
        dump: dict = {"pid": pid, "rank": rank, "local_rank": local_rank}
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
            dump["error"] = "py-spy did not answer within %g s" % DUMP_TIMEOUT_S
            return dump
        out, err = proc.communicate()
        try:
            dump["threads"] = json.loads(out.decode("utf-8", "replace"))
        except ValueError:
            said = " ".join(err.decode("utf-8", "replace").split())[-300:] or "exit code %d" % proc.returncode
            dump["error"] = "py-spy: %s (reading another process needs the same user and kernel.yama.ptrace_scope 0, " \
                            "or root)" % said
        return dump


def _read_from(path: str, size: int) -> str:
    """What a rank's dump file gained past size (its dump, once asked)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(size)
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _settled(path: str) -> bool:
    """Whether a dump file has not changed for 0.2 s (faulthandler writes a dump line by line)."""
    try:
        return time.time() - os.path.getmtime(path) > 0.2
    except OSError:
        return True
