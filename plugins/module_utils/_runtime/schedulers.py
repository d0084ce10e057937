# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What differs, on the node's side, between the schedulers that start a node's part of a job: one class each.

``ssh`` (the default): the launch starts the node's supervisor at once, detached, on the ports the controller
chose. ``slurm``: the launch only prepares the folder, queued, with a task script that Slurm's step runs
(slurm_jobs.py); node 0 picks the ports when Slurm starts the job; a stop cancels the Slurm job; the supervisor
records the step it runs in. The launch's option checks, the launch, the status and the stop (jobs.py), the
supervisor and the container runtime's refusals ask ``scheduler_of(name)``; none of them names a scheduler itself.

Part of the shipped supervisor (supervisor_bundle.py): standard library only, Python 3.8.
"""

from __future__ import annotations

import time

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import ENDED_STATES, PORTS_VAR, JobState
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.slurm_jobs import (
    TASK_FILE,
    cancel,
    launcher_problem,
    query,
    query_ended,
    settle,
    task_script,
)


class SshScheduler:
    """scheduler=ssh: the launch starts the supervisor now; nothing to queue, nothing to cancel."""

    name = "ssh"
    # Whether node 0 picks the job's ports when the scheduler starts it (else the controller checks them first).
    picks_ports_at_start = False
    # Whether the scheduler gives the job its nodes, so that the plan first checks them against its node table.
    allocates_nodes = False
    # Whether cancel() has the scheduler signal the ranks itself (jobs.stop then writes the stop notice before it).
    cancel_signals_ranks = False

    def options_problem(self, values: dict) -> str:
        """What is wrong with a launch's (flattened) options for this scheduler, or ''."""
        if not 1 <= values["master_port"] <= 65535:
            return "master_port: %d is not a TCP port" % values["master_port"]
        if len(values["restart_ports"]) < values["max_restarts"]:
            return ("supervision.max_restarts: %d needs as many supervision.restart_ports, got %d"
                    % (values["max_restarts"], len(values["restart_ports"])))
        return self.launcher_problem(values["launcher"])

    def launcher_problem(self, launcher: str) -> str:  # pylint: disable=unused-argument
        """Why this launcher cannot run under this scheduler, or ''."""
        return ""

    def container_problem(self) -> str:
        """Why a job under this scheduler cannot run in a container image, or ''."""
        return ""

    def task_files(self, job_dir: str, spec: dict, python: str) -> dict[str, str]:  # pylint: disable=unused-argument
        """Files the scheduler runs from the job folder (name -> text), besides the launch script."""
        return {}

    def queued_state(self, spec: dict, run_id: str) -> dict | None:  # pylint: disable=unused-argument
        """The state.json the launch writes when the scheduler, not the launch, starts the supervisor; None when
        the launch starts it."""
        return None

    def cancel(self, spec: dict, wanted: bool) -> str:  # pylint: disable=unused-argument
        """Cancel the scheduler's job, when there is one and ``wanted``; what was done ('' when nothing)."""
        return ""

    def settle_status(self, result: dict, state: dict, wait_s: float) -> dict:  # pylint: disable=unused-argument
        """A node part's status (job_read.status) with the scheduler's own word on the job; ssh has none."""
        return result

    def ports(self, spec: dict, environ: dict) -> list[int]:  # pylint: disable=unused-argument
        """The master port and the relaunch ports, in order."""
        return [int(spec["master_port"])] + [int(port) for port in spec.get("restart_ports") or []]

    def state_fields(self, environ: dict) -> dict:  # pylint: disable=unused-argument
        """What the supervisor records in state.json about where the scheduler runs it."""
        return {}


class SlurmScheduler(SshScheduler):
    """scheduler=slurm: Slurm's step starts the supervisor (slurm_jobs.task_script); node 0 picks the ports then."""

    name = "slurm"
    picks_ports_at_start = True
    allocates_nodes = True
    cancel_signals_ranks = True  # scancel: SIGTERM to every process of the job's steps, SIGKILL after KillWait

    def options_problem(self, values: dict) -> str:
        # 0: node 0 picks the master port when Slurm starts the job; the relaunch ports are picked with it.
        if not 0 <= values["master_port"] <= 65535:
            return "master_port: %d is not a TCP port" % values["master_port"]
        if not values["slurm_node"] or not str(values["slurm_job_id"]).isdigit():
            return ("scheduler: slurm needs slurm.node (got %r) and a numeric slurm.job_id (got %r)"
                    % (values["slurm_node"], values["slurm_job_id"]))
        return self.launcher_problem(values["launcher"])

    def launcher_problem(self, launcher: str) -> str:
        return launcher_problem(launcher)

    def container_problem(self) -> str:
        return ("container_image with scheduler=slurm is not supported yet; on Slurm, run the image with the site's "
                "container plugin (e.g. pyxis: srun --container-image), or launch with scheduler=ssh")

    def task_files(self, job_dir: str, spec: dict, python: str) -> dict[str, str]:
        return {TASK_FILE: task_script(job_dir, str(spec["slurm_node"]), int(spec["node_rank"]), python)}

    def queued_state(self, spec: dict, run_id: str) -> dict | None:
        return {"job": spec["job"], "run_id": run_id, "node_rank": spec["node_rank"], "state": JobState.QUEUED,
                "slurm_job_id": spec["slurm_job_id"], "slurm_node": spec["slurm_node"], "queued_at": time.time()}

    def cancel(self, spec: dict, wanted: bool) -> str:
        job_id = spec.get("slurm_job_id")
        if not job_id or not wanted:
            return ""
        return cancel(job_id) or "cancelled Slurm job %s" % job_id

    def settle_status(self, result: dict, state: dict, wait_s: float) -> dict:
        # Slurm's state next to gpufleet's: its final one, waited for up to wait_s, once this node's part ended.
        job_id = state.get("slurm_job_id")
        if not job_id:
            return result
        ended_here = result["state"] in ENDED_STATES
        return settle(result, query_ended(job_id, wait_s) if ended_here and wait_s else query(job_id))

    def ports(self, spec: dict, environ: dict) -> list[int]:
        # Chosen when Slurm started the job (node 0's task script, `ports N`), not when it was submitted.
        if environ.get(PORTS_VAR):
            return [int(port) for port in environ[PORTS_VAR].split(",")]
        return SshScheduler.ports(self, spec, environ)

    def state_fields(self, environ: dict) -> dict:
        return {"slurm_job_id": environ.get("SLURM_JOB_ID"), "slurm_step_id": environ.get("SLURM_STEP_ID"),
                "slurm_node": environ.get("SLURMD_NODENAME")}


SCHEDULER_CLASSES = (SshScheduler, SlurmScheduler)
SCHEDULERS = tuple(kind.name for kind in SCHEDULER_CLASSES)
# Every file a scheduler may run from the job folder (task_files), so that a relaunch under another removes it.
TASK_FILES = (TASK_FILE,)


def scheduler_of(name: object) -> SshScheduler:
    """The scheduler of this name (an empty or missing name is ssh's, as in JobSpec's default)."""
    for kind in SCHEDULER_CLASSES:
        if kind.name == (name or "ssh"):
            return kind()
    raise ValueError("scheduler: %r is not one of %s" % (name, ", ".join(SCHEDULERS)))
