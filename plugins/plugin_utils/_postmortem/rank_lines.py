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
from typing import Sequence, TextIO

TAG = re.compile(r"^(?:\[rank(\d+)\|\d+\]: ?|\[\d+,(\d+)\]<std(?:out|err)>: ?)")
RANKS_DIR = "ranks"


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
