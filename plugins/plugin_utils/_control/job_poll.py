# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The wait's light poll of one node's job: one shell command that prints the job's files, read on the controller.

job_wait polls every node every few seconds while the job runs. Running the job_status module each time starts a
Python interpreter on the node (about 0.3 CPU seconds, and the modules' upload): at 16 nodes that is several
interpreters a second, taken from the ranks' own start (docs/scale/). The light poll runs `cat` and `tail`
instead, and reads their output with the same code as job_status (jobs.state_of), so both say the same state.
The wait's last read, with the log's tail and the root cause, is still the module.

Under Slurm, while the node's part is queued, the same command asks slurmctld for the job's state (``scontrol``),
read with slurm_jobs.settle as job_status reads it.
"""

from __future__ import annotations

import json
import shlex

from ansible_collections.gpufleet.cluster.plugins.module_utils._job.job_logs import split_tail
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_processes import supervisor_alive
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import LOG_FILE, SPEC_FILE, STATE_FILE
from ansible_collections.gpufleet.cluster.plugins.module_utils._job.job_read import state_of
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.slurm_jobs import parse_job, settle

MARK = "\n@@gpufleet-poll "
LOG_BYTES = 8192  # of the log's end: its last line is the wait's progress line


def node_path(jobs_dir: str, job: str) -> str:
    """The job folder as the node's shell reads it: '~' is the node's home there, not the controller's."""
    path = jobs_dir.rstrip("/") + "/" + job
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


# What the poll needs from state.json, read as JSON by the node's python3 (EL 8's platform-python where there is no
# python3): the
# supervisor's PID, and for a part queued for Slurm its Slurm job id; each printed only when it is digits (the job id
# with Slurm's '_' of an array task), so the assignments are safe to eval.
STATE_READER = """import json, sys
try:
    state = json.load(open(sys.argv[1]))
except Exception:
    state = {}
state = state if isinstance(state, dict) else {}
pid, job = state.get("supervisor_pid"), str(state.get("slurm_job_id") or "")
if type(pid) is int and pid > 0:
    print("pid=%d" % pid)
if job.replace("_", "").isdigit():
    print("sid=" + job)
if state.get("state") == "queued":
    print("queued=1")
"""


def poll_command(jobs_dir: str, job: str) -> str:
    """The POSIX shell command whose output parse() reads; it changes nothing and always exits 0.

    state.json is read as JSON (STATE_READER) for what the command needs before it reads /proc and Slurm."""
    return (
        "cd {dir} 2>/dev/null || exit 0; "
        "printf '{mark}spec\\n'; cat {spec} 2>/dev/null; "
        "printf '{mark}state\\n'; cat {state} 2>/dev/null; "
        "pid= sid= queued=; py=$(command -v python3 || command -v /usr/libexec/platform-python || command -v python); "
        "eval \"$(\"$py\" -c {reader} {state} 2>/dev/null)\"; "
        "printf '{mark}stat\\n'; [ -n \"$pid\" ] && cat /proc/$pid/stat 2>/dev/null; "
        "printf '{mark}log\\n'; tail -c {log_bytes} {log} 2>/dev/null; "
        "if [ -n \"$sid\" ] && [ -n \"$queued\" ]; then "
        "printf '{mark}slurm\\n'; scontrol --oneliner show job \"$sid\" 2>&1; fi; exit 0"
    ).format(dir=node_path(jobs_dir, job), mark=MARK.replace("\n", "\\n"), spec=SPEC_FILE, state=STATE_FILE,
             log=LOG_FILE, log_bytes=LOG_BYTES, reader=shlex.quote(STATE_READER))


def _json(text: str) -> dict | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def parse(out: str) -> dict | None:
    """The job's state (as job_status gives it, without the log's tail and root cause) from poll_command's output;
    None when the output is not the command's (the caller then asks job_status)."""
    # A terminal (ssh -tt, under become) ends each line with CR LF; what a login script printed before the first
    # mark is not the job's.
    parts = out.replace("\r\n", "\n").split(MARK, 5)
    sections = {}
    for part in parts[1:]:
        name, _sep, body = part.partition("\n")
        sections[name] = body
    if not parts[1:]:
        sections = {"spec": "", "state": "", "stat": "", "log": ""}  # no job folder
    slurm = sections.pop("slurm", None)
    if set(sections) != {"spec", "state", "stat", "log"}:
        return None
    state = _json(sections["state"])
    alive = supervisor_alive(state or {}, sections["stat"].encode())
    result = state_of(_json(sections["spec"]), state, alive)
    if slurm is not None:
        result = settle(result, parse_job(slurm))
    lines = split_tail(sections["log"], cut=len(sections["log"].encode()) >= LOG_BYTES)
    result["last_line"] = lines[-1] if lines else ""
    return result
