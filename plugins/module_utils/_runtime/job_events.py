# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The events of one node's part of a job, each with its time on this node's clock.

What the supervisor says in the node's log (each attempt and its port, a stop and its cause, a hang, the stacks, a
restart refused) and each rank's end, kept in state.json under "events" as [time, text] pairs. The controller merges
every node's into one timeline, ``logs/<job>/events.log`` (plugin_utils/_postmortem/timeline.py), moving each node's times onto
node 0's clock by the offsets node 0's supervisor measured from the heartbeats (gang.py). Shipped with the supervisor;
standard library only, Python 3.8+.
"""

from __future__ import annotations

import time

# A job that restarts many times keeps its latest events.
EVENTS_KEPT = 400
# What begins each line the supervisor writes into the node's log (job.log), beside the ranks' own.
LOG_PREFIX = "[gpufleet] "


class Events:
    """The node's events, kept in the supervisor's state (saved with it)."""

    def __init__(self, state: dict) -> None:
        self.items: list = state.setdefault("events", [])

    def add(self, what: str, at: float | None = None) -> None:
        self.items.append([round(time.time() if at is None else at, 3), what])
        del self.items[:-EVENTS_KEPT]

    def rank_ended(self, pid: int, rank: int | None, local_rank: int | None, how: str = "") -> None:
        """A rank process of this node has ended; how ('exit code 1', 'SIGKILL') where the supervisor could read it
        (the exit code of the node's part is its launcher's to report)."""
        with_how = " with %s" % how if how else ""
        if rank is None:
            self.add("a rank (pid %d) ended%s" % (pid, with_how))
        else:
            self.add("rank %d (local rank %s, pid %d) ended%s"
                     % (rank, "?" if local_rank is None else local_rank, pid, with_how))
