# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action gpufleet.cluster.job_wait: wait for a job on one node, and report it.

Every node of the job runs this task at the same time. Each polls its own node (one shell command,
plugin_utils/_control/job_poll.py; the last read is gpufleet.cluster.job_status) until the node's part ends, says what
changed, and returns the node's final state. It stops nothing because of another node: the job's one fail-fast
authority is the nodes' supervisors, which hear each other's heartbeats and stop their parts by the gang's rules
(module_utils/_runtime/gang_rules.py), with the controller attached or not, with one fork per node or fewer. A node that
stops answering the controller is reported unreachable; its peers' supervisors find it lost by its silence.

Under Slurm (scheduler=slurm), a node's part is queued until Slurm starts the job; the progress node says Slurm's
state while it waits (pending and why, then running).

When the gpufleet.cluster.interrupt callback has seen Ctrl-C, the file named by GPUFLEET_INTERRUPT_FILE exists:
each node's wait then stops its node's part (and cancels a Slurm job) and returns, so that the play goes on to
fetch the logs and report.

The progress node (the master) polls every poll_s; a node whose part runs steadily polls PEER_POLL_FACTOR times less
often, since every poll costs the node and the controller CPU that the ranks share at the start (docs/scale, issue
50). The end is seen as soon all the same: the gang's parts stop together (their supervisors' rules), so the master's
part changes as soon as any part does, and the wait that sees a change (a new state or attempt, a miss, an end) says
so on the wake board (GPUFLEET_WAKE_FILE, kept by the same callback), which every other node's wait watches between
its polls: each then polls at once, and every poll_s for FAST_AFTER_WAKE_S. Where the callback is not enabled there
is no board, and every node polls every poll_s.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import JobState, WAIT_ENDED_STATES
from ansible_collections.gpufleet.cluster.plugins.modules import job_wait as documentation
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import action_args
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import job_poll

display = Display()

INTERRUPT_VAR = "GPUFLEET_INTERRUPT_FILE"
WAKE_VAR = "GPUFLEET_WAKE_FILE"
# A node whose part runs steadily (STEADY_STATES, the same attempt) polls this many times less often than poll_s...
PEER_POLL_FACTOR = 5
STEADY_STATES = (JobState.RUNNING, JobState.STANDBY, JobState.QUEUED)
# ... except for this long after the board said that a node's part changed.
FAST_AFTER_WAKE_S = 20.0


def interrupted() -> bool:
    """Whether Ctrl-C was pressed on the controller (see the gpufleet.cluster.interrupt callback)."""
    path = os.environ.get(INTERRUPT_VAR)
    return bool(path) and os.path.exists(str(path))


class WakeBoard:
    """The waits' word to each other on the controller: a file that the wait of any node of the play appends a byte
    to when it sees its part change; every other wait reads its size and time between polls. Each wait is a fork of
    its own; the file is the only thing they share. Path None: no board (every node polls every poll_s)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.seen = self._mark()

    def _mark(self) -> tuple[int, int] | None:
        try:
            found = os.stat(str(self.path))
        except (OSError, TypeError):
            return None
        return found.st_mtime_ns, found.st_size

    def tell(self) -> None:
        if self.path is None:
            return
        try:
            with open(self.path, "ab") as handle:
                handle.write(b".")
        except OSError:
            return
        self.seen = self._mark()  # its own word does not wake it

    def woken(self) -> bool:
        """Whether another wait has told the board since this one last looked."""
        if self.path is None:
            return False
        mark = self._mark()
        if mark == self.seen:
            return False
        self.seen = mark
        return True


def sleep_unless_interrupted(seconds: float, step_s: float = 0.05, woken: Callable[[], bool] | None = None) -> bool:
    """Sleep, but wake as soon as Ctrl-C is pressed on the controller, so that the stop starts at once, or as soon
    as woken() says so (another node's part changed); True when woken so."""
    deadline = time.monotonic() + seconds
    while not interrupted():
        if woken is not None and woken():
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(step_s, left))
    return False


# How long a node's final read waits for Slurm to record the job as ended (job_status's slurm_wait_s).
SLURM_FINAL_WAIT_S = 15.0


class NodeWait:
    """One node's wait: poll, say what changed, stop this node's part on Ctrl-C.

    The node is reached through the two callables it is given (status and stop), so the loop is tested without a
    node; ActionModule wires them to gpufleet.cluster.job_status and job_stop."""

    def __init__(self, host: str, node_rank: Any, status: Callable[[int | None], dict], stop: Callable[..., None],
                 say: Callable[[str], None] = display.display, max_misses: int = 3, progress: bool = False,
                 progress_s: float = 5, poll_s: float = 2, board: WakeBoard | None = None) -> None:
        self.host, self.node_rank = host, node_rank
        self.status, self.stop, self.say = status, stop, say
        self.max_misses, self.progress, self.progress_s, self.poll_s = max_misses, progress, progress_s, poll_s
        self.board = board or WakeBoard(None)
        self.fast_until = 0.0  # every poll_s until then: the board said that a part changed
        self.last_seen: tuple[Any, Any] | None = None  # the last poll's state and attempt
        self.misses = 0
        self.was_interrupted = False
        self.attempt = 1
        self.last_shown = ""
        self.last_shown_at = 0.0
        self.last_queue = ""
        self.started = time.monotonic()
        self.current: dict = {"state": "unknown"}

    def run(self, tail: int) -> dict:
        """Until this node's part ends; then its final state, with the log's last `tail` lines."""
        if self.progress:  # its own line: the task's banner may come only with the task's result
            self.say("  waiting for the job on every node; the master's last log line every %.0f s:" % self.progress_s)
        while True:
            state = self.poll()
            self.tell_a_change()
            if state in WAIT_ENDED_STATES:
                break
            if not self.was_interrupted and interrupted():
                self.was_interrupted = True
                self.say("  [%s] interrupted on the controller: stopping this node's part" % self.host)
                self.stop("stopped by gpufleet: interrupted on the controller (Ctrl-C)")
                continue
            self.show_progress()
            self.rest()
        return self.final(tail)

    def rest(self) -> None:
        """The pause until the next poll, ended early by Ctrl-C or the board (then poll_s for a while)."""
        if sleep_unless_interrupted(self.pause(), woken=self.board.woken):
            self.fast_until = time.monotonic() + FAST_AFTER_WAKE_S

    def tell_a_change(self) -> None:
        """A new state or attempt of this node's part, or a poll it did not answer, told to the other nodes' waits
        (not the first poll's: nothing was seen before it)."""
        seen = (self.current.get("state"), self.current.get("attempt"))
        if self.misses or (self.last_seen is not None and seen != self.last_seen):
            self.board.tell()
        self.last_seen = seen

    def pause(self) -> float:
        """Seconds until the next poll: poll_s for the progress node, for a part that is not running steadily and
        for a while after the board spoke; PEER_POLL_FACTOR times that for another node's steady part."""
        if (self.progress or self.board.path is None or self.misses or time.monotonic() < self.fast_until
                or self.current.get("state") not in STEADY_STATES):
            return self.poll_s
        return self.poll_s * PEER_POLL_FACTOR

    def poll(self) -> str | None:
        """Read this node's job (a node that does not answer max_misses times in a row is unreachable)."""
        answer = self.status(None)
        if answer.get("failed") or answer.get("unreachable"):
            self.misses += 1
            if self.misses >= self.max_misses:
                # The plain word: an enum in a registered result makes Ansible warn that it converts it.
                self.current = {"state": JobState.UNREACHABLE.value, "ended_at": time.time(), "error": answer.get("msg")}
        else:
            self.misses = 0
            self.current = answer["jobs"][0]
        return self.current.get("state")

    def show_progress(self) -> None:
        """A new attempt, and the log's last line when it changed (at most every progress_s)."""
        if not self.progress:
            return
        current = self.current
        self.show_queue()
        if isinstance(current.get("attempt"), int) and current["attempt"] != self.attempt:
            self.attempt = current["attempt"]
            self.say("  [%s] the job failed; attempt %d of %s on master port %s" % (
                self.host, self.attempt, int(current.get("max_restarts") or 0) + 1, current.get("master_port")))
        if current.get("last_line") and current["last_line"] != self.last_shown:
            if time.monotonic() - self.last_shown_at >= self.progress_s:
                self.last_shown, self.last_shown_at = current["last_line"], time.monotonic()
                self.say("  [%s %4ds] %s" % (self.host, time.monotonic() - self.started, self.last_shown))

    def show_queue(self) -> None:
        """Slurm's state of the job each time it changes while this node's part is queued, then its start."""
        slurm = self.current.get("slurm") or {}
        if self.current.get("state") != JobState.QUEUED:
            if self.last_queue:
                self.last_queue = ""
                job_id = slurm.get("job_id") or self.current.get("slurm_job_id")
                self.say("  [%s %4ds] Slurm job %s started" % (self.host, time.monotonic() - self.started, job_id))
            return
        reason = slurm.get("reason")
        shown = "%s (%s)" % (str(slurm.get("state", "?")).lower(), reason) if reason not in (None, "", "None") \
            else str(slurm.get("state", "?")).lower()
        if shown != self.last_queue:
            self.last_queue = shown
            self.say("  [%s %4ds] Slurm job %s: %s" % (self.host, time.monotonic() - self.started,
                                                       self.current.get("slurm_job_id"), shown))

    def final(self, tail: int) -> dict:
        current = self.current
        if current.get("state") != JobState.UNREACHABLE:
            answer = self.status(tail)
            if not answer.get("failed") and not answer.get("unreachable"):
                current = answer["jobs"][0]
        current["host"] = self.host
        current.setdefault("node_rank", self.node_rank)  # a spare's is the rank it took, in its state
        if self.was_interrupted:
            current["interrupted"] = True
        return current


class ActionModule(ActionBase):
    """Polls the node's job until it ends and returns its final state; stops it only on Ctrl-C."""

    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = action_args.validated(self, documentation.DOCUMENTATION)
        job, jobs_dir = args["job"], args["jobs_dir"]

        host = task_vars["inventory_hostname"]
        polls = {"shell": 0, "job_status": 0}  # how this node was read: returned, so that it can be checked
        shell_works = True

        known = job_poll.NOTHING  # what the last poll found in state.json: what the next one asks about

        def status(tail: int | None) -> dict:
            nonlocal shell_works, known
            try:
                if tail is None and shell_works:
                    found, known, understood = self._light_poll(host, jobs_dir, job, known, polls)
                    if found is not None:
                        return found
                    # Not understood: job_status from now on. (Asked again and still not to be judged, as when the
                    # job was relaunched between the two: job_status this once.)
                    shell_works = understood
                polls["job_status"] += 1
                module_args: dict[str, Any] = {"job": job, "jobs_dir": jobs_dir}
                if tail is not None:  # the final read: under Slurm, with the job's final state in Slurm
                    module_args.update(tail=tail, slurm_wait_s=SLURM_FINAL_WAIT_S)
                return self._execute_module("gpufleet.cluster.job_status", module_args=module_args,
                                            task_vars=task_vars)
            except AnsibleConnectionFailure as exc:
                return {"failed": True, "msg": str(exc)}

        def stop(reason: str) -> None:
            try:
                self._execute_module("gpufleet.cluster.job_stop",
                                     module_args={"job": job, "jobs_dir": jobs_dir, "reason": reason,
                                                  "dump_stacks": args["dump_stacks"]},
                                     task_vars=task_vars)
            except AnsibleConnectionFailure:
                pass  # the node is unreachable: its own supervisor is all that can act there

        wait = NodeWait(host, args["node_rank"], status, stop, max_misses=args["max_misses"],
                        progress=args["progress"], progress_s=args["progress_s"], poll_s=args["poll_s"],
                        board=WakeBoard(os.environ.get(WAKE_VAR)))
        current = wait.run(args["tail"])
        current["job"] = job
        result.update(changed=False, job_result=current, polls=polls)
        return result

    def _light_poll(self, host: str, jobs_dir: str, job: str, known: job_poll.Known,
                    polls: dict) -> tuple[dict | None, job_poll.Known, bool]:
        """job_status's answer without its log tail, from one shell command (no Python started on the node), or two
        where the first asked about another supervisor or Slurm job than state.json names (job_poll.parse): (the
        answer or None, what the next poll asks about, whether the shell's answers were understood)."""
        done: dict = {}
        for _ask in range(2):
            # sudoable only under become: ssh then gives the command a terminal (-tt), which parse() undoes.
            done = self._low_level_execute_command(job_poll.poll_command(jobs_dir, job, known),
                                                   sudoable=bool(self._play_context.become))
            polls["shell"] += 1
            found, wanted = job_poll.parse(done.get("stdout") or "", known) if done.get("rc") == 0 else (None, None)
            if wanted is None:
                break
            known = wanted
            if found is not None:
                return {"changed": False, "jobs": [found]}, known, True
        else:
            return None, known, True
        display.warning("%s: the shell's answer to the poll of job %s was not understood (rc %s); the job_status "
                        "module polls this node from now on (a Python start on the node per poll)"
                        % (host, job, done.get("rc")))
        display.vvv("%s: the answer: %r" % (host, (done.get("stdout") or "")[-500:]
                                            + (done.get("stderr") or "")[-500:]))
        return None, known, False
