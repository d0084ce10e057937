# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One timeline of a job: every node's supervisor events (module_utils/_runtime/job_events.py) in time order.

Each node stamps its events with its own wall clock, and clocks of servers differ (by milliseconds with NTP, by
seconds without). Node 0's supervisor measured, from the heartbeats, how far each peer's clock is behind its own plus
the shortest trip (gang.py: the least of arrival time minus sending time); each peer's times are moved onto node 0's
clock by that amount, which is off by at most the one-way trip (below a millisecond on a LAN). A node node 0 never
heard keeps its own clock, and the timeline says so.
"""

from __future__ import annotations

import datetime
from typing import Any, Mapping, Sequence


def offsets(results: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """Seconds to add to each node's times to put them on node 0's clock (None: not measured)."""
    if not results:
        return {}
    reference = results[0]
    measured = reference.get("clock_offsets") if isinstance(reference.get("clock_offsets"), Mapping) else {}
    found: dict[str, float | None] = {}
    for result in results:
        host = str(result.get("host"))
        found[host] = 0.0 if result is reference else (float(measured[host]) if host in measured else None)
    return found


def merge(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """The timeline's lines: a header saying how the clocks were aligned, then every event, oldest first, each as
    '<UTC time on node 0's clock>  <node>  <what>'."""
    shifts = offsets(results)
    events = []
    for order, result in enumerate(results):
        host = str(result.get("host"))
        for at, what in result.get("events") or []:
            events.append((float(at) + (shifts.get(host) or 0.0), order, host, str(what)))
    events.sort(key=lambda event: (event[0], event[1]))
    width = max([len(host) for host in shifts] + [4])
    lines = ["# every node's events on %s's clock (UTC); %s" % (
        results[0].get("host") if results else "node 0",
        ", ".join("%s %s" % (host, "not measured: its own clock" if shift is None else "%+.3f s" % shift)
                  for host, shift in shifts.items()))]
    for at, _order, host, what in events:
        stamp = datetime.datetime.fromtimestamp(at, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        lines.append("%s  %-*s  %s" % (stamp, width, host, what))
    return lines
