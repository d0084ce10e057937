# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The job's vocabulary, shared by the node and the controller: its states, why a part stops, the supervision
defaults, and the names of the files in a job folder. Shipped to the nodes as part of the supervisor (see
supervisor.shipped_source); standard library only, Python 3.8+."""

from __future__ import annotations

import collections
import dataclasses
import enum

STATE_FILE = "state.json"
SPEC_FILE = "job.json"
LAUNCH_FILE = "launch.sh"
LOG_FILE = "job.log"
EXIT_CODE_FILE = "exit_code"
STOP_REQUEST_FILE = "stop_request"
GANG_KEY_FILE = "gang_key"
# The job's nodes as MPI and DeepSpeed read them: ``<address> slots=<n>`` per node, in rank order; written at the
# launch (launchers.hostfile_text) and again by the supervisor when the members change (spares.reshape).
HOSTFILE = "hostfile"
# The job's ranks per node (launchers.manifest_text), which the report reads mpirun's ranks by.
MANIFEST = "ranks.json"
RUN_ID_VAR = "GPUFLEET_RUN_ID"
TOKEN_VAR = "GPUFLEET_RUN_TOKEN"
# The variables launch.sh takes an attempt's place from (spares.place_env; launchers.place_prelude), in place_env's
# order.
PLACE_VARS = ("GPUFLEET_NODE_RANK", "GPUFLEET_MASTER_ADDR", "GPUFLEET_NPROC", "GPUFLEET_NNODES", "GPUFLEET_WORLD_SIZE",
              "GPUFLEET_MPI_HOSTS", "GPUFLEET_ALL_HOSTS")
# Under Slurm: the master port and the relaunch ports, comma-separated, chosen when the allocation started.
PORTS_VAR = "GPUFLEET_PORTS"


def stop_request(reason: str, stopped_for: str | None = None, stacks: bool = False) -> str:
    """The stop request file's text: the reason on its first line; with stopped_for, a line naming the node whose
    failure the stop is for (job_stop's stopped_for); with stacks, a line asking for every rank's stack first."""
    return (reason.replace("\n", " ") + "\n" + ("stopped_for=%s\n" % stopped_for if stopped_for else "")
            + ("stacks=yes\n" if stacks else ""))


def read_stop_request(text: str) -> tuple[str, str | None, bool]:
    """The reason, the node stopped for (or None) and whether stacks are asked for, in a stop request file's text."""
    lines = text.splitlines()
    stopped_for = next((line.partition("=")[2] for line in lines[1:] if line.startswith("stopped_for=")), None)
    return (lines[0].strip() if lines else ""), (stopped_for or None), "stacks=yes" in lines[1:]


class JobState(str, enum.Enum):
    """The one vocabulary of job states: of one node's part of a job, as state.json, job_status, job_wait and the
    report name them. The controller side imports these; it keeps no copy, and no module of the collection spells a
    state's word itself (tests/unit/plugins/test_job_states.py fails on one).

    queued -> starting                                               scheduler=slurm: the folder is ready, Slurm has
                                                                     not started the node's part yet (the launch
                                                                     writes queued; the supervisor, once Slurm
                                                                     starts it, the rest)
    starting -> running -> succeeded | failed | hung | stopped      the supervisor writes these in state.json
    running -> stopping -> stopped                                   a stop request, or another node's failure
    running -> restarting -> running                                 max_restarts: the whole gang starts again
    standby -> running | unused                                      a spare node: it waits, running no rank, and
                                                                     takes a lost or faulted node's place (spares.py)
    lost          state.json says running but its supervisor is gone (job_status decides)
    absent        there is no such job on the node (job_status)
    unreachable   the node stopped answering the controller (job_wait decides)

    A member is the string it names (``JobState.RUNNING == "running"``, in JSON and in messages alike), so that
    state.json and the modules' results read as before. The changes above are state_file.TRANSITIONS, which the one
    writer of state.json checks each change against.
    """

    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    RESTARTING = "restarting"
    STANDBY = "standby"
    UNUSED = "unused"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    HUNG = "hung"
    LOST = "lost"
    ABSENT = "absent"
    UNREACHABLE = "unreachable"

    def __str__(self) -> str:
        return str.__str__(self)


class HeartbeatPhase(str, enum.Enum):
    """What a supervisor's heartbeat says of its node's part of the current attempt: its run is under way, or it has
    ended (the heartbeat then carries the outcome; with final, no attempt follows)."""

    RUNNING = "running"
    ENDED = "ended"
    STANDBY = "standby"  # a spare's: ready to take a node's place

    def __str__(self) -> str:
        return str.__str__(self)


# The key of state.json and of a gang's news that names the node whose failure stopped this one ("stopped because
# of another node").
STOPPED_FOR = "stopped_for"
# Derived sets of states.
ACTIVE_STATES = (JobState.QUEUED, JobState.STARTING, JobState.RUNNING, JobState.STOPPING, JobState.RESTARTING,
                 JobState.STANDBY)
ENDED_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED, JobState.HUNG, JobState.LOST,  # on the node
                JobState.UNUSED)
WAIT_ENDED_STATES = ENDED_STATES + (JobState.ABSENT, JobState.UNREACHABLE)  # where the controller's wait stops
# Outcomes of one node's part of one attempt that end the attempt for the whole gang (supervisors).
GANG_FAILURE_STATES = (JobState.FAILED, JobState.STOPPED, JobState.HUNG)
# States the report counts as a failure of the node itself.
FAILURE_STATES = (JobState.FAILED, JobState.LOST, JobState.UNREACHABLE, JobState.HUNG)


# Why this node's part of an attempt stops: its outcome (stopped or hung), the reason said in the log and state, the
# node whose failure stopped it (None when it is not another node's), whether every rank's stack is taken first
# (a hang, or a stop that asked for them: rank_stacks.py), and whether it is a bare signal's (SIGTERM with no stop
# request of gpufleet's: Slurm's --kill-on-bad-exit, a kill, the node's shutdown).
StopReason = collections.namedtuple("StopReason", ("outcome", "reason", "stopped_for", "stacks", "signalled"),
                                    defaults=(False, False))


@dataclasses.dataclass(frozen=True)
class PartOutcome:  # pylint: disable=too-many-instance-attributes
    """What one node's part of one attempt ended with: the state it ended in (succeeded, failed, stopped or hung),
    the launcher's exit code and signal, why it was stopped and for which node's failure, and when its first rank
    exited. state.json keeps one per attempt (``as_dict()``, under "attempts"); the supervisor's last state and its
    ENDED heartbeat are read from the last one."""

    outcome: JobState
    exit_code: int
    attempt: int = 0
    master_port: int | None = None
    ended_at: float | None = None
    first_exit_at: float | None = None
    signal: str | None = None
    reason: str | None = None
    stopped_for: str | None = None
    # A rank of this node had ended, and its launcher failed, before another node's failure stopped the part: the
    # part failed on its own (gang_rules.failed_before); which failure came first is the report's to decide.
    rank_ended_first: bool = False
    # The part ended for a hardware fault of this node's GPUs (an XID the GPU watch saw, gpu_watch.py): the gang does
    # not launch again on the same nodes (gang_rules.no_restart_for).
    hardware_fault: bool = False
    # The first rank of this node that failed on its own in the attempt: its global rank (None: not known), its exit
    # code as a shell says it (128 + a signal's number), and where it failed, from its traceback ("train.py:88";
    # restart_policy.failed_at). The launcher's exit_code is torchrun's 1 whatever its rank's was.
    failed_rank: int | None = None
    rank_exit: int | None = None
    failed_at: str | None = None

    def stopped(self, stop: StopReason, **changes: object) -> PartOutcome:
        """The same part, ended by the stop (its outcome, reason and the node stopped for)."""
        return dataclasses.replace(self, outcome=stop.outcome, reason=stop.reason, stopped_for=stop.stopped_for,
                                   **changes)

    def as_dict(self) -> dict:
        """The part as state.json and the gang's news hold it (the outcome under "outcome", as its word)."""
        return dataclasses.asdict(self)


class Defaults:
    """The one home of each default of a job's supervision; the modules' argument specs and JobSpec read these."""

    JOBS_DIR = "~/.gpufleet/jobs"  # one sub-folder per job on each node
    GRACE_S = 5.0  # between SIGTERM and SIGKILL when a run is stopped
    # An agent launcher (AGENT_LAUNCHERS) still running this long after the last of its ranks ended in a stop is
    # SIGKILLed then, not at the end of GRACE_S: the ranks had their grace; the agent holds nothing of the user's,
    # and what it still does (its report of the SIGTERM, the interpreter's exit with torch loaded) took torchrun
    # over 1 s on every stopped node of a loaded 16-node gang, the gang stop's largest step (bench-scale's P2).
    AGENT_GRACE_S = 0.2
    HEARTBEAT_S = 1.0  # between two heartbeats of a node's supervisor
    HEARTBEAT_MISSES = 5  # heartbeats missed before a node counts as lost
    JOIN_TIMEOUT_S = 120.0  # for every node's first heartbeat
    # Before a node's first output of an attempt (imports, data loading, rendezvous), its silence counts towards
    # the hang watchdog only past this many seconds.
    HANG_STARTUP_S = 120.0
    # A restart that fails the same way within this many seconds of its start made no progress: no more restarts.
    # Five minutes: more than a restart's own start (imports, rendezvous, a checkpoint's load; HANG_STARTUP_S allows
    # two) and the ~90 s cycles of a job failing the same way at once, well under the hours a restart should win.
    MIN_PROGRESS_S = 300.0
    # Seconds between two samples of a node's GPUs while the job runs (gpu_watch.py); 0 samples nothing.
    GPU_SAMPLE_S = 10.0


# Launchers whose nodes a spare can stand in for: each node runs its own part, with the node rank, master address and
# ranks per node the supervisor gives it (launch.sh's GPUFLEET_NODE_RANK, GPUFLEET_MASTER_ADDR, GPUFLEET_NPROC).
SPARE_LAUNCHERS = ("torchrun",)

# Launchers whose gang may go on with fewer nodes (min_nodes): each node's part takes its node rank, the node count
# and the world size from the attempt (launchers.place_prelude). The others fix the world at the launch: mpirun's and
# horovodrun's one entry command on node 0 (-np, -H), and DeepSpeed's runner, which reads it from the hostfile.
RESIZABLE = ("torchrun", "none")

# Launchers whose one command on node 0 starts every rank; the other nodes' supervisors follow it.
SINGLE_ENTRY = ("mpirun", "horovodrun")

# Launchers whose own process is an agent that passes SIGTERM on to its ranks and then only tears itself down
# (torchrun's agent took the whole grace period to exit at 16 nodes: docs/scale/).
AGENT_LAUNCHERS = ("torchrun", "deepspeed")
