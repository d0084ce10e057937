# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""DeepSpeed's ranks' lines, each tagged with its rank, in the node's log.

DeepSpeed's launcher cannot tag its ranks' output; its one option about it, ``--enable_each_rank_log=DIR``, writes
each rank's stdout and stderr into ``DIR/<launch time>_rank<global rank>.log`` (deepspeed/launcher/launch.py; the
ranks run ``python -u``, so each line is there when printed). launchers.py passes the job folder's RANK_OUTPUT_DIR,
and the supervisor follows those files on each turn of its loop, appending each complete new line to the node's log
with torchrun's tag, ``[rank<global>|<local>]: `` (plugin_utils/_postmortem/rank_lines.py reads both). The log grows as the
ranks print, so the hang watchdog sees them as before; what the log holds is freed from the files, which are removed
when the attempt has ended (output_once.py).

Files that were there when the supervisor started are an earlier run's: they are not copied again. Shipped with the
supervisor; standard library only, Python 3.8+.
"""

from __future__ import annotations

import os
import re

RANK_OUTPUT_DIR = "rank_output"
RANK_FILE = re.compile(r"_rank(\d+)\.log$")
TAG = "[rank%d|%d]: "
# The most read from one file in one turn, so that a rank printing fast cannot hold up the loop.
CHUNK = 1 << 20


def first_rank(spec: dict) -> int:
    """This node's first global rank: the ranks of the nodes before it (spec's slots, else nproc_per_node each)."""
    rank = int(spec.get("node_rank") or 0)
    slots = list(spec.get("slots") or []) or [int(spec.get("nproc_per_node") or 1)] * len(spec.get("nodes") or [])
    return sum(int(count) for count in slots[:rank])


class RankOutput:
    """Follows the ranks' files into the node's log (``follow`` each turn; ``follow(final=True)`` once the attempt
    has ended, which also copies a last line without its newline)."""

    def __init__(self, job_dir: str, log_path: str, spec: dict) -> None:
        # Only DeepSpeed's launcher writes there (launchers.py): for any other, following is nothing at all.
        self.folder = os.path.join(job_dir, RANK_OUTPUT_DIR) if spec.get("launcher") == "deepspeed" else ""
        self.log_path = log_path
        self.first = first_rank(spec)
        self.read = dict(self._files())  # an earlier run's: not copied
        self.earlier = set(self.read)
        self.partial: dict[str, bytes] = {}

    def _files(self) -> dict[str, int]:
        if not self.folder:
            return {}
        try:
            names = [name for name in os.listdir(self.folder) if RANK_FILE.search(name)]
        except OSError:
            return {}
        sizes = {}
        for name in names:
            try:
                sizes[name] = os.path.getsize(os.path.join(self.folder, name))
            except OSError:
                continue
        return sizes

    def copied(self) -> dict[str, int]:
        """This run's files, by path, with how many of their bytes the log holds (output_once.py frees them)."""
        return {os.path.join(self.folder, name): size for name, size in self.read.items() if name not in self.earlier}

    def follow(self, final: bool = False) -> None:
        out = []
        for name, size in sorted(self._files().items()):
            offset = self.read.get(name, 0)
            if size <= offset and not (final and self.partial.get(name)):
                continue
            with open(os.path.join(self.folder, name), "rb") as handle:
                handle.seek(offset)
                data = handle.read(CHUNK)
            self.read[name] = offset + len(data)
            lines = (self.partial.pop(name, b"") + data).split(b"\n")
            rest = lines.pop()
            if rest and not final:
                self.partial[name] = rest
            elif rest:
                lines.append(rest)
            rank = int(RANK_FILE.search(name).group(1))  # type: ignore[union-attr]
            tag = (TAG % (rank, rank - self.first)).encode()
            out.extend(tag + line + b"\n" for line in lines)
        if out:
            with open(self.log_path, "ab") as log:
                log.write(b"".join(out))
