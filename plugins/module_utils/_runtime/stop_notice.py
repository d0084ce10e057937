# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The stop notice: how a rank hears, before its SIGTERM, that it is being stopped, why, and how long it has.

Every rank gets two variables (the launchers pass them on, mpirun by its -x list, a container by name):
GPUFLEET_STOP_FILE, the path of a file that does not exist while the attempt runs, and GPUFLEET_STOP_GRACE_S, the
job's grace period. When the node's part must stop (stop.yml, Ctrl-C while train.yml waits, another node's failure
before a restart, the hang watchdog, maintenance), the supervisor writes the file, whole (job_processes.write_atomic),
and only then sends SIGTERM; SIGKILL comes no sooner than grace_s after the file appeared. Its appearance means "save
now"; it holds JSON: reason, attempt, grace_s, deadline (Unix time, the earliest SIGKILL) and written_at. A script
needs nothing of gpufleet to use it: ``os.path.exists(os.environ["GPUFLEET_STOP_FILE"])`` between steps, with a
SIGTERM handler that lets the step finish (Python's default action for SIGTERM ends the process at once). Each
attempt starts without the file (begin_attempt removes it). Standard library only; shipped to the nodes as part of
the supervisor."""

from __future__ import annotations

import json
import os
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_processes import write_atomic

STOP_FILE_VAR = "GPUFLEET_STOP_FILE"
STOP_GRACE_VAR = "GPUFLEET_STOP_GRACE_S"
STOP_NOTICE_FILE = "stop_notice.json"


def notice_path(job_dir: str) -> str:
    return os.path.join(job_dir, STOP_NOTICE_FILE)


def notice_env(job_dir: str, grace_s: float) -> dict[str, str]:
    """The variables every rank of an attempt gets."""
    return {STOP_FILE_VAR: notice_path(job_dir), STOP_GRACE_VAR: "%g" % grace_s}


def notice_text(reason: str, attempt: int, grace_s: float, now: float) -> str:
    return json.dumps({"reason": reason, "attempt": attempt, "grace_s": grace_s, "deadline": round(now + grace_s, 3),
                       "written_at": round(now, 3)}, sort_keys=True) + "\n"


def write_notice(job_dir: str, reason: str, attempt: int, grace_s: float, now: float | None = None) -> str:
    """Put the notice in place whole (a rank that sees the file can read all of it); return its path. Readable by
    all: a container's ranks may run as another user than the supervisor."""
    path = notice_path(job_dir)
    write_atomic(path, notice_text(reason, attempt, grace_s, time.time() if now is None else now), 0o644)
    return path


def clear_notice(job_dir: str) -> None:
    """A new attempt starts without a notice (the last attempt's, if any, was for its own stop)."""
    try:
        os.unlink(notice_path(job_dir))
    except FileNotFoundError:
        pass
