# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A job's folder on a node, and the node-side operations on it: start and stop (reading it, status among them, is
job_read.py's).

Layout of ``<jobs_dir>/<job>/`` (owner-only):

- ``job.json``: the spec of the current launch (see job_spec.JobSpec) plus its run_id;
- ``launch.sh`` and ``env``: the rendered launch script and environment;
- ``hostfile`` and ``ranks.json``: the job's MPI/DeepSpeed hostfile and rank manifest (launchers.py);
- ``supervisor.py`` and ``supervisor.log``: the supervisor and its own messages;
- ``launcher_entry.py``: torchrun's entry point (module_utils/_runtime/launcher_entry.py);
- ``stack_hook/sitecustomize.py``: each rank's own stack dump on a signal (module_utils/_runtime/stack_hook.py), and
  ``rank_stacks/``, where the ranks write it;
- ``job.log``: the training output of this node; an earlier run's log is kept
  as ``job.<run_id>.log`` when the job is launched again;
- ``state.json`` and ``exit_code``: written by the supervisor (under Slurm, ``queued`` by the launch first);
- ``slurm_task.sh``: under Slurm, what srun runs on the node (slurm_jobs.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import launchers
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import attempt_files
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_processes import (
    end_run,
    run_processes,
    run_token,
    supervisor_alive,
    write_atomic,
    write_json_atomic,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import (
    ENDED_STATES,
    GANG_KEY_FILE,
    LAUNCH_FILE,
    LOG_FILE,
    MANIFEST,
    SPEC_FILE,
    STOP_REQUEST_FILE,
    Defaults,
    JobState,
    stop_request,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils._job.job_read import is_running, read_spec, status
from ansible_collections.gpufleet.cluster.plugins.module_utils._job.job_spec import JobSpec
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.rank_stacks import DUMP_TIMEOUT_S
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.runtimes import runtime_of
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.schedulers import TASK_FILES, scheduler_of
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.rank_stacks import HOOK_DIR, HOOK_FILE
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.supervisor_bundle import entry_source, hook_source
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.state_file import StateFile, clear_run
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.stop_notice import write_notice
from ansible_collections.gpufleet.cluster.plugins.module_utils._job.launch_script import (
    job_environment,
    render_env_file,
    render_launch_script,
)


ENV_FILE = "env"
SECRET_ENV_FILE = "secret_env"
SUPERVISOR_FILE = "supervisor.py"
SUPERVISOR_LOG = "supervisor.log"


class JobError(Exception):
    """The operation cannot go on; the message says why."""


def _read(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def rendered_files(path: str, spec: JobSpec) -> dict[str, str]:
    env_path = os.path.join(path, ENV_FILE)
    files = {
        LAUNCH_FILE: render_launch_script(spec, env_path, os.path.join(path, SECRET_ENV_FILE)),
        ENV_FILE: render_env_file(job_environment(spec, path)),
        launchers.HOSTFILE: launchers.hostfile_text(spec),
        MANIFEST: launchers.manifest_text(spec),
        launchers.LAUNCHER_ENTRY: entry_source(),
        HOOK_FILE: hook_source(),
    }
    # The interpreter running this module runs the supervisor, whoever starts it.
    files.update(scheduler_of(spec.scheduler).task_files(path, spec.as_dict(), sys.executable))
    return files


def start(
    path: str,
    spec: JobSpec,
    run_id: str,
    supervisor_source: str,
    check_mode: bool,
    start_timeout_s: float = 15.0,
    script_content: str | None = None,
    secret_env: dict[str, str] | None = None,
    gang_key: str | None = None,
) -> dict:
    """Render the job's files (and the script, when its text is given) and start its supervisor.

    The same spec already running changes nothing.
    """
    if spec.nodes and not gang_key:
        raise JobError("gang_key: is required when nodes are given (the same key on every node of the job)")
    files = rendered_files(path, spec)
    before = {name: _read(os.path.join(path, name)) for name in files}
    result: dict = {
        "job_dir": path,
        "script_path": os.path.join(path, LAUNCH_FILE),
        "log_path": os.path.join(path, LOG_FILE),
        "cmd": launchers.command(spec, path, []) or [],
        "node_rank": spec.node_rank,
        "world_size": spec.world_size,
        "diff": {
            "before_header": os.path.join(path, LAUNCH_FILE),
            "after_header": os.path.join(path, LAUNCH_FILE),
            "before": before[LAUNCH_FILE],
            "after": files[LAUNCH_FILE],
        },
    }
    current = status(path)
    if _same_job_running(path, spec, current):
        result.update(changed=False, pid=current.get("pid"), run_id=current.get("run_id"), state=current["state"])
        return result
    result["changed"] = True
    if check_mode:
        result.update(pid=None, run_id=run_id, state=JobState.ABSENT)
        return result
    _write_folder(path, spec, run_id, files, supervisor_source, current, script_content, secret_env, gang_key)
    queued = scheduler_of(spec.scheduler).queued_state(spec.as_dict(), run_id)
    if queued:
        # The scheduler's step starts the supervisor (Slurm's: slurm_task.sh), when the job's allocation starts.
        StateFile(path, run_id).write(queued)
        result.update(pid=None, supervisor_pid=None, run_id=run_id, state=queued["state"])
        return result
    state = _start_supervisor(path, start_timeout_s)
    result.update(pid=state.get("pid"), supervisor_pid=state.get("supervisor_pid"), run_id=run_id, state=state["state"])
    return result


def _same_job_running(path: str, spec: JobSpec, current: dict) -> bool:
    """True when this very spec is already running here; an error when the job runs with other settings."""
    if not is_running(current):
        return False
    running = dict(read_spec(path) or {})
    running.pop("run_id", None)
    if running == spec.as_dict():
        return True
    differs = sorted(key for key, value in spec.as_dict().items() if running.get(key) != value)
    raise JobError(
        "job %r is already running in %s (pid %s) with other settings (%s differ); stop it first "
        "with playbooks/stop.yml -e job=%s" % (spec.job, path, current.get("pid"), ", ".join(differs), spec.job)
    )


def _write_folder(path: str, spec: JobSpec, run_id: str, files: dict[str, str], supervisor_source: str,
                  previous: dict, script_content: str | None, secret_env: dict[str, str] | None,
                  gang_key: str | None) -> None:
    """Write the job folder for a new run: the previous log kept, the last run's records removed, every file
    written whole (write_atomic), the spec last, since its run_id is what tells a run has been written."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    _keep_previous_run(path, previous)
    if script_content is not None:
        _write_script(spec, script_content)
    clear_run(path)
    write_atomic(os.path.join(path, SUPERVISOR_FILE), supervisor_source, 0o600)
    os.makedirs(os.path.join(path, HOOK_DIR), mode=0o700, exist_ok=True)
    for name in (ENV_FILE, launchers.HOSTFILE, MANIFEST, launchers.LAUNCHER_ENTRY, HOOK_FILE):
        write_atomic(os.path.join(path, name), files[name], 0o600)
    for name in TASK_FILES:  # what the scheduler runs; a previous launch's under another scheduler goes
        task_path = os.path.join(path, name)
        if name in files:
            write_atomic(task_path, files[name], 0o700)
        elif os.path.exists(task_path):
            os.remove(task_path)
    secret_path = os.path.join(path, SECRET_ENV_FILE)
    if secret_env:
        write_atomic(secret_path, render_env_file(secret_env), 0o600)  # owner-only, never in an argument list or log
    elif os.path.exists(secret_path):
        os.remove(secret_path)
    key_path = os.path.join(path, GANG_KEY_FILE)
    if spec.nodes:
        write_atomic(key_path, gang_key + "\n", 0o600)  # authenticates the heartbeats; owner-only like the secrets
    elif os.path.exists(key_path):
        os.remove(key_path)
    write_atomic(os.path.join(path, LAUNCH_FILE), files[LAUNCH_FILE], 0o700)
    spec_data = spec.as_dict()
    spec_data["run_id"] = run_id
    write_json_atomic(os.path.join(path, SPEC_FILE), spec_data)


def _write_script(spec: JobSpec, content: str) -> None:
    target = os.path.join(spec.workdir, spec.script)
    os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
    write_atomic(target, content, 0o600)


def _keep_previous_run(path: str, previous: dict) -> None:
    """The previous run's log (job.<run id>.log), stacks, flight recorder dumps and earlier attempts' files
    (attempt_files.keep_run) are kept beside the new run's, never mixed with them."""
    suffix = previous.get("run_id") or str(int(time.time()))
    log = os.path.join(path, LOG_FILE)
    if os.path.exists(log):
        os.replace(log, os.path.join(path, "job.%s.log" % suffix))
    attempt_files.keep_run(path, suffix)


def _start_supervisor(path: str, timeout_s: float) -> dict:
    log_fd = os.open(os.path.join(path, SUPERVISOR_LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(log_fd, "ab") as log:
        # The interpreter running this module runs the supervisor too.
        subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, os.path.join(path, SUPERVISOR_FILE), path],
            cwd=path,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        current = status(path)
        if current["state"] == JobState.STANDBY or (
                current["state"] not in (JobState.STARTING, JobState.ABSENT) and current.get("pid")):
            return current  # running (a spare: standing by, running nothing until it takes a node's place)
        if current["state"] in ENDED_STATES:
            raise JobError("the supervisor of %s could not start the job: %s"
                           % (path, current.get("error") or current.get("lost_reason") or current["state"]))
        time.sleep(0.05)
    raise JobError(
        "the supervisor of %s did not start within %.0f s; see %s"
        % (path, timeout_s, os.path.join(path, SUPERVISOR_LOG))
    )


def stop(path: str, reason: str, check_mode: bool, timeout_s: float = 30.0, cancel_scheduler: bool = True,
         stopped_for: str | None = None, stacks: bool = False) -> dict:
    """Stop this job's run on this node: only processes that carry its run token are signalled. Under Slurm,
    the Slurm job is cancelled first (unless cancel_scheduler is false: a stop of one node's part because another
    node failed, which ends the Slurm job by itself, recorded as failed), the ranks told first (stop_notice.py: the
    scancel's SIGTERM reaches them before their supervisor could tell them). stopped_for names that other node: the
    supervisor then takes the stop as the gang's (job_states.stop_request). With stacks, the supervisor takes every
    rank's stack before it stops them (rank_stacks.py)."""
    current = status(path)
    result = {"job_dir": path, "changed": False, "state_before": current["state"]}
    spec = read_spec(path) or {}
    token = run_token(spec) if spec.get("run_id") is not None else None
    leftovers = run_processes(token) if token else []
    # A container of the job's that outlived its supervisor (any run of this folder) is removed by this stop.
    runtime = runtime_of(spec)
    boxes = runtime.leftovers(spec, path)
    if not is_running(current) and not leftovers and not boxes:
        result.update(state=current["state"], remaining=[])
        return result
    result["changed"] = True
    if check_mode:
        result["state"] = JobState.STOPPED
        return result
    write_atomic(os.path.join(path, STOP_REQUEST_FILE), stop_request(reason, stopped_for, stacks), 0o600)
    wanted = cancel_scheduler or current["state"] == JobState.QUEUED
    grace = float(spec.get("grace_s", Defaults.GRACE_S))  # the job's own, as launched
    scheduler = scheduler_of(spec.get("scheduler"))
    if wanted and scheduler.cancel_signals_ranks and leftovers:  # Slurm's SIGTERM would come before the supervisor's
        write_notice(path, reason, int(current.get("attempt") or 1), grace)
    cancelled = scheduler.cancel(spec, wanted)
    if cancelled:
        result["scancel"] = cancelled
    if is_running(current) and supervisor_alive(current):
        os.kill(int(current["supervisor_pid"]), signal.SIGTERM)
        # With stacks, the supervisor first reads its ranks, then waits for the other nodes to have read theirs.
        deadline = time.monotonic() + max(timeout_s, grace + 20) + (2 * DUMP_TIMEOUT_S if stacks else 0)
        # Until the supervisor itself is gone (it says goodbye to the other nodes after recording the end).
        while time.monotonic() < deadline and supervisor_alive(current):
            time.sleep(0.1)
    # The supervisor is gone, or did not finish in time: end what is left of the run directly.
    result.update(runtime.remove_leftovers(spec, path))
    if token and run_processes(token):  # ranks left without their supervisor still hear of the stop first
        write_notice(path, reason, int(current.get("attempt") or 1), grace)
    killed = end_run(token, grace) if token else 0
    final = status(path)
    if is_running(final) or final["state"] == JobState.LOST:
        # A supervisor that never started (queued) or is gone without recording the end: the stop records it.
        StateFile(path).record_stop(reason)
        final = status(path)
    result.update(state=final["state"], killed_directly=killed, remaining=run_processes(token) if token else [],
                  containers_remaining=runtime.leftovers(spec, path))
    return result
