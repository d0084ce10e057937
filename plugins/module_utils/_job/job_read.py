# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Reading a job's folder on a node, changing nothing: where it is, its spec, and its state checked against the live
processes (what node_probe, job_status and the controller's light poll read). jobs.py starts and stops a job; this
file is apart so that a module that only reads a job does not ship, and compile on every node at every run, what a
launch needs (the launch script, the launchers, the supervisor's bundle).
"""

from __future__ import annotations

import os
import re
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import job_logs
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import attempt_files
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_processes import read_json, supervisor_alive
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import (
    ACTIVE_STATES,
    ENDED_STATES,
    LOG_FILE,
    MANIFEST,
    SPEC_FILE,
    STATE_FILE,
    Defaults,
    JobState,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.schedulers import scheduler_of


def jobs_dir_spec() -> dict:
    """The jobs_dir option every job module shares (documented by the gpufleet.cluster.job_folder fragment)."""
    return {"jobs_dir": {"type": "path", "default": Defaults.JOBS_DIR}}


JOB_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def job_dir(jobs_dir: str, job: str) -> str:
    """The job's folder; with job "" the jobs folder itself, absolute, '~' expanded with this process's HOME."""
    root = os.path.abspath(os.path.expanduser(jobs_dir))
    return os.path.join(root, job) if job else root


def read_spec(path: str) -> dict | None:
    return read_json(os.path.join(path, SPEC_FILE))


def status(path: str, tail: int = 0, slurm_wait_s: float = 0.0) -> dict:
    """The job's state on this node, checked against the live processes; under Slurm, with Slurm's state of the
    job, waited for up to slurm_wait_s to be final once this node's part has ended (schedulers.py)."""
    result: dict = {"job_dir": path, "log_path": os.path.join(path, LOG_FILE)}
    state = read_json(os.path.join(path, STATE_FILE))
    spec = read_spec(path)
    result.update(state_of(spec, state, supervisor_alive(state or {})))
    result = scheduler_of((spec or {}).get("scheduler")).settle_status(result, state or {}, slurm_wait_s)
    if result["state"] in (JobState.ABSENT, JobState.STARTING, JobState.QUEUED):
        return result
    ended = result.get("ended_at") or time.time()
    if isinstance(result.get("started_at"), (int, float)):
        result["duration_s"] = round(float(ended) - float(result["started_at"]), 1)
    lines = job_logs.tail_lines(result["log_path"], max(tail, 400), max_bytes=262144)
    result["last_line"] = lines[-1] if lines else ""
    cause = None
    if result["state"] in (JobState.FAILED, JobState.LOST):
        cause = job_logs.torchrun_root_cause(lines) or job_logs.mpirun_root_cause(lines, read_json(os.path.join(path, MANIFEST)))
    if cause:
        if cause.get("error_file"):
            cause["error"] = job_logs.error_file_message(cause["error_file"]) or cause.get("error")
        result["root_cause"] = cause
        lines = job_logs.without_agent_report(lines)
    result["log_tail"] = lines[-tail:] if tail else []
    dumps = attempt_files.flight_recorder_dumps(path)
    if dumps:  # PyTorch's flight recorder dumped (a collective timed out): fetched with the logs
        result["flight_recorder"] = {"dir": os.path.join(path, attempt_files.FLIGHT_RECORDER_DIR), "dumps": dumps}
    earlier = attempt_files.kept_attempts(path)
    if earlier:  # what the attempts before a restart left (their stacks and dumps): fetched with the logs
        result["earlier_attempts"] = earlier
    return result


def state_of(spec: dict | None, state: dict | None, supervisor_alive_now: bool) -> dict:
    """The job's state from its spec, its supervisor's state.json and whether that supervisor is still alive: the
    part of status() that the controller's light poll (plugin_utils/_control/job_poll.py) shares."""
    if spec is None:
        return {"state": JobState.ABSENT, "running": False}
    if state is None or state.get("run_id") != spec.get("run_id"):
        # Launched, but the supervisor has not written its first state yet.
        return {"state": JobState.STARTING, "run_id": spec.get("run_id"), "running": True}
    result = dict(state)
    if state.get("state") == JobState.QUEUED:
        # Slurm has not started this node's supervisor yet (slurm_jobs.settle says what Slurm makes of it).
        result["running"] = True
        return result
    if state.get("state") not in ENDED_STATES and not supervisor_alive_now:
        result["state"] = JobState.LOST
        result["lost_reason"] = "the supervisor (pid %s) is gone without recording an end" % state.get("supervisor_pid")
    result["master_port"] = state.get("master_port") or spec.get("master_port")
    result["restart_ports"] = spec.get("restart_ports") or []
    result["running"] = is_running(result)
    return result


def is_running(current: dict) -> bool:
    return current.get("state") in ACTIVE_STATES


def list_jobs(jobs_dir: str) -> list[str]:
    root = job_dir(jobs_dir, "")
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    return [name for name in names if os.path.isfile(os.path.join(root, name, SPEC_FILE))]
