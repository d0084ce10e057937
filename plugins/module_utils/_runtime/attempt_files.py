# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What an attempt leaves in the job folder that the next attempt would write over, and where it is kept.

Two things are an attempt's own: the ranks' stacks (``stacks.txt``, taken on a hang or before a stop that asked for
them: rank_stacks.py) and PyTorch's flight recorder dumps (``flight_recorder/rank_<global rank>``, written by torch
when a collective times out, where the launch script points it: _job/launchers.py ``torch_prelude``). A restarted
attempt's ranks would write the same names, so before the gang launches again the supervisor moves them to
``attempts/<N>/`` (N: the attempt that wrote them), ``attempts/<N>/stacks.txt`` and
``attempts/<N>/flight_recorder/rank_<r>``; the job's own files in ``flight_recorder/`` under other names stay. A job
restarted twice after hangs keeps three sets: ``attempts/1/``, ``attempts/2/`` and the last attempt's in place.

A new run of the job (a relaunch) keeps the previous run's beside it, never mixed: ``stacks.<run id>.txt``,
``flight_recorder.<run id>/`` and ``attempts.<run id>/`` (keep_run, called by jobs.start before anything of the new
run is written). Each rank's output is kept in the node's log (job.log) and nowhere else by gpufleet. Standard
library only; shipped to the nodes as part of the supervisor.
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.rank_stacks import STACKS_FILE

FLIGHT_RECORDER_DIR = "flight_recorder"
# A dump's name: the prefix's file part and the global rank (torch's loader reads the rank from the name's end).
FLIGHT_RECORDER_DUMP = re.compile(r"^rank_\d+$")
ATTEMPTS_DIR = "attempts"


def flight_recorder_dumps(job_dir: str) -> list[str]:
    """The names of the flight recorder's dumps in job_dir's FLIGHT_RECORDER_DIR, in rank order; the job's own files
    there under other names are not the recorder's."""
    try:
        names = [name for name in os.listdir(os.path.join(job_dir, FLIGHT_RECORDER_DIR))
                 if FLIGHT_RECORDER_DUMP.match(name)]
    except OSError:
        return []
    return sorted(names, key=lambda name: int(name[len("rank_"):]))


def attempt_files_in(folder: str) -> list[str]:
    """An attempt's own files in folder (the job folder, or one of attempts/<N>), relative to it: stacks.txt first,
    then the flight recorder's dumps in rank order."""
    files = [STACKS_FILE] if os.path.isfile(os.path.join(folder, STACKS_FILE)) else []
    return files + [os.path.join(FLIGHT_RECORDER_DIR, name) for name in flight_recorder_dumps(folder)]


def keep_attempt(job_dir: str, attempt: int) -> list[str]:
    """Move what attempt `attempt` left (its stacks, its flight recorder dumps) into attempts/<attempt>/; return the
    moved files' paths relative to that folder (none: nothing moved). A name already there is not written over (the
    attempt's files were kept before): the file stays where it is."""
    kept_dir = os.path.join(job_dir, ATTEMPTS_DIR, str(attempt))
    kept = []
    for name in attempt_files_in(job_dir):
        destination = os.path.join(kept_dir, name)
        if os.path.exists(destination):
            continue
        os.makedirs(os.path.dirname(destination), mode=0o700, exist_ok=True)
        os.replace(os.path.join(job_dir, name), destination)
        kept.append(name)
    return kept


def kept_said(attempt: int, kept: list[str]) -> str:
    """The supervisor's log line about what keep_attempt moved."""
    dumps = sum(1 for name in kept if name != STACKS_FILE)
    what = ([STACKS_FILE] if STACKS_FILE in kept else []) + (
        ["%d flight recorder dump%s" % (dumps, "" if dumps == 1 else "s")] if dumps else [])
    return "attempt %d's %s kept in %s/" % (attempt, " and ".join(what), os.path.join(ATTEMPTS_DIR, str(attempt)))


def set_aside(job_dir: str, attempt: int, state: dict) -> str | None:
    """Before attempt `attempt` starts: the one before's files kept (keep_attempt), and its stacks' record in
    state.json moved from the run's ("stacks", the current attempt's) to that attempt's own (the last of
    "attempts"), its file named where it now is. The supervisor's log line, or None when there was nothing."""
    if attempt < 2:
        return None
    try:
        kept = keep_attempt(job_dir, attempt - 1)
    except OSError as exc:  # the ranks' files may be another user's (a container's)
        return "attempt %d's stacks and flight recorder dumps not kept aside: %s" % (attempt - 1, exc)
    stacks = state.pop("stacks", None)
    if isinstance(stacks, dict) and state.get("attempts"):
        if STACKS_FILE in kept:
            stacks["file"] = os.path.join(ATTEMPTS_DIR, str(attempt - 1), STACKS_FILE)
        state["attempts"][-1]["stacks"] = stacks
    return kept_said(attempt - 1, kept) if kept else None


def kept_attempts(job_dir: str) -> list[dict]:
    """What earlier attempts of this run left, oldest first: each {attempt, dir (absolute), files (attempt_files_in
    dir)}; job_status returns it and the role fetches it (roles/job/tasks/collect.yml)."""
    root = os.path.join(job_dir, ATTEMPTS_DIR)
    try:
        numbers = sorted(int(name) for name in os.listdir(root) if name.isdigit() and name.isascii())
    except OSError:
        return []
    found = []
    for number in numbers:
        folder = os.path.join(root, str(number))
        files = attempt_files_in(folder)
        if files:
            found.append({"attempt": number, "dir": folder, "files": files})
    return found


def keep_run(job_dir: str, suffix: str) -> None:
    """Before a new run of the job: the previous run's stacks, flight recorder dumps and earlier attempts' files
    renamed with its run id (suffix), beside the new run's."""
    stacks = os.path.join(job_dir, STACKS_FILE)
    if os.path.isfile(stacks):
        os.replace(stacks, os.path.join(job_dir, "stacks.%s.txt" % suffix))
    if flight_recorder_dumps(job_dir):
        dumps = os.path.join(job_dir, FLIGHT_RECORDER_DIR)
        os.replace(dumps, "%s.%s" % (dumps, suffix))
    attempts = os.path.join(job_dir, ATTEMPTS_DIR)
    if os.path.isdir(attempts):
        os.replace(attempts, "%s.%s" % (attempts, suffix))
