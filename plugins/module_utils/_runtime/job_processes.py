# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The processes and files of a job's run on a node: atomic writes, the run's token, finding and signalling only
the run's own processes (by the token in their environment, never by name), and whether a supervisor is still
that very process. Shipped to the nodes as part of the supervisor; standard library only, Python 3.8+."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import time
import uuid
from typing import Callable

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import TOKEN_VAR

_PR_SET_PDEATHSIG = 1


def write_atomic(path: str, content: str, mode: int = 0o600) -> None:
    """Write a file so that a reader never sees half of it (a temporary file renamed over it); owner-only unless
    mode says otherwise. The one atomic write of the job code."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as handle:
        handle.write(content)
    os.chmod(tmp, mode)  # whatever the umask took away
    os.replace(tmp, path)


def write_json_atomic(path: str, data: dict) -> None:
    """Write data as JSON, atomically, owner-only."""
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def read_json(path: str) -> dict | None:
    """The JSON object in path, or None when it is missing or not (yet) complete."""
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _proc_stat(pid: int) -> bytes | None:
    """The /proc/PID/stat line, or None when the process is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def proc_start_ticks(pid: int) -> int | None:
    """The process start time in clock ticks since boot (field 22 of /proc/PID/stat), or None."""
    raw = _proc_stat(pid)
    return None if raw is None else start_ticks_of(raw)


def stat_fields(raw: bytes | None) -> list[bytes]:
    """A /proc/PID/stat line's fields from the third (state) on; none for no line. The command name (field 2) may
    hold spaces and parentheses: split after the last ')'."""
    return raw[raw.rfind(b")") + 2:].split() if raw else []


def start_ticks_of(raw: bytes) -> int | None:
    """The start time in a /proc/PID/stat line, or None for a zombie or no line."""
    fields = stat_fields(raw)
    if len(fields) < 20 or fields[0] == b"Z":
        return None  # a zombie has exited already
    return int(fields[19])


def zombie_wait_status(pid: int) -> int | None:
    """The wait status (as waitpid(2) gives it) of process pid, which has exited but which its parent has not reaped
    yet (field 52 of /proc/PID/stat, Linux 3.5+: a pidfd is readable from that moment); None while it runs, once it
    is reaped, or unreadable. It lets the supervisor read how a rank ended though the rank is the launcher's child."""
    fields = stat_fields(_proc_stat(pid))
    if len(fields) < 50 or fields[0] != b"Z":
        return None
    return int(fields[49])


def wait_status_said(status: int) -> str:
    """'exit code 1' or 'SIGKILL', of a wait status."""
    if os.WIFSIGNALED(status):
        return signal_name(os.WTERMSIG(status))
    return "exit code %d" % os.WEXITSTATUS(status)


def new_run_id() -> str:
    """A token unique to one launch; every process of the run carries it as GPUFLEET_RUN_ID (made by job_plan on
    the controller, or by the launch module when it is used alone)."""
    return uuid.uuid4().hex


def run_token(spec: dict) -> str:
    """The token of one node's part of one run: run id and node rank."""
    return "%s.%s" % (spec["run_id"], spec["node_rank"])


def _proc_environ(pid: int) -> list[bytes] | None:
    """The NAME=value entries of process pid's environment, or None when it cannot be read (gone, not ours)."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as handle:
            return handle.read().split(b"\0")
    except OSError:
        return None


def proc_environ_values(pid: int) -> dict[str, str]:
    """Process pid's environment as it started, as a mapping (empty when it cannot be read)."""
    values = {}
    for entry in _proc_environ(pid) or []:
        name, sep, value = entry.partition(b"=")
        if sep:
            values[name.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return values


RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")


def rank_ids(pid: int) -> tuple[int | None, int | None]:
    """A rank process's global and local rank, from the variables its launcher gave it."""
    values = proc_environ_values(pid)

    def first(names: tuple[str, ...]) -> int | None:
        for name in names:
            if values.get(name, "").isdigit():
                return int(values[name])
        return None
    return first(RANK_VARS), first(LOCAL_RANK_VARS)


def proc_has_token(pid: int, token: str) -> bool:
    """True when process pid carries GPUFLEET_RUN_TOKEN=token in its environment."""
    entries = _proc_environ(pid)
    return entries is not None and ("%s=%s" % (TOKEN_VAR, token)).encode() in entries


def proc_is_rank(pid: int) -> bool:
    """True when process pid is a rank (or a rank's child): every launcher gives each rank LOCAL_RANK, and the
    launchers' own processes (torchrun's agent, deepspeed's) do not have it. Unreadable counts as a rank."""
    entries = _proc_environ(pid)
    return entries is None or any(entry.startswith(b"LOCAL_RANK=") for entry in entries)


def parent_pid(pid: int) -> int | None:
    """The parent's PID (field 4 of /proc/PID/stat), or None when the process is gone."""
    fields = stat_fields(_proc_stat(pid))
    return int(fields[1]) if len(fields) > 1 else None


def _has_local_rank(pid: int) -> bool:
    entries = _proc_environ(pid)
    return entries is not None and any(entry.startswith(b"LOCAL_RANK=") for entry in entries)


def proc_is_rank_itself(pid: int) -> bool:
    """True when process pid is a rank and not a rank's own child (a DataLoader worker, a compiler, a shell
    command): it has LOCAL_RANK and its parent (the launcher's agent or wrapper) does not. A rank's children end
    in the normal course of training; a rank's end is news."""
    if not _has_local_rank(pid):
        return False
    parent = parent_pid(pid)
    return parent is None or not _has_local_rank(parent)


def run_processes(token: str, exclude: tuple[int, ...] = ()) -> list[int]:
    """PIDs of the live processes that carry this token."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid in exclude or pid == os.getpid():
            continue
        if proc_has_token(pid, token) and proc_start_ticks(pid) is not None:
            found.append(pid)
    return sorted(found)


def signal_run(token: str, signum: int, exclude: tuple[int, ...] = ()) -> list[int]:
    """Send signum to every process that carries token; return the PIDs signalled."""
    sent = []
    for pid in run_processes(token, exclude):
        try:
            os.kill(pid, signum)
            sent.append(pid)
        except OSError:
            pass
    return sent


def terminate(token: str, exclude: tuple[int, ...] = ()) -> list[int]:
    """SIGTERM to the token's processes, then SIGCONT: a stopped (SIGSTOP, Ctrl-Z) process acts on SIGTERM only
    once it runs again."""
    sent = signal_run(token, signal.SIGTERM, exclude)
    signal_run(token, signal.SIGCONT, exclude)
    return sent


def end_run(token: str, grace_s: float, exclude: tuple[int, ...] = (), poll_s: float = 0.1) -> int:
    """SIGTERM the token's processes, wait up to grace_s, SIGKILL the rest; return how many were signalled."""
    first = terminate(token, exclude)
    deadline = time.monotonic() + grace_s
    while run_processes(token, exclude) and time.monotonic() < deadline:
        time.sleep(poll_s)
    signal_run(token, signal.SIGKILL, exclude)
    deadline = time.monotonic() + 5.0
    while run_processes(token, exclude) and time.monotonic() < deadline:
        time.sleep(poll_s)
    return len(first)


def supervisor_alive(state: dict, stat: bytes | None = None) -> bool:
    """True when the supervisor recorded in state is still that very process (not a reused PID). stat is its
    /proc/PID/stat line when it was read elsewhere (the wait's shell poll); without it, it is read here."""
    pid = state.get("supervisor_pid")
    if not isinstance(pid, int):
        return False
    ticks = proc_start_ticks(pid) if stat is None else start_ticks_of(stat)
    return ticks is not None and ticks == state.get("supervisor_start_ticks")


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return "SIG%d" % signum


def _set_parent_death_signal() -> None:
    """In the child: get SIGTERM when the supervisor dies, whatever kills it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class RankWatch:
    """The run's ranks, each watched with a pidfd (Linux 5.3+) that becomes readable the moment it exits; the
    ranks' own children (DataLoader workers, compilers), which end in the normal course of training, are not
    watched. ``first_exit_at`` is when the first of them (or the launcher) ended: when this node's part began to
    end."""

    def __init__(self, token: str,
                 on_rank_end: Callable[[int, int | None, int | None, int | None], None] | None = None) -> None:
        self.token = token
        # Told each rank's end: pid, global and local rank, and its wait status where it could be read (the rank not
        # reaped yet by its launcher when its pidfd woke this node's supervisor; zombie_wait_status).
        self.on_rank_end = on_rank_end
        self.rank_of_pid: dict[int, tuple[int | None, int | None]] = {}
        self.watched: dict[int, int | None] = {}
        self.rank_children: set[int] = set()
        self.first_exit_at: float | None = None
        self.next_scan = 0.0
        self.started = time.monotonic()

    def begin(self, now: float) -> None:
        """A new attempt: nothing of it has ended yet."""
        self.first_exit_at, self.next_scan, self.started = None, 0.0, now
        self.rank_children.clear()

    def scan(self, now_please: bool = False) -> None:
        """Start watching the run's new ranks (often at first, then every few seconds; at once with now_please)."""
        now = time.monotonic()
        if now < self.next_scan and not now_please:
            return
        self.next_scan = now + (0.5 if now - self.started < 30 else 5.0)
        for pid in run_processes(self.token):
            if pid in self.rank_of_pid or pid in self.rank_children:
                continue
            if not proc_is_rank_itself(pid):
                # A rank's child stays one; anything else (the launcher, a rank not yet exec'd) is looked at again.
                if proc_is_rank(pid):
                    self.rank_children.add(pid)
                continue
            self.rank_of_pid[pid] = rank_ids(pid)
            if pid not in self.watched:  # a launcher that exec'd into the rank (launcher=none) is watched already
                self.watch_launcher(pid)
        for pid, fd in list(self.watched.items()):
            if fd is None and proc_start_ticks(pid) is None:
                self.exited(pid)  # no pidfd: noticed by polling, to the nearest scan

    def watch_launcher(self, pid: int) -> None:
        """Watch process pid through a pidfd, readable the moment it exits: each rank (scan), and the attempt's
        launcher (the supervisor's child), whose end then wakes the supervisor's loop at once too."""
        try:
            # Python 3.9+ only, and guarded: without it (3.8) the watch falls back to polling.
            self.watched[pid] = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None  # novermin
        except OSError:
            self.watched[pid] = None

    def exited(self, pid: int) -> None:
        """A rank (or the launcher) has ended: the first such moment is when this node's part began to end."""
        if self.first_exit_at is None:
            self.first_exit_at = time.time()
        status = zombie_wait_status(pid)
        fd = self.watched.pop(pid, None)
        if fd is not None:
            os.close(fd)
        if pid in self.rank_of_pid and self.on_rank_end is not None:
            self.on_rank_end(pid, *self.rank_of_pid.pop(pid), status)

    def fds(self) -> dict[int, int]:
        """The pidfds to wait on, each with its PID."""
        return {fd: pid for pid, fd in self.watched.items() if fd is not None}

    def close(self) -> None:
        for pid in list(self.watched):
            fd = self.watched.pop(pid)
            if fd is not None:
                os.close(fd)
