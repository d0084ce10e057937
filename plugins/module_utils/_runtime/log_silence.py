# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How long one node's log has been silent, for the hang watchdog (gang_rules.hang_reason): what the node's
heartbeats carry as silent_s. Part of the supervisor as shipped (supervisor_bundle.py): standard library only,
Python 3.8+."""

from __future__ import annotations

import os
import re
import time

# A rank's line as the launchers that tag them put it in the node's log: torchrun's (TORCHELASTIC_LOG_LINE_PREFIX_
# TEMPLATE, which the launch sets) and rank_output.py's for DeepSpeed, "[rank4|0]: "; Open MPI's --tag-output,
# "[1,4]<stdout>: " (plugin_utils/_postmortem/rank_lines.py reads the same two). The global rank is captured (the
# first group, or the second); RANK_LINE is the same tag over the log's bytes.
RANK_TAG = re.compile(r"^(?:\[rank(\d+)\|\d+\]: |\[\d+,(\d+)\]<std(?:out|err)>: )")
RANK_LINE = re.compile(RANK_TAG.pattern.encode(), re.M)
# The launchers whose ranks' lines are tagged so. Before its ranks print, a launcher writes lines of its own: torchrun
# a banner when it sets OMP_NUM_THREADS for more than one process per node (torch/distributed/run.py), DeepSpeed's
# runner its INFO lines; they are not the attempt's output.
TAGGING_LAUNCHERS = ("torchrun", "deepspeed", "mpirun")
# The most read in one turn while looking for the attempt's first rank line.
SCAN_CHUNK = 1 << 20


def _size(path: str, missing: int) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return missing


class LogSilence:
    """The silence of the log at log_path, on the monotonic clock: counted from the attempt's first output, or,
    before any, from the attempt's start less startup_s. An attempt's start (imports, data loading, rendezvous) is
    often silent for longer than a step, so it counts only past that allowance (negative while within it).

    Under a launcher that tags its ranks' lines (TAGGING_LAUNCHERS), the attempt's first output is a rank's first
    line: what the launcher writes of its own before it does not end the allowance."""

    def __init__(self, log_path: str, startup_s: float, launcher: str = "none") -> None:
        self.log_path = log_path
        self.startup_s = startup_s
        self.tagged = launcher in TAGGING_LAUNCHERS
        self.size = self.scanned = -1  # the log's size now; how far it has been read for a rank's first line
        self.heard = False  # whether the attempt has had its first output
        self.last_output = self.attempt_started = time.monotonic()

    def begin_attempt(self) -> float:
        """A new attempt, starting now (returned): its output is what the log gains from here."""
        self.last_output = self.attempt_started = time.monotonic()
        self.size = self.scanned = _size(self.log_path, 0)  # no log yet: the attempt creates it, empty
        self.heard = False
        return self.attempt_started

    def follow(self) -> None:
        """Note new output (one stat of the log, each turn of the supervisor's loop; before the attempt's first
        output under a tagging launcher, also a read of what the log gained)."""
        size = _size(self.log_path, -1)
        if size == self.size:
            return
        self.size = size
        if self.heard or self._first_output(size):
            self.heard, self.last_output = True, time.monotonic()

    def _first_output(self, size: int) -> bool:
        if not self.tagged:
            return size > self.scanned
        if size < self.scanned:
            self.scanned = 0  # the log was cut short: read from its start
        try:
            with open(self.log_path, "rb") as log:
                log.seek(max(self.scanned, 0))
                data = log.read(min(size - self.scanned, SCAN_CHUNK))
        except (OSError, ValueError):
            return False
        complete = data[:data.rfind(b"\n") + 1]  # a line still being written is read again next turn, whole
        self.scanned += len(complete)
        return RANK_LINE.search(complete) is not None

    def seconds(self) -> float:
        now = time.monotonic()
        if self.heard:
            return now - self.last_output
        return now - self.attempt_started - self.startup_s
