# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The per-node job supervisor, and the process helpers the job modules share with it.

gpufleet.cluster.launch copies this file into the job folder and starts it
detached (its own session), as ``python3 supervisor.py JOB_DIR``. It then:

- runs ``launch.sh`` in a new session and process group, output appended to
  ``job.log``, with ``GPUFLEET_RUN_TOKEN`` in its environment: the launch's
  run id and this node's rank, unique to this node's part of this run (two
  nodes of one job may share a machine). torchrun puts each worker in a
  session of its own, so the token, not the process group, is what
  identifies every process of the run;
- stops the run on SIGTERM/SIGINT/SIGHUP: SIGTERM to the run's processes, a
  grace period, then SIGKILL to whatever of the run is left;
- after the launcher exits, by itself or stopped, ends any process of the run
  that is still there, so nothing is orphaned;
- records state, exit code or signal and timestamps in ``state.json`` and the
  exit code in ``exit_code``.

Processes are only ever signalled by PID after checking they carry this run's
token: never by name or pattern. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time

STATE_FILE = "state.json"
SPEC_FILE = "job.json"
LAUNCH_FILE = "launch.sh"
LOG_FILE = "job.log"
EXIT_CODE_FILE = "exit_code"
STOP_REQUEST_FILE = "stop_request"
RUN_ID_VAR = "GPUFLEET_RUN_ID"
TOKEN_VAR = "GPUFLEET_RUN_TOKEN"
TERMINAL_STATES = ("succeeded", "failed", "stopped", "lost")
_PR_SET_PDEATHSIG = 1


def write_json_atomic(path: str, data: dict) -> None:
    """Write data as JSON so that a reader never sees half a file; owner-only."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, path)


def read_json(path: str) -> dict | None:
    """The JSON object in path, or None when it is missing or not (yet) complete."""
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def proc_start_ticks(pid: int) -> int | None:
    """The process start time in clock ticks since boot (field 22 of /proc/PID/stat), or None."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = raw[raw.rfind(b")") + 2:].split()
    if len(fields) < 20 or fields[0] == b"Z":
        return None  # a zombie has exited already
    return int(fields[19])


def run_token(spec: dict) -> str:
    """The token of one node's part of one run: run id and node rank."""
    return "%s.%s" % (spec["run_id"], spec["node_rank"])


def proc_has_token(pid: int, token: str) -> bool:
    """True when process pid carries GPUFLEET_RUN_TOKEN=token in its environment."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as handle:
            entries = handle.read().split(b"\0")
    except OSError:
        return False
    return ("%s=%s" % (TOKEN_VAR, token)).encode() in entries


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


def end_run(token: str, grace_s: float, exclude: tuple[int, ...] = (), poll_s: float = 0.1) -> int:
    """SIGTERM the token's processes, wait up to grace_s, SIGKILL the rest; return how many were signalled."""
    first = signal_run(token, signal.SIGTERM, exclude)
    deadline = time.monotonic() + grace_s
    while run_processes(token, exclude) and time.monotonic() < deadline:
        time.sleep(poll_s)
    signal_run(token, signal.SIGKILL, exclude)
    deadline = time.monotonic() + 5.0
    while run_processes(token, exclude) and time.monotonic() < deadline:
        time.sleep(poll_s)
    return len(first)


def supervisor_alive(state: dict) -> bool:
    """True when the supervisor recorded in state is still that very process (not a reused PID)."""
    pid = state.get("supervisor_pid")
    if not isinstance(pid, int):
        return False
    ticks = proc_start_ticks(pid)
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


class Supervisor:
    """Runs one job's launch script on this node and records what became of it."""

    def __init__(self, job_dir: str) -> None:
        self.job_dir = job_dir
        spec = read_json(os.path.join(job_dir, SPEC_FILE))
        if spec is None:
            raise SystemExit("gpufleet supervisor: %s is missing or unreadable" % os.path.join(job_dir, SPEC_FILE))
        self.spec = spec
        self.run_id = str(spec["run_id"])
        self.token = run_token(spec)
        self.grace_s = float(spec.get("grace_s", 10))
        self.stop_reason: str | None = None
        self.state: dict = {
            "job": spec.get("job"),
            "run_id": self.run_id,
            "node_rank": spec.get("node_rank"),
            "state": "starting",
            "supervisor_pid": os.getpid(),
            "supervisor_start_ticks": proc_start_ticks(os.getpid()),
            "started_at": time.time(),
        }

    def _save(self, **changes: object) -> None:
        self.state.update(changes)
        write_json_atomic(os.path.join(self.job_dir, STATE_FILE), self.state)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.stop_reason is None:
            try:
                with open(os.path.join(self.job_dir, STOP_REQUEST_FILE)) as handle:
                    self.stop_reason = handle.read().strip()
            except OSError:
                pass
            self.stop_reason = self.stop_reason or "stopped by %s" % signal_name(signum)

    def run(self) -> int:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._on_signal)
        self._save()
        env = dict(os.environ)
        env[RUN_ID_VAR] = self.run_id
        env[TOKEN_VAR] = self.token
        with open(os.path.join(self.job_dir, LOG_FILE), "ab", buffering=0) as log:
            child = subprocess.Popen(  # pylint: disable=consider-using-with
                ["/bin/bash", os.path.join(self.job_dir, LAUNCH_FILE)],
                cwd=self.job_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_set_parent_death_signal,  # pylint: disable=subprocess-popen-preexec-fn
                close_fds=True,
            )
            self._save(state="running", pid=child.pid, pgid=child.pid)
            returncode = self._wait(child)
        # The launcher is gone; whatever of the run outlived it is ended now.
        end_run(self.token, min(self.grace_s, 5.0))
        return self._finish(returncode)

    def _wait(self, child: subprocess.Popen) -> int:
        stopping_since: float | None = None
        while True:
            try:
                return child.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
            if self.stop_reason is None:
                continue
            if stopping_since is None:
                stopping_since = time.monotonic()
                self._save(state="stopping", stop_reason=self.stop_reason, stop_requested_at=time.time())
                signal_run(self.token, signal.SIGTERM)
            elif time.monotonic() - stopping_since > self.grace_s:
                signal_run(self.token, signal.SIGKILL)

    def _finish(self, returncode: int) -> int:
        exit_code = returncode if returncode >= 0 else 128 - returncode
        final = "succeeded" if returncode == 0 else "failed"
        if self.stop_reason is not None:
            final = "stopped"
        self._save(
            state=final,
            exit_code=exit_code,
            signal=signal_name(-returncode) if returncode < 0 else None,
            ended_at=time.time(),
            stop_reason=self.stop_reason,
        )
        with open(os.path.join(self.job_dir, EXIT_CODE_FILE), "w") as handle:
            handle.write("%d\n" % exit_code)
        return 0


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: supervisor.py JOB_DIR\n")
        return 2
    os.umask(0o077)  # the job's log, state and what the training writes stay its owner's
    return Supervisor(os.path.abspath(argv[1])).run()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
