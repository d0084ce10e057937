# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The per-node job supervisor: the loop that runs, watches, restarts and stops one node's part of a job.

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
  exit code in ``exit_code``;
- takes part in the gang (when the spec lists the job's nodes): it sends an
  authenticated UDP heartbeat to every other node's supervisor each
  ``heartbeat_s`` and stops its own node's part when another node's part
  failed, or when another node has been silent for ``heartbeat_misses``
  heartbeats. No controller is needed for that, so a detached job fails
  fast too. The same heartbeats carry how long each node's log has been
  silent, for the hang watchdog (``hang_timeout_s``), and which attempt each
  node is in, so that with ``max_restarts`` the whole gang is launched again
  together, on the next of ``restart_ports``.

Under Slurm (scheduler=slurm; module_utils/slurm_jobs.py) srun starts it in the foreground, as the step's task on
the node, and the master port and the relaunch ports come from ``GPUFLEET_PORTS``, chosen on node 0 when the
allocation started (``supervisor.py --pick-ports N`` prints them).

Processes are only ever signalled by PID after checking they carry this run's
token: never by name or pattern. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

# The job's vocabulary, processes and gang, shipped together with this file (supervisor_bundle.shipped_source).
from ansible_collections.gpufleet.cluster.plugins.module_utils.containers import (
    ENGINE_TIMEOUT_S,
    begin_container_stop,
    container_of,
    remove_container,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.free_ports import pick_free_ports
from ansible_collections.gpufleet.cluster.plugins.module_utils.gang import Gang, LoneNode, describe, gang_failure
from ansible_collections.gpufleet.cluster.plugins.module_utils.job_processes import (
    _set_parent_death_signal,
    end_run,
    proc_is_rank,
    proc_is_rank_itself,
    proc_start_ticks,
    read_json,
    run_processes,
    run_token,
    signal_name,
    signal_run,
    terminate,
    write_json_atomic,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.job_states import (
    AGENT_LAUNCHERS,
    EXIT_CODE_FILE,
    GANG_KEY_FILE,
    LAUNCH_FILE,
    LOG_FILE,
    PORTS_VAR,
    RUN_ID_VAR,
    SINGLE_ENTRY,
    SPEC_FILE,
    STATE_FILE,
    STOP_REQUEST_FILE,
    STOPPED_FOR,
    TOKEN_VAR,
    Defaults,
    HeartbeatPhase,
    JobState,
    StopReason,
    read_stop_request,
)

# Seconds between the three final heartbeats a supervisor sends before it exits.
FAREWELL_GAP_S = 0.05


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
        self.grace_s = float(spec.get("grace_s", Defaults.GRACE_S))
        self.hang_timeout_s = float(spec.get("hang_timeout_s") or 0)
        # An attempt's start (imports, data loading, rendezvous) is often silent for longer than a step: before
        # this node's first output of the attempt, its silence counts only past this allowance.
        self.hang_startup_s = float(spec.get("hang_startup_s") or 0)
        self.ports = [int(spec["master_port"])] + [int(p) for p in spec.get("restart_ports") or []]
        if spec.get("scheduler") == "slurm" and os.environ.get(PORTS_VAR):
            # Chosen when Slurm started the job, not when it was submitted; the gang's heartbeats use the first.
            self.ports = [int(port) for port in os.environ[PORTS_VAR].split(",")]
            spec["master_port"] = self.ports[0]
        self.max_restarts = min(int(spec.get("max_restarts") or 0), len(self.ports) - 1)
        self.stop_reason: str | None = None
        self.stop_for: str | None = None  # a stop request's node whose failure it is for (the controller's)
        self.gang: Gang | LoneNode = LoneNode()  # a Gang once joined, when the job has several nodes
        self.attempt = 1
        self.outcome: dict = {}
        self.last_output = time.monotonic()
        self.log_size = -1
        # The log's size when the attempt started: output beyond it is the attempt's own.
        self.attempt_log_size = -1
        self.next_beat = 0.0
        # The run's ranks, each with a pidfd (Linux 5.3+) that becomes readable the moment it exits; the ranks' own
        # children (DataLoader workers, compilers), which end in the normal course of training, are not watched.
        self.watched: dict[int, int | None] = {}
        self.rank_children: set[int] = set()
        self.first_exit_at: float | None = None
        self.next_scan = 0.0
        self.attempt_started = time.monotonic()
        # While a run stops: when its last rank was first seen gone (an agent launcher is then left alone).
        self.ranks_gone_at: float | None = None
        # With a container image: the engine's stop of this attempt's container, while it runs.
        self.engine_stop: subprocess.Popen | None = None
        self.state: dict = {
            "job": spec.get("job"),
            "run_id": self.run_id,
            "node_rank": spec.get("node_rank"),
            "state": JobState.STARTING,
            "supervisor_pid": os.getpid(),
            "supervisor_start_ticks": proc_start_ticks(os.getpid()),
            "started_at": time.time(),
            "attempt": 1,
            "max_restarts": self.max_restarts,
            "attempts": [],
        }
        if spec.get("container_engine"):
            self.state.update(container=container_of(spec), image=spec.get("container_image"),
                              image_id=spec.get("container_image_id"))
        if spec.get("scheduler") == "slurm":
            self.state.update(slurm_job_id=os.environ.get("SLURM_JOB_ID"),
                              slurm_step_id=os.environ.get("SLURM_STEP_ID"),
                              slurm_node=os.environ.get("SLURMD_NODENAME"))

    def _save(self, **changes: object) -> None:
        self.state.update(changes)
        write_json_atomic(os.path.join(self.job_dir, STATE_FILE), self.state)

    def _log(self, line: str) -> None:
        with open(os.path.join(self.job_dir, LOG_FILE), "ab") as log:
            log.write(("[gpufleet] %s\n" % line).encode())

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.stop_reason is None:
            try:
                with open(os.path.join(self.job_dir, STOP_REQUEST_FILE)) as handle:
                    self.stop_reason, self.stop_for = read_stop_request(handle.read())
                self.stop_reason = self.stop_reason or None
            except OSError:
                pass
            self.stop_reason = self.stop_reason or "stopped by %s" % signal_name(signum)

    # -- the gang ---------------------------------------------------------------------------------------------

    def _join_gang(self) -> None:
        if not self.spec.get("nodes") or len(self.spec["nodes"]) < 2:
            return
        with open(os.path.join(self.job_dir, GANG_KEY_FILE), "rb") as handle:
            key = handle.read().strip()
        self.gang = Gang(self.spec, key)

    def _beat(self, phase: HeartbeatPhase, final: bool = False, force: bool = False) -> None:
        """Send this node's heartbeat when one is due (or now, with force)."""
        if not force and time.monotonic() < self.next_beat:
            return
        self.next_beat = time.monotonic() + self.gang.heartbeat_s
        outcome = self.outcome if phase == HeartbeatPhase.ENDED else {}
        self.gang.send({
            "attempt": self.attempt, "phase": phase, "final": final,
            "outcome": outcome.get("outcome"), "exit_code": outcome.get("exit_code"),
            "signal": outcome.get("signal"), "reason": outcome.get("reason"),
            STOPPED_FOR: outcome.get(STOPPED_FOR), "silent_s": round(self._silence_s(), 1),
        })

    def _watch(self) -> None:
        """Start watching the run's new ranks (often at first, then every few seconds)."""
        now = time.monotonic()
        if now < self.next_scan:
            return
        self.next_scan = now + (0.5 if now - self.attempt_started < 30 else 5.0)
        for pid in run_processes(self.token):
            if pid in self.watched or pid in self.rank_children:
                continue
            if not proc_is_rank_itself(pid):
                # A rank's child stays one; anything else (the launcher, a rank not yet exec'd) is looked at again.
                if proc_is_rank(pid):
                    self.rank_children.add(pid)
                continue
            try:
                # Python 3.9+ only, and guarded: without it (3.8) the watch falls back to polling.
                self.watched[pid] = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None  # novermin
            except OSError:
                self.watched[pid] = None
        for pid, fd in list(self.watched.items()):
            if fd is None and proc_start_ticks(pid) is None:
                self._exited(pid)  # no pidfd: noticed by polling, to the nearest scan

    def _exited(self, pid: int) -> None:
        """A rank (or the launcher) has ended: the first such moment is when this node's part began to end."""
        if self.first_exit_at is None:
            self.first_exit_at = time.time()
        fd = self.watched.pop(pid, None)
        if fd is not None:
            os.close(fd)

    def _unwatch(self) -> None:
        for pid in list(self.watched):
            fd = self.watched.pop(pid)
            if fd is not None:
                os.close(fd)

    def _tick(self, phase: HeartbeatPhase, timeout_s: float = 0.2) -> None:
        """One turn of the loop: heartbeat, hear the others, note exits of the run's processes and new output."""
        self._beat(phase)
        fds = {fd: pid for pid, fd in self.watched.items() if fd is not None}
        self.gang.receive(timeout_s, extra=fds, on_extra=self._exited)
        try:
            size = os.path.getsize(os.path.join(self.job_dir, LOG_FILE))
        except OSError:
            size = -1
        if size != self.log_size:
            self.log_size, self.last_output = size, time.monotonic()

    def _silence_s(self) -> float:
        """How long this node's log has been silent, for the hang watchdog: counted from the attempt's first output,
        or, before any, from the attempt's start less the startup allowance (negative while within it)."""
        now = time.monotonic()
        if self.log_size > self.attempt_log_size:
            return now - self.last_output
        return now - self.attempt_started - self.hang_startup_s

    def _stop_decision(self) -> StopReason | None:
        """Whether this node's part must stop now: a stop request (stop.yml, Ctrl-C, a signal) first, else the
        gang's reason."""
        if self.stop_reason is not None:
            return StopReason(JobState.STOPPED, self.stop_reason, self.stop_for)
        return self._gang_stop_reason()

    def _begin_stop(self, stop: StopReason) -> None:
        self.ranks_gone_at = None
        self._save(state=JobState.STOPPING, stop_reason=stop.reason, stop_requested_at=time.time())
        self._log(stop.reason)

    def _gang_stop_reason(self) -> StopReason | None:
        """Why this node's part must stop because of the gang (another node failed or was lost, or every node's log
        has been silent for hang_timeout_s), else None."""
        failure = gang_failure(self.gang, self.attempt)
        if failure is not None:
            rank, news = failure
            host = self.gang.host(rank)
            if news.get("outcome") == JobState.HUNG:  # a hang is the whole job's, not one node's
                return StopReason(JobState.HUNG, str(news.get("reason")), None)
            return StopReason(JobState.STOPPED, "stopped by gpufleet: %s" % describe(host, rank, news), host)
        lost = self.gang.lost()
        if lost:
            self._note_lost(lost)
            return self._lost_reason(lost)
        if self.hang_timeout_s:
            silences = [self._silence_s()] + [self.gang.silence_s(rank) for rank in self.gang.peers()]
            if all(s is not None and s >= self.hang_timeout_s for s in silences):
                return StopReason(JobState.HUNG, "hung: no node wrote to its log for %.0f s (hang_timeout=%.0f)"
                                  % (min(s for s in silences if s is not None), self.hang_timeout_s), None)
        return None

    def _lost_reason(self, lost: list[int]) -> StopReason:
        """Why this node stops for lost peers: those never heard since the join (a port the firewall drops, a node
        that never started) are named with the UDP port and the wait; else the first that fell silent, and for how
        long."""
        gang = self.gang
        if not isinstance(gang, Gang):  # a lone node has no peers to lose
            raise TypeError("no gang to have lost a peer of")
        never = gang.never_heard(lost)
        if never:
            host = gang.host(never[0])
            return StopReason(JobState.STOPPED, "stopped by gpufleet: no heartbeat from %s arrived at this node's UDP "
                              "port %d in the %.1f s it waited (join_timeout_s=%g): the UDP port must be open "
                              "between every pair of nodes, and each of those nodes' supervisor started"
                              % (", ".join("%s (node_rank %d)" % (gang.host(rank), rank) for rank in never),
                                 gang.port, gang.waited_s(), gang.join_timeout_s), host)
        host = gang.host(lost[0])
        return StopReason(JobState.STOPPED, "stopped by gpufleet: %s (node_rank %d) lost: no heartbeat for %.0f s "
                          "(UDP port %d)" % (host, lost[0], gang.silent_s(lost[0]), gang.port), host)

    def _note_lost(self, ranks: list[int]) -> None:
        """Record when each lost peer was last heard (wall clock): the report orders failures by it."""
        lost = dict(self.state.get("peers_lost") or {})
        for rank in ranks:
            lost.setdefault(self.gang.host(rank), round(self.gang.last_heard_wall(rank), 3))
        self._save(peers_lost=lost)

    # -- one attempt --------------------------------------------------------------------------------------------

    def _start(self, port: int) -> subprocess.Popen:
        env = dict(os.environ)
        env[RUN_ID_VAR] = self.run_id
        env[TOKEN_VAR] = self.token
        env["GPUFLEET_MASTER_PORT"] = str(port)
        env["GPUFLEET_ATTEMPT"] = str(self.attempt)
        with open(os.path.join(self.job_dir, LOG_FILE), "ab", buffering=0) as log:
            return subprocess.Popen(  # pylint: disable=consider-using-with
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

    def _begin_attempt(self) -> None:
        self.last_output = self.attempt_started = time.monotonic()
        self.first_exit_at, self.next_scan = None, 0.0
        self.rank_children.clear()
        try:
            self.log_size = self.attempt_log_size = os.path.getsize(os.path.join(self.job_dir, LOG_FILE))
        except OSError:
            self.log_size = self.attempt_log_size = 0  # no log yet: the attempt creates it, empty

    def _follower(self) -> bool:
        """Whether node 0's single entry command (mpirun, horovodrun) starts this node's ranks."""
        return self.spec.get("launcher") in SINGLE_ENTRY and int(self.spec["node_rank"]) != 0 and bool(self.gang.peers())

    def _follow_attempt(self, port: int) -> dict:
        """Start nothing; follow node 0's part of this attempt and end this node's ranks when it ends or fails."""
        self._begin_attempt()
        self._save(state=JobState.RUNNING, pid=os.getpid(), follower=True, attempt=self.attempt, master_port=port)
        self._log("node_rank %s takes part through node 0's %s: its ranks' output is in node 0's log"
                  % (self.spec["node_rank"], self.spec.get("launcher")))
        gang = self.gang
        leader: dict = {}
        stopping: StopReason | None = None
        while True:
            self._watch()
            self._tick(HeartbeatPhase.RUNNING)
            leader = gang.news.get(0) or {}
            if leader.get("attempt") == self.attempt and leader.get("phase") == HeartbeatPhase.ENDED or leader.get("final"):
                break
            stopping = self._stop_decision()
            if stopping is not None:
                self._begin_stop(stopping)
                break
        # Whatever of the run is still on this node is ended: node 0's launcher is done with it, or it must stop.
        self._unwatch()
        end_run(self.token, self.grace_s)
        outcome = {"attempt": self.attempt, "master_port": port, "ended_at": time.time(),
                   "first_exit_at": self.first_exit_at, "exit_code": 0, "signal": None, "outcome": JobState.SUCCEEDED}
        if stopping is not None:
            outcome.update(outcome=stopping.outcome, reason=stopping.reason, stopped_for=stopping.stopped_for,
                           exit_code=1)
        elif leader.get("outcome") != JobState.SUCCEEDED:
            reason = "stopped by gpufleet: %s" % describe(gang.host(0), 0, leader)
            outcome.update(outcome=JobState.STOPPED, reason=reason, stopped_for=gang.host(0), exit_code=1)
        return outcome

    def _run_attempt(self, port: int) -> dict:
        """Run the launch script once; return this node's outcome of the attempt."""
        self._begin_attempt()
        child = self._start(port)
        self._save(state=JobState.RUNNING, pid=child.pid, pgid=child.pid, attempt=self.attempt, master_port=port)
        stopping: StopReason | None = None
        stopping_since = 0.0
        stop_decided_at = float("inf")
        terminated = killed = False
        while child.poll() is None:
            self._watch()
            self._tick(HeartbeatPhase.RUNNING)
            if stopping is None:
                stopping = self._stop_decision()
                if stopping is not None:
                    stopping_since, stop_decided_at = time.monotonic(), time.time()
                    self._begin_stop(stopping)
                    if not self._ending_on_its_own(stopping):
                        self._terminate()
                        terminated = True
            elif not terminated:
                if time.monotonic() - stopping_since > self.grace_s:
                    self._terminate()  # the launcher had its grace to end on its own; the usual stop from here
                    terminated, stopping_since = True, time.monotonic()
            elif not killed and self._grace_over(stopping_since):
                signal_run(self.token, signal.SIGKILL)
                killed = True
        returncode = child.returncode
        if self.first_exit_at is None or child.pid in self.watched:
            self._exited(child.pid)
        self._unwatch()
        if self.spec.get("container_engine"):
            # The engine's client is gone; the container, if anything of it is left, goes through the engine.
            remove_container(self.spec)
            if self.engine_stop is not None:
                try:
                    self.engine_stop.wait(ENGINE_TIMEOUT_S)
                except subprocess.TimeoutExpired:  # an engine that does not answer must not hold the supervisor
                    self.engine_stop.kill()
                    self.engine_stop.wait()
                self.engine_stop = None
        # The launcher is gone; whatever of the run outlived it is ended now.
        end_run(self.token, min(self.grace_s, 5.0))
        outcome = {
            "attempt": self.attempt,
            "master_port": port,
            "exit_code": returncode if returncode >= 0 else 128 - returncode,
            "signal": signal_name(-returncode) if returncode < 0 else None,
            "ended_at": time.time(),
            "first_exit_at": self.first_exit_at,
            "outcome": JobState.SUCCEEDED if returncode == 0 else JobState.FAILED,
        }
        if stopping is not None and self._failed_before(stopping, returncode, stop_decided_at):
            outcome["rank_ended_first"] = True  # the launcher's own end came after the stop: not what failed
        elif stopping is not None:
            outcome.update(outcome=stopping.outcome, reason=stopping.reason, stopped_for=stopping.stopped_for)
        return outcome

    def _ending_on_its_own(self, stopping: StopReason) -> bool:
        """Whether the gang's news came while this node's launcher was already ending its part on its own, a rank
        of it having ended: it is left its grace period to finish (torchrun ends the node's other ranks, then
        prints which rank failed first and how, which a SIGTERM would cut short)."""
        return stopping.stopped_for is not None and self.first_exit_at is not None

    def _failed_before(self, stopping: StopReason, returncode: int, stop_decided_at: float) -> bool:
        """Whether this node's part was failing on its own before the gang's news stopped it: a rank of it had
        ended before the news came, and its launcher ended in failure. The news then only raced this node's own
        (a rank dies; a rank on another node fails in a collective a moment later, and its launcher, with no
        other rank to end, reports first): this node failed, and which failure came first is the report's to
        decide, by time. A stop the user asked for, or a hang, stays what it is."""
        return (stopping.stopped_for is not None and returncode != 0 and self.first_exit_at is not None
                and self.first_exit_at < stop_decided_at)

    def _terminate(self) -> None:
        """Ask the run to end: its container through the engine (stop: SIGTERM to the container's init, which passes
        it on, SIGKILL after the grace period), or SIGTERM to the run's processes."""
        if self.spec.get("container_engine"):
            self.engine_stop = begin_container_stop(self.spec)
            if self.engine_stop is not None:
                return
        terminate(self.token)

    def _grace_over(self, stopping_since: float) -> bool:
        """Whether what is left of a stopping run is SIGKILLed now: at the end of the grace period, or, with an
        agent launcher, AGENT_GRACE_S after its last rank ended (the ranks had their grace to save their work)."""
        now = time.monotonic()
        if now - stopping_since > self.grace_s:
            return True
        launcher = str(self.spec.get("launcher") or "torchrun")
        if launcher not in AGENT_LAUNCHERS:
            return False
        if any(proc_is_rank(pid) for pid in run_processes(self.token)):
            self.ranks_gone_at = None
            return False
        if self.ranks_gone_at is None:
            self.ranks_gone_at = now
        if now - self.ranks_gone_at < Defaults.AGENT_GRACE_S:
            return False
        self._log("every rank has ended; %s was still running %.0f s later: ended with SIGKILL"
                  % (launcher, Defaults.AGENT_GRACE_S))
        return True

    def _await_peers(self) -> str:
        """Wait until every peer's part of this attempt has ended, and say how the attempt ended for the gang.

        'succeeded' (every part succeeded), 'failed' (a part failed: a restart may help), 'stopped' (stopped
        by a user, or hung: no restart) or 'lost' (a node stopped answering: no restart either).
        """
        parts = [self.outcome]
        if self.gang.peers():
            self._beat(HeartbeatPhase.ENDED, force=True)
            # Waiting for the others only matters when the gang may launch again together; a part that failed
            # with no restart left (or was stopped) has told the others, and this node is done.
            final = self.outcome.get("outcome") != JobState.SUCCEEDED and not self._may_restart()
            if not final:
                self._save(phase="this node's part has ended; waiting for the other nodes")
            while self.stop_reason is None and not final:
                pending = [rank for rank in self.gang.peers() if not self._peer_done(rank)]
                if not pending:
                    break
                lost = [rank for rank in pending if rank in self.gang.lost()]
                if lost:
                    self._note_lost(lost)
                    return JobState.LOST
                self._tick(HeartbeatPhase.ENDED)
            for rank in self.gang.peers():
                news = self.gang.news.get(rank) or {}
                parts.append(news if news.get("attempt") == self.attempt else {"outcome": JobState.FAILED})
        if all(part.get("outcome") == JobState.SUCCEEDED for part in parts):
            return JobState.SUCCEEDED
        if self.stop_reason is not None or any(
            part.get("outcome") == JobState.HUNG or (part.get("outcome") == JobState.STOPPED and not part.get(STOPPED_FOR))
            for part in parts
        ):
            return JobState.STOPPED
        return JobState.FAILED

    def _may_restart(self) -> bool:
        return self.attempt <= self.max_restarts and self.stop_reason is None

    def _peer_done(self, rank: int) -> bool:
        """Whether peer rank's part of this attempt has ended (or it has moved on, or ended for good)."""
        news = self.gang.news.get(rank) or {}
        if news.get("final") or news.get("attempt", 0) > self.attempt:
            return True
        return news.get("attempt") == self.attempt and news.get("phase") == HeartbeatPhase.ENDED

    # -- the whole run ------------------------------------------------------------------------------------------

    def run(self) -> int:
        """Supervise the job to its end; the supervisor's exit status is this node's exit code (1 when it could not
        join the gang). Nothing waits for it: state.json and exit_code are what the job modules read."""
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._on_signal)
        try:
            self._join_gang()
        except OSError as exc:
            self.outcome = {"outcome": JobState.FAILED, "exit_code": 1, "reason": "cannot join the gang: %s" % exc}
            self._write_exit_code(1)
            self._save(state=JobState.FAILED, exit_code=1, ended_at=time.time(), error=self.outcome["reason"])
            return 1
        self._save()
        while True:
            port = self.ports[self.attempt - 1]
            if self.attempt > 1:
                self._log("attempt %d of %d, master port %d" % (self.attempt, self.max_restarts + 1, port))
            self.outcome = self._follow_attempt(port) if self._follower() else self._run_attempt(port)
            self.state["attempts"].append(self.outcome)
            gang = self._await_peers()
            retry = gang == JobState.FAILED and self._may_restart()
            if not retry:
                break
            self.attempt += 1
            self._save(state=JobState.RESTARTING, attempt=self.attempt)
        return self._finish(gang)

    def _finish(self, gang: str) -> int:
        self.state.pop("phase", None)
        # exit_code first: whoever sees the final state in state.json finds exit_code there too.
        self._write_exit_code(self.outcome["exit_code"])
        self._save(
            state=self.outcome["outcome"],
            exit_code=self.outcome["exit_code"],
            signal=self.outcome.get("signal"),
            ended_at=self.outcome["ended_at"],
            first_exit_at=self.outcome.get("first_exit_at"),
            rank_ended_first=bool(self.outcome.get("rank_ended_first")),
            stop_reason=self.outcome.get("reason") or self.stop_reason,
            stopped_for=self.outcome.get(STOPPED_FOR),
            gang=gang,
            # When each peer was last heard (wall clock): a peer whose supervisor vanished failed about then, and the
            # report orders it by this even when this node ended before counting it lost.
            peers_last_heard={self.gang.host(rank): round(self.gang.last_heard_wall(rank), 3)
                              for rank in self.gang.peers() if rank in self.gang.heard},
        )
        if self.gang.peers():
            # Say it a few times, a moment apart, so that one lost datagram does not leave a peer waiting.
            for _beat in range(3):
                self._beat(HeartbeatPhase.ENDED, final=True, force=True)
                time.sleep(FAREWELL_GAP_S)
        self.gang.close()
        return int(self.outcome["exit_code"])

    def _write_exit_code(self, exit_code: int) -> None:
        with open(os.path.join(self.job_dir, EXIT_CODE_FILE), "w") as handle:
            handle.write("%d\n" % exit_code)


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "--pick-ports":
        try:
            picked = pick_free_ports(int(argv[2]))
        except RuntimeError as exc:
            sys.stderr.write("gpufleet supervisor: %s\n" % exc)
            return 1
        sys.stdout.write(",".join(str(port) for port in picked) + "\n")
        return 0
    if len(argv) != 2:
        sys.stderr.write("usage: supervisor.py JOB_DIR | supervisor.py --pick-ports N\n")
        return 2
    os.umask(0o077)  # the job's log, state and what the training writes stay its owner's
    return Supervisor(os.path.abspath(argv[1])).run()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
