# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rank tags in the nodes' logs, read on the controller: one file per rank, and a failing rank's lines first.

torchrun tags each rank's line ``[rank4|0]: `` (global and local rank; module_utils/_job/launchers.py sets the prefix),
and so does the supervisor under DeepSpeed (module_utils/_runtime/rank_output.py); mpirun ``[1,4]<stdout>: `` (Open MPI's
--tag-output: job and global rank). The launchers' own lines carry no tag.
"""

from __future__ import annotations

import os
import re
from collections import deque
from typing import Sequence, TextIO

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_events import LOG_PREFIX

TAG = re.compile(r"^(?:\[rank(\d+)\|\d+\]: ?|\[\d+,(\d+)\]<std(?:out|err)>: ?)")
RANKS_DIR = "ranks"
# How many of the master rank's last lines end the report (last_words).
LAST_WORDS = 5


def rank_of(line: str) -> int | None:
    """The global rank a log line is tagged with, or None for a launcher's own line."""
    found = TAG.match(line)
    if found is None:
        return None
    return int(found.group(1) if found.group(1) is not None else found.group(2))


def split_by_rank(log_paths: Sequence[str], logs_dir: str) -> list[str]:
    """Write every tagged line of the fetched node logs, tag removed, into <logs_dir>/ranks/rank<N>.log (rewritten
    each time); returns the files written, in rank order."""
    handles: dict[int, TextIO] = {}
    out_dir = os.path.join(logs_dir, RANKS_DIR)
    try:
        for path in log_paths:
            if not os.path.isfile(path):
                continue
            with open(path, encoding="utf-8", errors="replace") as log:
                for line in log:
                    rank = rank_of(line)
                    if rank is None:
                        continue
                    if rank not in handles:
                        os.makedirs(out_dir, exist_ok=True)
                        handles[rank] = open(  # pylint: disable=consider-using-with
                            os.path.join(out_dir, "rank%d.log" % rank), "w", encoding="utf-8")
                    handles[rank].write(TAG.sub("", line, count=1))
    finally:
        for handle in handles.values():
            handle.close()
    return [os.path.join(out_dir, "rank%d.log" % rank) for rank in sorted(handles)]


def failing_rank_first(lines: Sequence[str], rank: int | None) -> list[str]:
    """A log tail with the failing rank's lines first, then the rest (the launcher's report, the other ranks)."""
    if rank is None:
        return list(lines)
    own = [line for line in lines if rank_of(line) == rank]
    if not own:
        return list(lines)
    return own + ["(the other lines of the tail:)"] + [line for line in lines if rank_of(line) != rank]


def last_words(rank_logs: Sequence[str], master_log: str | None, count: int = LAST_WORDS) -> tuple[str, list[str]]:
    """The master rank's last lines, and the file they are from: global rank 0's (``ranks/rank0.log``, written by
    split_by_rank), else, where the launcher tags no line with its rank (launcher none), the master node's log
    without the supervisor's own lines; ('', []) when there is neither."""
    zero = [path for path in rank_logs if os.path.basename(path) == "rank0.log"]
    if zero:
        return zero[0], _last(zero[0], count, "")
    if rank_logs or not master_log or not os.path.isfile(master_log):
        return "", []
    return master_log, _last(master_log, count, LOG_PREFIX)


def _last(path: str, count: int, leave_out: str) -> list[str]:
    """A fetched log's last count lines, without those that begin with leave_out (when it is not ''); read whole,
    as split_by_rank reads the logs."""
    with open(path, encoding="utf-8", errors="replace") as log:
        return [line.rstrip("\n") for line in deque(
            (line for line in log if not (leave_out and line.startswith(leave_out))), maxlen=count)]
