# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How long one node's log has been silent, for the hang watchdog (gang_rules.hang_reason): what the node's
heartbeats carry as silent_s. Part of the supervisor as shipped (supervisor_bundle.py): standard library only,
Python 3.8+."""

from __future__ import annotations

import os
import time


def _size(path: str, missing: int) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return missing


class LogSilence:
    """The silence of the log at log_path, on the monotonic clock: counted from the attempt's first output, or,
    before any, from the attempt's start less startup_s. An attempt's start (imports, data loading, rendezvous) is
    often silent for longer than a step, so it counts only past that allowance (negative while within it)."""

    def __init__(self, log_path: str, startup_s: float) -> None:
        self.log_path = log_path
        self.startup_s = startup_s
        self.size = self.attempt_size = -1  # the log's size now, and when the attempt started
        self.last_output = self.attempt_started = time.monotonic()

    def begin_attempt(self) -> float:
        """A new attempt, starting now (returned): its output is what the log gains from here."""
        self.last_output = self.attempt_started = time.monotonic()
        self.size = self.attempt_size = _size(self.log_path, 0)  # no log yet: the attempt creates it, empty
        return self.attempt_started

    def follow(self) -> None:
        """Note new output (one stat of the log, each turn of the supervisor's loop)."""
        size = _size(self.log_path, -1)
        if size != self.size:
            self.size, self.last_output = size, time.monotonic()

    def seconds(self) -> float:
        now = time.monotonic()
        if self.size > self.attempt_size:
            return now - self.last_output
        return now - self.attempt_started - self.startup_s
