# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A job's node part run by Slurm (train.yml -e scheduler=slurm), on the node's side.

With Slurm, the launch does not start the supervisor: it prepares the job folder, writes ``state.json`` as
``queued`` and a task script, ``slurm_task.sh``. The Slurm job (its batch script is rendered by
plugin_utils/_control/slurm_batch.py) runs ``srun ... slurm_task.sh`` on every node; each node's task script starts that
node's supervisor in the foreground, inside the step (a detached supervisor would leave Slurm's process tracking).
Each node's folder carries the node's rank in the inventory's order, so the rank never comes from Slurm's own
numbering of the allocation (SLURM_NODEID follows Slurm's node table); the task script checks that Slurm ran it on
the node the folder was prepared for (SLURMD_NODENAME).

While a node's part is queued, its state is Slurm's: pending (and why) until the step starts; and if the Slurm job
ends before this node's supervisor started (cancelled while pending, or its start failed), the node's part is
stopped or failed with Slurm's state as the reason. Standard library only.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from collections.abc import Callable

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import SINGLE_ENTRY, JobState

TASK_FILE = "slurm_task.sh"
# Slurm job states after which nothing of the job runs any more (squeue(1), JOB STATE CODES).
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
         "OUT_OF_MEMORY")
# Not known to slurmctld (any more): its record is dropped MinJobAge (300 s by default) after the job ended.
GONE = "GONE"
UNKNOWN = "UNKNOWN"
_PAIR_RE = re.compile(r"(?:^|\s)(JobId|JobState|Reason|NodeList|ExitCode|BatchHost)=(\S*)")


def launcher_problem(launcher: str) -> str:
    """Why a launcher cannot run under Slurm ('' when it can): the job's plan and the launch module both ask."""
    if launcher in SINGLE_ENTRY:
        return ("launcher: %s is not supported with scheduler=slurm (node 0's %s would start the other nodes' ranks "
                "outside Slurm's job step); use torchrun, deepspeed or none" % (launcher, launcher))
    return ""


def parse_job(text: str) -> dict[str, str]:
    """Slurm's state of one job from ``scontrol --oneliner show job ID``'s output: job_id, state, reason,
    nodes, exit_code; state GONE when slurmctld does not know the job, UNKNOWN when the answer is not one."""
    if "Invalid job id" in text:
        return {"state": GONE}
    pairs = dict(_PAIR_RE.findall(text))
    if "JobState" not in pairs:
        return {"state": UNKNOWN, "error": text.strip()[-300:]}
    return {"job_id": pairs.get("JobId", ""), "state": pairs["JobState"], "reason": pairs.get("Reason", "None"),
            "nodes": pairs.get("NodeList", ""), "exit_code": pairs.get("ExitCode", "")}


def query(job_id: str, run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> dict[str, str]:
    """Ask slurmctld (scontrol works on every node of the cluster) for the job's state."""
    try:
        done = run(["scontrol", "--oneliner", "show", "job", str(job_id)], capture_output=True, text=True,
                   timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"state": UNKNOWN, "error": str(exc)}
    return parse_job((done.stdout or "") + (done.stderr or ""))


def query_ended(job_id: str, wait_s: float,
                run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
                sleep: Callable[[float], None] = time.sleep) -> dict[str, str]:
    """Slurm's state of a job whose node part has ended here: asked again (every half second, up to wait_s) while
    Slurm still has it running or completing (srun returns and the batch script exits a moment after the last
    supervisor; slurmctld then runs the epilog), so that every node's line of a report shows the job's final state,
    not the moment before it. Past wait_s, the state as Slurm has it then (a job whose other nodes still run)."""
    deadline = time.monotonic() + wait_s
    found = query(job_id, run)
    while found.get("state") not in ENDED + (GONE, UNKNOWN) and time.monotonic() < deadline:
        sleep(0.5)
        found = query(job_id, run)
    return found


def cancel(job_id: str, run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> str:
    """scancel the job (all its steps; Slurm signals them with SIGTERM, then SIGKILL after KillWait); '' when
    done or already ended, else what scancel said."""
    try:
        done = run(["scancel", str(job_id)], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    said = ((done.stdout or "") + (done.stderr or "")).strip()
    return "" if done.returncode == 0 or "already completing or completed" in said else said


def settle(result: dict, slurm: dict[str, str]) -> dict:
    """A queued node part's state, given Slurm's state of its job (``result`` is job_read.state_of's)."""
    result = dict(result, slurm=slurm)
    if result.get("state") != JobState.QUEUED:
        return result
    state = slurm.get("state", UNKNOWN)
    if state in ENDED or state == GONE:
        why = "not known to Slurm any more" if state == GONE else "ended %s" % state
        result.update(
            state=JobState.STOPPED if state in ("CANCELLED", GONE) else JobState.FAILED,
            running=False, ended_at=time.time(),
            error="Slurm job %s %s before this node's part started" % (result.get("slurm_job_id"), why))
    elif state not in ("PENDING", "REQUEUED", "REQUEUE_HOLD", "SUSPENDED", UNKNOWN):
        # Slurm started the job: the node's supervisor is on its way (the step is being set up).
        result["state"] = JobState.STARTING
    return result


def task_script(job_dir: str, slurm_node: str, node_rank: int, python: str) -> str:
    """This node's ``slurm_task.sh``: what ``srun`` runs on it (the supervisor, in the foreground), or, with
    ``ports N``, N free ports of this node for the master port and the relaunches (run on node_rank 0)."""
    return (
        "#!/bin/sh\n"
        "# Written by gpufleet (module gpufleet.cluster.launch): this node's part of the Slurm job, run by srun.\n"
        "# The folder is Slurm node {node}'s, node_rank {rank} (the inventory's order).\n"
        "job_dir={job_dir}\n"
        "if [ \"${{SLURMD_NODENAME:-}}\" != {node_q} ]; then\n"
        "  echo \"gpufleet: $job_dir was prepared for Slurm node {node} (node_rank {rank}),"
        " but Slurm ran this task on ${{SLURMD_NODENAME:-a node it did not name}}\" >&2\n"
        "  exit 1\n"
        "fi\n"
        "if [ \"${{1:-}}\" = ports ]; then\n"
        "  exec {python} \"$job_dir/supervisor.py\" --pick-ports \"$2\"\n"
        "fi\n"
        "# Not detached: the supervisor is this step's task, so that Slurm tracks and signals what it starts.\n"
        "exec {python} \"$job_dir/supervisor.py\" \"$job_dir\" >>\"$job_dir/supervisor.log\" 2>&1\n"
    ).format(node=slurm_node, node_q=shlex.quote(slurm_node), rank=node_rank, job_dir=shlex.quote(job_dir),
             python=shlex.quote(python))
