# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The per-node job supervisor: the loop that runs, watches, restarts and stops one node's part of a job.

gpufleet.cluster.launch copies this file into the job folder and starts it detached (its own session), as ``python3
supervisor.py JOB_DIR``. It then:

- runs ``launch.sh`` in a new session and process group, output appended to ``job.log``, with ``GPUFLEET_RUN_TOKEN``
  in its environment: the launch's run id and this node's rank, unique to this node's part of this run (two nodes of
  one job may share a machine). torchrun puts each worker in a session of its own, so the token, not the process
  group, is what identifies every process of the run;
- stops the run on SIGTERM/SIGINT/SIGHUP (SIGTERM, a grace period, SIGKILL), and after the launcher exits ends any
  process of the run still there, so nothing is orphaned; records its state in ``state.json`` and ``exit_code``;
- takes part in the gang (when the spec lists the job's nodes): it sends an authenticated UDP heartbeat to every other
  node's supervisor each ``heartbeat_s`` and stops its own node's part when another node's part failed, or when
  another node has been silent for ``heartbeat_misses`` heartbeats. No controller is needed for that, so a detached
  job fails fast too. The same heartbeats carry how long each node's log has been silent, for the hang watchdog
  (``hang_timeout_s``), and which attempt each node is in, so that with ``max_restarts`` the whole gang is launched
  again together (after a failure or a hang; gang_rules.restart_decision), on the next of ``restart_ports``.

Under Slurm (scheduler=slurm; module_utils/_runtime/slurm_jobs.py) srun starts it in the foreground, as the step's task on
the node, and the master port and the relaunch ports come from ``GPUFLEET_PORTS``, chosen on node 0 when the
allocation started (``supervisor.py --pick-ports N`` prints them).

Processes are only ever signalled by PID after checking they carry this run's token: never by name or pattern.
Standard library only, Python 3.8+. This file is the loop over attempts and the gang's verdict; one attempt is
attempt.py, the rules of fail-fast gang_rules.py, the heartbeats gang.py, the run's processes job_processes.py.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time

# The job's vocabulary, processes and gang, shipped together with this file (supervisor_bundle.shipped_source).
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.attempt import Attempt, FirstFailure, await_peers
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.attempt_files import set_aside
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.free_ports import pick_ports_main
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gang import Gang, LoneNode, lost_at
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gpu_health import KMSG
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.heartbeat import Heartbeat
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gpu_watch import GpuWatch
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_events import LOG_PREFIX, Events
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.log_silence import LogSilence
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.output_once import OutputOnce
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.rank_output import RankOutput
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.rank_stacks import (
    DUMP_TIMEOUT_S, StackDump, hung_in, stacks_said)
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.restart_policy import DEFAULT_RESTART_ON, parse_restart_on
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.spares import Placement, reshape, spare_view, stand_by, unused
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.state_file import StateFile
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.stop_notice import clear_notice, write_notice
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gang_rules import (
    describe, failure_reason, hang_reason, lost_reason, rank_failure_news, restart_decision, stacks_read)
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_processes import (
    RankWatch, proc_start_ticks, read_json, run_token, signal_name, wait_status_said)
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import (
    GANG_KEY_FILE, LOG_FILE, SINGLE_ENTRY, SPEC_FILE, STOP_REQUEST_FILE,
    Defaults, HeartbeatPhase, JobState, PartOutcome, StopReason, read_stop_request)
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.runtimes import HostRuntime, runtime_of
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.schedulers import scheduler_of

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
        scheduler = scheduler_of(spec.get("scheduler"))
        self.runtime: HostRuntime = runtime_of(spec)  # the host, or the job's container (runtimes.py)
        # Under Slurm, chosen when Slurm started the job, not when it was submitted; the gang's heartbeats use the first.
        self.ports = scheduler.ports(spec, dict(os.environ))
        spec["master_port"] = self.ports[0]
        self.max_restarts = min(int(spec.get("max_restarts") or 0), len(self.ports) - 1)
        self.min_progress_s = float(spec.get("min_progress_s", Defaults.MIN_PROGRESS_S))
        self.restart_reason, self.last_failure = "", None  # why this attempt is a restart; the last failure's mark
        self.restart_on, self.restarts_used = parse_restart_on(spec.get("restart_on") or DEFAULT_RESTART_ON), 0
        self.min_nodes = int(spec["min_nodes"]) if spec.get("min_nodes") else None  # None: every node, or the job ends
        self.stop_reason: str | None = None
        self.stop_signalled = False  # set with stop_reason by _on_signal: no request of gpufleet's, a bare signal
        self.stop_for: str | None = None  # a stop request's node whose failure it is for (the controller's)
        self.stop_stacks = False  # whether the stop request asks for every rank's stack first
        self.gang: Gang | LoneNode = LoneNode()  # a Gang once joined, when the job has several nodes
        self.attempt = 1
        # How this node's part of the latest attempt ended (None before the first has).
        self.ended: PartOutcome | None = None
        # For the hang watchdog; an attempt's start counts only past hang_startup_s.
        self.silence = LogSilence(os.path.join(job_dir, LOG_FILE), float(spec.get("hang_startup_s") or 0),
                                  str(spec.get("launcher") or "torchrun"))
        self.next_beat = 0.0
        self.attempt_started = time.monotonic()
        self.state: dict = {
            "job": spec.get("job"), "run_id": self.run_id, "node_rank": spec.get("node_rank"), "state": JobState.STARTING,
            "supervisor_pid": os.getpid(), "supervisor_start_ticks": proc_start_ticks(os.getpid()),
            "started_at": time.time(), "attempt": 1, "max_restarts": self.max_restarts, "attempts": [],
        }
        self.state_file = StateFile(job_dir, self.run_id, str(spec.get("health_metrics_dir") or ""))  # state.json
        self.events = Events(self.state)  # what happened when, for the job's timeline (job_events.py)
        self.ranks = RankWatch(self.token, self._rank_ended)  # the run's ranks, and when the first ended
        self.first_failure = FirstFailure(os.path.join(job_dir, LOG_FILE), str(spec.get("launcher") or "torchrun"))
        # The node's GPUs (gpu_watch.py): sampled into gpus.csv; a new hardware XID fails this node's part at once.
        nodes = (spec.get("nodes") or []) + (spec.get("spares") or [])  # a spare's node_rank is past the nodes'
        self.node_rank = rank = int(spec.get("node_rank") or 0)
        self.host = str(nodes[rank][0]) if rank < len(nodes) else "this node"
        self.gpu_watch = GpuWatch(job_dir, self.host, float(spec.get("health_sample_s") or 0),
                                  str(spec.get("health_kernel_log") or KMSG))
        self.gpu_failure: StopReason | None = None
        self.telling: Heartbeat | None = None  # what the others hear while this part ends (GPU fault, hang, rank failed)
        self.stopping = False  # this attempt is being stopped (begin_stop): its ranks' ends are the stop's doing
        self.stacks_taken = False
        self.rank_output = RankOutput(job_dir, os.path.join(job_dir, LOG_FILE), spec)  # DeepSpeed's ranks' files
        self.output_once = OutputOnce(job_dir)  # what the log holds, freed from the launchers' per-rank files
        self.state.update(self.runtime.state_fields(spec))
        self.state.update(scheduler.state_fields(dict(os.environ)))

    def save(self, **changes: object) -> None:
        self.state.update(changes)
        self.state_file.write(self.state)

    def log(self, line: str) -> None:
        self.events.add(line)
        with open(os.path.join(self.job_dir, LOG_FILE), "ab") as log:
            log.write(("%s%s\n" % (LOG_PREFIX, line)).encode())

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.stop_reason is None:
            try:
                with open(os.path.join(self.job_dir, STOP_REQUEST_FILE)) as handle:
                    self.stop_reason, self.stop_for, self.stop_stacks = read_stop_request(handle.read())
                self.stop_reason = self.stop_reason or None
            except OSError:
                pass
            self.stop_signalled = self.stop_reason is None
            self.stop_reason = self.stop_reason or "stopped by %s" % signal_name(signum)

    # -- the gang ---------------------------------------------------------------------------------------------

    def _join_gang(self) -> None:
        if not self.spec.get("nodes") or len(self.spec["nodes"]) < 2:
            return
        with open(os.path.join(self.job_dir, GANG_KEY_FILE), "rb") as handle:
            key = handle.read().strip()
        self.gang = Gang(self.spec, key)

    def beat(self, phase: HeartbeatPhase, final: bool = False, force: bool = False) -> None:
        """Send this node's heartbeat when one is due (or now, with force)."""
        if not force and time.monotonic() < self.next_beat:
            return
        self.next_beat = time.monotonic() + self.gang.heartbeat_s
        # The part as it ended; failing now (telling), before it has: the others stop sooner.
        if phase == HeartbeatPhase.ENDED and self.ended is not None:
            part = Heartbeat.of_part(self.ended, self.node_rank, None)
        else:
            part = self.telling or Heartbeat()
        self.gang.send(dataclasses.replace(
            part, attempt=self.attempt, phase=phase, final=final, silent_s=round(self.silence.seconds(), 1),
            stacks_taken=self.stacks_taken, restart_reason=self.restart_reason, restarts_used=self.restarts_used,
            hung_in=hung_in(self.state.get("stacks"))))

    def tick(self, phase: HeartbeatPhase, timeout_s: float = 0.2) -> None:
        """One turn of the loop: heartbeat, hear the others, note exits of the run's processes and new output."""
        self.beat(phase)
        self.gang.receive(timeout_s, extra=self.ranks.fds(), on_extra=self.ranks.exited)
        self.rank_output.follow()
        self.silence.follow()
        said = self.output_once.tick(self.rank_output.copied)
        if said:
            self.log(said)

    def stop_decision(self) -> StopReason | None:
        """Whether this node's part must stop now: a stop request (stop.yml, Ctrl-C, a signal) first, else the
        gang's reason."""
        if self.stop_reason is not None:
            return StopReason(JobState.STOPPED, self.stop_reason, self.stop_for, self.stop_stacks, self.stop_signalled)
        fault = self.gpu_watch.poll()
        if fault is not None:
            if self.gpu_failure is None:
                self.gpu_failure = StopReason(JobState.FAILED, fault[0], None)
                self.telling = Heartbeat(outcome=JobState.FAILED, reason=fault[0], hardware_fault=True)
                self.save(gpu_fault=fault[0], gpu_fault_at=round(fault[1], 3))
                self.beat(HeartbeatPhase.RUNNING, force=True)
            return self.gpu_failure
        return self._gang_stop_reason()

    def _rank_ended(self, pid: int, rank: int | None, local_rank: int | None, status: int | None) -> None:
        """A rank of this node has ended: into the timeline; a failure of its own told to the others at once."""
        self.events.rank_ended(pid, rank, local_rank, "" if status is None else wait_status_said(status))
        news = rank_failure_news(rank, pid, status, self.stopping or self.stop_reason is not None,
                                 str(self.spec.get("launcher") or "torchrun"))
        if news is not None:
            self.first_failure.rank_failed(rank, status)
        if news is not None and self.telling is None and self.gang.peers():
            self.telling = news
            self.beat(HeartbeatPhase.RUNNING, force=True)

    def begin_stop(self, stop: StopReason) -> None:
        self.stopping = True
        self.save(state=JobState.STOPPING, stop_reason=stop.reason, stop_requested_at=time.time())
        self.log(stop.reason)
        if stop.stacks:  # a hang, or a stop that asked for them: read before the ranks hear of the stop and move on
            self._dump_stacks(stop)
        # The ranks hear of the stop before their SIGTERM (stop_notice.py); the grace counts from here.
        try:
            told = "the ranks are told to save: %s" % write_notice(self.job_dir, stop.reason, self.attempt, self.grace_s)
        except OSError as exc:
            told = "the stop notice could not be written (%s); the ranks hear of the stop by SIGTERM only" % exc
        self.log("%s (SIGKILL no sooner than %g s from now)" % (told, self.grace_s))

    def _dump_stacks(self, stop: StopReason) -> None:
        """Every rank's stack into stacks.txt and state.json (rank_stacks.py), the others told to take theirs; the
        ranks stop once every peer has: stopped earlier, they would fail the others' ranks in their collective first."""
        self.telling = self.telling or Heartbeat(outcome=stop.outcome, reason=stop.reason, stacks_wanted=True)
        self.beat(HeartbeatPhase.RUNNING, force=True)
        self.ranks.scan(now_please=True)  # a rank started since the last scan is read too
        stacks = StackDump(self.job_dir, self.host, str(self.spec.get("python") or "python3"), self.ranks.rank_of_pid
                           ).taken(lambda: self.tick(HeartbeatPhase.RUNNING, 0.05))
        self.save(stacks=stacks)
        self.log(stacks_said(stacks))
        self.stacks_taken = True
        self.beat(HeartbeatPhase.RUNNING, force=True)
        deadline = time.monotonic() + DUMP_TIMEOUT_S + 3 * self.gang.heartbeat_s
        while time.monotonic() < deadline and not stacks_read(self.gang, self.attempt):
            self.tick(HeartbeatPhase.RUNNING, 0.05)

    def _gang_stop_reason(self) -> StopReason | None:
        """Why this node's part must stop because of the gang (gang_rules.py: another node failed or was lost, or
        every node's log has been silent for hang_timeout_s), else None."""
        failure = failure_reason(self.gang, self.attempt)
        if failure is not None:
            return failure
        lost = self.gang.lost()
        if lost:
            self.save(peers_lost=lost_at(self.gang, lost, self.state.get("peers_lost")))
            return lost_reason(self.gang, lost)
        if self.hang_timeout_s:
            silences = [self.silence.seconds()] + [self.gang.silence_s(rank, self.attempt) for rank in self.gang.peers()]
            return hang_reason(silences, self.hang_timeout_s)
        return None

    # -- one attempt (attempt.py runs it) -----------------------------------------------------------------------

    def begin_attempt(self) -> None:
        self.telling, self.stacks_taken, self.stopping = None, False, False  # of the last attempt's end
        clear_notice(self.job_dir)
        said = set_aside(self.job_dir, self.attempt, self.state)  # the last attempt's stacks and dumps (attempt_files.py)
        if said:
            self.log(said)
        self.attempt_started = self.silence.begin_attempt()
        self.first_failure.begin()
        self.ranks.begin(self.attempt_started)

    def _follower(self) -> bool:
        """Whether node 0's single entry command (mpirun, horovodrun) starts this node's ranks."""
        return self.spec.get("launcher") in SINGLE_ENTRY and int(self.spec["node_rank"]) != 0 and bool(self.gang.peers())

    def may_restart(self) -> bool:
        return self.restarts_used < self.max_restarts and self.stop_reason is None

    def _restart(self, gang: str, parts: list[Heartbeat]) -> bool:
        """Whether the gang launches again, and why (gang_rules.restart_decision); a restart refused (a hardware
        fault; the same failure again soon after a restart) is said in the log and state.json."""
        if gang not in (JobState.FAILED, JobState.LOST) or not self.may_restart():
            return False
        decision = restart_decision(parts, lambda rank: self.host if rank == self.node_rank else self.gang.host(rank),
                                    self.last_failure, time.monotonic() - self.attempt_started, self.min_progress_s,
                                    self.state.get("peers_lost") if gang == JobState.LOST else None,
                                    spare_view(self.gang, self.attempt, self.min_nodes), self.restart_on)
        self.last_failure, self.restart_reason = decision.signature, decision.reason
        if decision.refused:
            self.log(decision.refused)
            self.save(no_restart=decision.refused)
            return False
        self.log("restarting after: %s" % decision.reason)
        self.restarts_used += 1
        self.save(restarts=self.state.get("restarts", []) + [decision.reason], restarts_used=self.restarts_used)
        if decision.replaced or decision.dropped:
            reshape(self, decision.replaced, decision.dropped, decision.reason, parts)
            self.node_rank = self.gang.rank
        return True

    def _progress(self, ran_s: float) -> None:
        """An attempt that ran min_progress_s gives the restart budget back: max_restarts counts faults close together."""
        if self.restarts_used and self.min_progress_s and ran_s >= self.min_progress_s:
            self.log("attempt %d ran %.0f s (min_progress_s=%g): the restart budget is given back (max_restarts=%d "
                     "again)" % (self.attempt, ran_s, self.min_progress_s, self.max_restarts))
            self.restarts_used = 0
            self.state["restarts_used"] = 0

    def _take_place(self, placement: Placement) -> None:
        """This spare becomes the node rank the members placed it at, from their attempt on (spares.stand_by)."""
        self.node_rank, self.attempt, self.restart_reason = placement.node_rank, placement.attempt, placement.restart_reason
        self.restarts_used = placement.restarts_used
        self.log("takes node_rank %d in place of %s from attempt %d: %s" % (self.node_rank, placement.replaced, self.attempt, self.restart_reason))
        self.save(node_rank=self.node_rank, attempt=self.attempt, members=self.gang.members(), took_place_of=placement.record(),
                  restarts_used=self.restarts_used)

    def _size_said(self) -> str:
        """', on 2 of 3 nodes' once the gang has gone on without a node (min_nodes), else ''."""
        launched = len(self.state.get("left_out") or []) + len(self.spec.get("nodes") or [])
        return ", on %d of %d nodes" % (len(self.spec["nodes"]), launched) if self.state.get("left_out") else ""

    # -- the whole run ------------------------------------------------------------------------------------------

    def run(self) -> int:
        """Supervise the job to its end; the supervisor's exit status is this node's exit code (1 when it could not
        join the gang). Nothing waits for it: state.json and exit_code are what the job modules read."""
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._on_signal)
        try:
            self._join_gang()
        except OSError as exc:
            self.ended = PartOutcome(JobState.FAILED, 1, reason="cannot join the gang: %s" % exc)
            self.state_file.write_exit_code(1)
            self.save(state=JobState.FAILED, exit_code=1, ended_at=time.time(), error=self.ended.reason)
            return 1
        self.save()
        if self.spec.get("spares") and self.node_rank >= len(self.spec["nodes"]):  # a spare
            placement = stand_by(self)
            if placement is None:  # the job ended without needing it
                self.state_file.write_exit_code(0)
                return unused(self)
            self._take_place(placement)
        self.log(self.gpu_watch.start())
        while True:
            port = self.ports[(self.attempt - 1) % len(self.ports)]  # again from the first, after progress
            self.log("attempt %d of %d, master port %d%s" % (self.attempt, self.attempt + self.max_restarts - self.restarts_used,
                                                             port, self._size_said()))
            attempt = Attempt(self, port)
            self.ended = attempt.follow() if self._follower() else attempt.run()
            self.rank_output.follow(final=True)
            said = self.output_once.attempt_ended(self.rank_output.copied())
            if said:
                self.log(said)
            self.ended = dataclasses.replace(self.ended, hardware_fault=self.gpu_failure is not None,
                                             **self.first_failure.of_attempt(self.ended.outcome))
            self._progress(time.monotonic() - self.attempt_started)
            self.state["attempts"].append(self.ended.as_dict())
            own = Heartbeat.of_part(self.ended, self.node_rank, None)
            self.events.add("this node's part ended: %s" % describe(self.host, self.node_rank, own))
            gang, parts = await_peers(self)
            if not self._restart(gang, parts):
                break
            self.attempt += 1
            self.save(state=JobState.RESTARTING, attempt=self.attempt)
        return self._finish(gang)

    def _finish(self, gang: str) -> int:
        self.gpu_watch.close()
        self.state.pop("phase", None)
        # exit_code first: whoever sees the final state in state.json finds exit_code there too.
        ended = self.ended
        self.state_file.write_exit_code(ended.exit_code)
        self.save(
            state=ended.outcome, exit_code=ended.exit_code, signal=ended.signal, ended_at=ended.ended_at,
            first_exit_at=ended.first_exit_at,
            rank_ended_first=ended.rank_ended_first,
            stop_reason=ended.reason or self.stop_reason,
            stopped_for=ended.stopped_for,
            gang=gang,
            **self.gang.as_heard(),
        )
        if self.gang.peers():
            # Say it a few times, a moment apart, so that one lost datagram does not leave a peer waiting.
            for _beat in range(3):
                self.beat(HeartbeatPhase.ENDED, final=True, force=True)
                time.sleep(FAREWELL_GAP_S)
        self.gang.close()
        return int(ended.exit_code)


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "--pick-ports":
        return pick_ports_main(argv[2], sys.stdout.write, sys.stderr.write)
    if len(argv) != 2:
        sys.stderr.write("usage: supervisor.py JOB_DIR | supervisor.py --pick-ports N\n")
        return 2
    os.umask(0o077)  # the job's log, state and what the training writes stay its owner's
    return Supervisor(os.path.abspath(argv[1])).run()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
