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

No Python runs on the node for a poll (a Python start was two thirds of a poll's CPU there: 27 against 8 ms, docs/scale):
what the command needs from state.json, the supervisor's PID whose /proc stat line tells it alive and, for a part
queued for Slurm, its Slurm job id, is what the last poll read there (Known). The first poll knows neither, and a
poll whose state.json names another PID or a queued Slurm job it did not ask about is asked again at once with
them (parse's second value): the wait polls twice once, at its start.

Under Slurm, while the node's part is queued, the same command asks slurmctld for the job's state (``scontrol``),
read with slurm_jobs.settle as job_status reads it.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex

from ansible_collections.gpufleet.cluster.plugins.module_utils._job.job_logs import split_tail
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_processes import supervisor_alive
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import (
    LOG_FILE, SPEC_FILE, STATE_FILE, JobState)
from ansible_collections.gpufleet.cluster.plugins.module_utils._job.job_read import state_of
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.slurm_jobs import parse_job, settle

MARK = "\n@@gpufleet-poll "
LOG_BYTES = 8192  # of the log's end: its last line is the wait's progress line
# A Slurm job id as state.json may hold it: digits, and an array task's "_<index>".
_SLURM_JOB = re.compile(r"[0-9]+(?:_[0-9]+)?")


@dataclasses.dataclass(frozen=True)
class Known:
    """What a poll asks the node about, as the last poll's state.json named it: the supervisor's PID (its /proc stat
    line is printed) and the Slurm job id of a queued part (slurmctld is asked). Only a positive int and a Slurm job
    id's digits ever reach the shell: anything else is taken as not known."""

    pid: int | None = None
    slurm_job: str | None = None

    def __post_init__(self) -> None:
        # type(), not isinstance(): a bool is not a PID.
        if not (type(self.pid) is int and self.pid > 0):  # pylint: disable=unidiomatic-typecheck
            object.__setattr__(self, "pid", None)
        if not (isinstance(self.slurm_job, str) and _SLURM_JOB.fullmatch(self.slurm_job)):
            object.__setattr__(self, "slurm_job", None)

    @classmethod
    def of(cls, state: dict | None) -> "Known":
        """What a poll must ask about to judge this state.json."""
        state = state or {}
        queued = state.get("state") == JobState.QUEUED
        return cls(state.get("supervisor_pid"), str(state.get("slurm_job_id") or "") if queued else None)


NOTHING = Known()


def node_path(jobs_dir: str, job: str) -> str:
    """The job folder as the node's shell reads it: '~' is the node's home there, not the controller's."""
    path = jobs_dir.rstrip("/") + "/" + job
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def poll_command(jobs_dir: str, job: str, known: Known = NOTHING) -> str:
    """The POSIX shell command whose output parse() reads; it changes nothing and always exits 0. Only `cat`,
    `tail` and, for a queued Slurm part, `scontrol` run; the stat section names the PID it was read for."""
    stat = ("printf '{mark}stat %d\\n'; cat /proc/%d/stat 2>/dev/null; " % (known.pid, known.pid) if known.pid
            else "printf '{mark}stat\\n'; ")
    slurm = ("printf '{mark}slurm\\n'; scontrol --oneliner show job %s 2>&1; " % known.slurm_job if known.slurm_job
             else "")
    return (
        "cd {dir} 2>/dev/null || exit 0; "
        "printf '{mark}spec\\n'; cat {spec} 2>/dev/null; "
        "printf '{mark}state\\n'; cat {state} 2>/dev/null; "
        + stat +
        "printf '{mark}log\\n'; tail -c {log_bytes} {log} 2>/dev/null; "
        + slurm + "exit 0"
    ).format(dir=node_path(jobs_dir, job), mark=MARK.replace("\n", "\\n"), spec=SPEC_FILE, state=STATE_FILE,
             log=LOG_FILE, log_bytes=LOG_BYTES)


def _json(text: str) -> dict | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def parse(out: str, asked: Known = NOTHING) -> tuple[dict | None, Known | None]:
    """What poll_command(..., asked) printed, read: (the job's state as job_status gives it, without the log's tail
    and root cause; what the next poll asks about). (None, Known) where this answer cannot be judged with what was
    asked (state.json names another supervisor PID, or a queued Slurm job that was not asked about): poll again at
    once with that. (None, None) where the output is not the command's (the caller then asks job_status)."""
    # A terminal (ssh -tt, under become) ends each line with CR LF; what a login script printed before the first
    # mark is not the job's.
    parts = out.replace("\r\n", "\n").split(MARK, 5)
    sections = {}
    for part in parts[1:]:
        name, _sep, body = part.partition("\n")
        sections[name] = body
    if not parts[1:]:  # no job folder
        return dict(state_of(None, None, False), last_line=""), NOTHING
    slurm = sections.pop("slurm", None)
    stat_of = [name for name in sections if name.split(" ")[0] == "stat"]
    if len(stat_of) != 1 or stat_of[0] != ("stat %d" % asked.pid if asked.pid else "stat") \
            or set(sections) != {"spec", "state", stat_of[0], "log"} or (slurm is None) != (asked.slurm_job is None):
        return None, None
    state = _json(sections["state"])
    wanted = Known.of(state)
    if (wanted.pid is not None and wanted.pid != asked.pid) or (wanted.slurm_job not in (None, asked.slurm_job)):
        return None, wanted
    alive = supervisor_alive(state or {}, sections[stat_of[0]].encode())
    result = state_of(_json(sections["spec"]), state, alive)
    if slurm is not None and wanted.slurm_job is not None:
        result = settle(result, parse_job(slurm))
    lines = split_tail(sections["log"], cut=len(sections["log"].encode()) >= LOG_BYTES)
    result["last_line"] = lines[-1] if lines else ""
    return result, wanted
