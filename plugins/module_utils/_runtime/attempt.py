# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One attempt of a node's part of a job: run the launch script once (or, for a node whose ranks node 0's single
entry command starts, follow node 0's part), stop it when the supervisor decides so, and say how it ended.

The supervisor (supervisor.py) runs one Attempt per try and decides between them (restarts, the gang's verdict);
the attempt owns what lives only while it runs: the launcher's process, the stop in progress (grace period,
SIGKILL, the container's stop through the engine). Processes are only ever signalled through the run's token.
Shipped to the nodes as part of the supervisor; standard library only, Python 3.8+.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import time
from typing import Protocol

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gang import Gang, LoneNode, lost_at
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gang_rules import (
    attempt_verdict, describe, ending_on_its_own, failed_before, peer_done)
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.heartbeat import Heartbeat
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_processes import (
    RankWatch,
    _set_parent_death_signal,
    end_run,
    proc_is_rank,
    run_processes,
    signal_name,
    signal_run,
    terminate,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import (
    AGENT_LAUNCHERS,
    LAUNCH_FILE,
    LOG_FILE,
    RUN_ID_VAR,
    TOKEN_VAR,
    Defaults,
    HeartbeatPhase,
    JobState,
    PartOutcome,
    StopReason,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.log_silence import TAGGING_LAUNCHERS
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.rank_stacks import hung_in
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.restart_policy import exit_code_of, failed_at, read_tail
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.runtimes import HostRuntime
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.spares import place_env
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.stop_notice import notice_env


class AttemptHost(Protocol):
    """What an attempt uses of its node's supervisor."""

    spec: dict
    job_dir: str
    run_id: str
    token: str
    grace_s: float
    attempt: int
    node_rank: int
    state: dict
    host: str
    stop_reason: str | None
    restart_reason: str
    ended: PartOutcome | None
    gang: Gang | LoneNode
    ranks: RankWatch
    runtime: HostRuntime
    first_failure: FirstFailure

    def save(self, **changes: object) -> None: ...

    def beat(self, phase: HeartbeatPhase, final: bool = False, force: bool = False) -> None: ...

    def may_restart(self) -> bool: ...

    def log(self, line: str) -> None: ...

    def begin_attempt(self) -> None: ...

    def tick(self, phase: HeartbeatPhase, timeout_s: float = 0.2) -> None: ...

    def stop_decision(self) -> StopReason | None: ...

    def begin_stop(self, stop: StopReason) -> None: ...


class Attempt:
    """One try of this node's part, on one master port."""

    def __init__(self, node: AttemptHost, port: int) -> None:
        self.node = node
        self.port = port
        # With a container image: the engine's stop of this attempt's container, while it runs.
        self.engine_stop: subprocess.Popen | None = None
        # While the run stops: when its last rank was first seen gone (an agent launcher is then left alone).
        self.ranks_gone_at: float | None = None

    def _start(self) -> subprocess.Popen:
        node = self.node
        env = dict(os.environ)
        env[RUN_ID_VAR] = node.run_id
        env[TOKEN_VAR] = node.token
        env["GPUFLEET_MASTER_PORT"] = str(self.port)
        env["GPUFLEET_ATTEMPT"] = str(node.attempt)
        env["GPUFLEET_RESTART_REASON"] = node.restart_reason  # why this attempt is a restart; empty in the first
        env.update(place_env(node))  # with spares: this attempt's node rank, master address and ranks here
        env.update(notice_env(node.job_dir, node.grace_s))  # where the ranks hear of a stop before it (stop_notice.py)
        with open(os.path.join(node.job_dir, LOG_FILE), "ab", buffering=0) as log:
            return subprocess.Popen(  # pylint: disable=consider-using-with
                ["/bin/bash", os.path.join(node.job_dir, LAUNCH_FILE)],
                cwd=node.job_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_set_parent_death_signal,  # pylint: disable=subprocess-popen-preexec-fn
                close_fds=True,
            )

    def follow(self) -> PartOutcome:
        """Start nothing; follow node 0's part of this attempt and end this node's ranks when it ends or fails."""
        node = self.node
        node.begin_attempt()
        node.save(state=JobState.RUNNING, pid=os.getpid(), follower=True, attempt=node.attempt, master_port=self.port)
        node.log("node_rank %s takes part through node 0's %s: its ranks' output is in node 0's log"
                 % (node.spec["node_rank"], node.spec.get("launcher")))
        gang = node.gang
        leader: Heartbeat | None = None
        stopping: StopReason | None = None
        while True:
            node.ranks.scan()
            node.tick(HeartbeatPhase.RUNNING)
            leader = gang.news.get(0) if isinstance(gang, Gang) else None
            if leader is not None and (leader.attempt == node.attempt and leader.phase == HeartbeatPhase.ENDED
                                       or leader.final):
                break
            stopping = node.stop_decision()
            if stopping is not None:
                node.begin_stop(stopping)
                break
        # Whatever of the run is still on this node is ended: node 0's launcher is done with it, or it must stop.
        node.ranks.close()
        end_run(node.token, node.grace_s)
        ended = PartOutcome(JobState.SUCCEEDED, 0, attempt=node.attempt, master_port=self.port, ended_at=time.time(),
                            first_exit_at=node.ranks.first_exit_at)
        if stopping is None and leader is not None and leader.outcome != JobState.SUCCEEDED:
            stopping = StopReason(JobState.STOPPED, "stopped by gpufleet: %s" % describe(gang.host(0), 0, leader),
                                  gang.host(0))
        return ended if stopping is None else ended.stopped(stopping, exit_code=1)

    def run(self) -> PartOutcome:
        """Run the launch script once; return this node's outcome of the attempt."""
        node = self.node
        node.begin_attempt()
        child = self._start()
        node.ranks.watch_launcher(child.pid)  # its end wakes the loop at once, not at its next turn
        node.save(state=JobState.RUNNING, pid=child.pid, pgid=child.pid, attempt=node.attempt, master_port=self.port)
        stopping: StopReason | None = None
        stopping_since = 0.0
        stop_decided_at = float("inf")
        terminated = killed = False
        while child.poll() is None:
            node.ranks.scan()
            node.tick(HeartbeatPhase.RUNNING)
            if stopping is None:
                stopping = node.stop_decision()
                if stopping is not None:
                    stop_decided_at = time.time()
                    node.begin_stop(stopping)  # stacks where wanted, then the stop notice: the grace counts from it
                    stopping_since = time.monotonic()
                    if not ending_on_its_own(stopping, node.ranks.first_exit_at):
                        self._terminate()
                        terminated = True
            elif not terminated:
                if time.monotonic() - stopping_since > node.grace_s:
                    self._terminate()  # the launcher had its grace to end on its own; the usual stop from here
                    terminated, stopping_since = True, time.monotonic()
            elif not killed and self._grace_over(stopping_since):
                signal_run(node.token, signal.SIGKILL)
                killed = True
        return self._ended(child, stopping, stop_decided_at)

    def _ended(self, child: subprocess.Popen, stopping: StopReason | None, stop_decided_at: float) -> PartOutcome:
        """The launcher has exited: end what is left of the run and say how this node's part of it ended."""
        node = self.node
        returncode = child.returncode
        if node.ranks.first_exit_at is None or child.pid in node.ranks.watched:
            node.ranks.exited(child.pid)
        node.ranks.close()
        node.runtime.end_attempt(node.spec, self.engine_stop)
        self.engine_stop = None
        # The launcher is gone; whatever of the run outlived it is ended now.
        end_run(node.token, min(node.grace_s, 5.0))
        ended = PartOutcome(
            JobState.SUCCEEDED if returncode == 0 else JobState.FAILED,
            returncode if returncode >= 0 else 128 - returncode,
            attempt=node.attempt,
            master_port=self.port,
            ended_at=time.time(),
            first_exit_at=node.ranks.first_exit_at,
            signal=signal_name(-returncode) if returncode < 0 else None,
        )
        if stopping is None:
            return ended
        if failed_before(stopping, returncode, node.ranks.first_exit_at, stop_decided_at,
                         failed_first=node.first_failure.status is not None):
            # A rank of this node had ended before the gang's news (or Slurm's SIGTERM) came: the part failed on its own.
            return dataclasses.replace(ended, rank_ended_first=True)
        return ended.stopped(stopping)

    def _terminate(self) -> None:
        """Ask the run to end: its container through the engine (stop: SIGTERM to the container's init, which passes
        it on, SIGKILL after the grace period), or SIGTERM to the run's processes."""
        self.engine_stop = self.node.runtime.begin_stop(self.node.spec)
        if self.engine_stop is None:
            terminate(self.node.token)

    def _grace_over(self, stopping_since: float) -> bool:
        """Whether what is left of a stopping run is SIGKILLed now: at the end of the grace period, or, with an
        agent launcher, AGENT_GRACE_S after its last rank ended (the ranks had their grace to save their work)."""
        now = time.monotonic()
        if now - stopping_since > self.node.grace_s:
            return True
        launcher = str(self.node.spec.get("launcher") or "torchrun")
        if launcher not in AGENT_LAUNCHERS:
            return False
        if any(proc_is_rank(pid) for pid in run_processes(self.node.token)):
            self.ranks_gone_at = None
            return False
        if self.ranks_gone_at is None:
            self.ranks_gone_at = now
        if now - self.ranks_gone_at < Defaults.AGENT_GRACE_S:
            return False
        self.node.log("every rank has ended; %s was still running %g s later: ended with SIGKILL"
                      % (launcher, Defaults.AGENT_GRACE_S))
        return True


class FirstFailure:
    """The first rank of this node that failed on its own in an attempt (RankWatch's news of it), and where: its
    exit code and the frame of its traceback in the attempt's part of the node's log (restart_policy.failed_at)."""

    def __init__(self, log_path: str, launcher: str) -> None:
        self.log_path = log_path
        self.tagged = launcher in TAGGING_LAUNCHERS
        self.start = 0  # the attempt's first byte in the log
        self.rank: int | None = None
        self.status: int | None = None

    def begin(self) -> None:
        self.rank = self.status = None
        try:
            self.start = os.path.getsize(self.log_path)
        except OSError:
            self.start = 0

    def rank_failed(self, rank: int | None, status: int) -> None:
        if self.status is None:
            self.rank, self.status = rank, status

    def of_attempt(self, outcome: str) -> dict:
        """PartOutcome's failed_rank, rank_exit and failed_at of a failed part (none of a part that did not fail)."""
        if outcome != JobState.FAILED:
            return {}
        rank, place = failed_at(read_tail(self.log_path, self.start), self.rank, self.tagged)
        return {"failed_rank": rank, "rank_exit": None if self.status is None else exit_code_of(self.status),
                "failed_at": place}


def await_peers(node: AttemptHost) -> tuple[str, list[Heartbeat]]:
    """Wait until every peer's part of this attempt has ended, and say how the attempt ended for the gang, with
    every node's part as heard: 'succeeded' (every part succeeded), 'failed' (a part failed or the job hung: a
    restart may help), 'stopped' (stopped by a user: no restart) or 'lost' (a node stopped answering)."""
    ended = node.ended
    if ended is None:
        raise RuntimeError("no attempt has ended")
    parts = [Heartbeat.of_part(ended, node.node_rank, hung_in(node.state.get("stacks")))]
    gang = node.gang
    if not isinstance(gang, Gang) or not gang.peers():
        return attempt_verdict(parts, node.stop_reason is not None), parts
    node.beat(HeartbeatPhase.ENDED, force=True)
    # Waiting for the others only matters when the gang may launch again together; a part that failed with no
    # restart left (or was stopped) has told the others, and this node is done.
    final = ended.outcome != JobState.SUCCEEDED and (not node.may_restart() or ended.hardware_fault)
    if not final:
        node.save(phase="this node's part has ended; waiting for the other nodes")
    while node.stop_reason is None and not final:
        pending = [rank for rank in gang.peers() if not peer_done(gang.news.get(rank), node.attempt)]
        if not pending:
            break
        lost = [rank for rank in pending if rank in gang.lost()]
        if lost:
            node.save(peers_lost=lost_at(gang, lost, node.state.get("peers_lost")))
            return JobState.LOST, parts
        node.tick(HeartbeatPhase.ENDED)
    for rank in gang.peers():
        # Its news of this attempt, though it may have moved on to the next one already (its latest news is then of
        # that one); a part this node never heard of counts as failed.
        news = gang.news_of(rank, node.attempt)
        parts.append(news if news else Heartbeat.unheard(rank, node.attempt))
    return attempt_verdict(parts, node.stop_reason is not None), parts
