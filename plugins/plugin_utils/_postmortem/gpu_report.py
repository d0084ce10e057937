# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the nodes' GPU samples say of a job, on the controller: the nodes' gpus.csv (module_utils/_runtime/gpu_watch.py,
fetched as logs/<job>/<node>.gpus.csv) read into one line per node (mean utilisation, peak memory, maximum
temperature, seconds the clocks were held down and why, the node's new XID), the likely stragglers, and
logs/<job>/gpus.png: utilisation and memory over time, one line per node, XIDs marked."""

from __future__ import annotations

import csv
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import gpu_health

PICTURE = "gpus.png"
# A node is a likely straggler when its clocks were held down for this share of its sampled time or more...
THROTTLED_SHARE = 0.25
# ...or when, under load, its GPUs' SM clock averaged this share of the best node's or less.
SLOW_CLOCK_SHARE = 0.85
LOADED_UTILIZATION = 50.0  # % utilisation from which a sample counts as under load
PICTURE_SIZE = (10.0, 6.0)  # inches, at PICTURE_DPI: 1000 x 600 pixels
PICTURE_DPI = 100


@dataclass
class NodeGpus:
    """One node's GPUs over the job."""

    host: str
    samples: int = 0
    gpus: int = 0
    mean_utilization: float = 0.0
    peak_memory_mib: float = 0.0
    max_temperature: float = 0.0
    throttled_s: float = 0.0
    sampled_s: float = 0.0
    throttle_reasons: list[str] = field(default_factory=list)
    loaded_sm_clock: float | None = None
    xid: str = ""

    def line(self) -> str:
        held = "%.0f s throttled (%s)" % (self.throttled_s, ", ".join(self.throttle_reasons)) if self.throttled_s \
            else "never throttled"
        return ("%s: %s, mean utilisation %.0f%%, peak memory %.1f GiB, max %.0f C, %s%s"
                % (self.host, "1 GPU" if self.gpus == 1 else "%d GPUs" % self.gpus, self.mean_utilization, self.peak_memory_mib / 1024, self.max_temperature,
                   held, "; " + self.xid if self.xid else ""))


def _float(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def read_samples(logs_dir: str, hosts: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Each host's samples, in time order, from logs_dir/<host>.gpus.csv (hosts without one are left out)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for host in hosts:
        path = os.path.join(logs_dir, "%s.gpus.csv" % host)
        try:
            with open(path, newline="") as handle:
                rows = [row for row in csv.DictReader(handle) if _float(row.get("time")) is not None]
        except OSError:
            continue
        if rows:
            found[host] = sorted(rows, key=lambda row: float(row["time"]))
    return found


def _by_time(rows: list[dict[str, Any]]) -> list[tuple[float, list[dict[str, Any]]]]:
    """The node's samples grouped by the moment they were taken (one row per GPU each)."""
    moments: dict[float, list[dict[str, Any]]] = {}
    for row in rows:
        moments.setdefault(float(row["time"]), []).append(row)
    return sorted(moments.items())


def summarize(host: str, rows: list[dict[str, Any]], xid: str = "") -> NodeGpus:
    moments = _by_time(rows)
    node = NodeGpus(host=host, samples=len(moments), gpus=max(len(group) for _at, group in moments), xid=xid)
    utilizations = [value for value in (_float(row.get("utilization")) for row in rows) if value is not None]
    node.mean_utilization = statistics.mean(utilizations) if utilizations else 0.0
    node.peak_memory_mib = max([_float(row.get("memory_used")) or 0.0 for row in rows] or [0.0])
    node.max_temperature = max([_float(row.get("temperature")) or 0.0 for row in rows] or [0.0])
    gaps = [later - earlier for (earlier, _g), (later, _h) in zip(moments, moments[1:])]
    period = statistics.median(gaps) if gaps else 0.0
    reasons: set[str] = set()
    for _at, group in moments:
        node.sampled_s += period
        held = 0
        for row in group:
            held |= int(_float(row.get("event_reasons")) or 0) & gpu_health.SLOWDOWN_REASONS
        if held:
            node.throttled_s += period
            reasons.update(name for bit, name in gpu_health.EVENT_REASONS.items() if held & bit)
    node.throttle_reasons = sorted(reasons)
    loaded = [_float(row.get("sm_clock")) for row in rows if (_float(row.get("utilization")) or 0) >= LOADED_UTILIZATION]
    loaded = [clock for clock in loaded if clock is not None]
    node.loaded_sm_clock = statistics.mean(loaded) if loaded else None
    return node


def stragglers(nodes: Sequence[NodeGpus]) -> list[str]:
    """Why each likely straggler is one: throttled for a large share of the run, or SM clocks well below the
    other nodes' under load."""
    named = []
    best = max([node.loaded_sm_clock for node in nodes if node.loaded_sm_clock] or [0.0])
    for node in nodes:
        if node.sampled_s and node.throttled_s / node.sampled_s >= THROTTLED_SHARE:
            named.append("%s is a likely straggler: its clocks were held down %.0f%% of the run (%s)" % (
                node.host, 100 * node.throttled_s / node.sampled_s, ", ".join(node.throttle_reasons)))
        elif best and node.loaded_sm_clock and node.loaded_sm_clock <= SLOW_CLOCK_SHARE * best:
            named.append("%s is a likely straggler: its SM clock under load averaged %.0f MHz, %.0f%% of the fastest "
                         "node's %.0f MHz" % (node.host, node.loaded_sm_clock, 100 * node.loaded_sm_clock / best, best))
    return named


# A node's line carries a marker at each sample when it has this many or fewer: a job of a few seconds has one or two
# samples per node, which a line alone does not draw; a long job's thousands would hide the line under markers.
MARKED_SAMPLES = 60
# The time axis's unit by the job's span: seconds, then minutes past 2 minutes, hours past 2 hours.
TIME_UNITS = ((7200.0, 3600.0, "hours"), (120.0, 60.0, "minutes"), (0.0, 1.0, "seconds"))


def _time_unit(span_s: float) -> tuple[float, str]:
    return next((size, name) for past, size, name in TIME_UNITS if span_s > past or past == 0.0)


def draw(samples: Mapping[str, list[dict[str, Any]]], faults: Mapping[str, tuple[str, float]]) -> Any:
    """The picture as a matplotlib figure (picture() saves it): utilisation and memory over time, one line per node
    (the mean of its GPUs), each node's XID marked."""
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    from matplotlib import pyplot  # pylint: disable=import-outside-toplevel

    start = min(float(rows[0]["time"]) for rows in samples.values())
    span = max(float(row["time"]) for rows in samples.values() for row in rows) - start
    unit, unit_name = _time_unit(span)
    figure, (util_axes, memory_axes) = pyplot.subplots(2, 1, sharex=True, figsize=PICTURE_SIZE)
    for host, rows in samples.items():
        moments = _by_time(rows)
        times = [(at - start) / unit for at, _group in moments]
        util = [statistics.mean([_float(row.get("utilization")) or 0.0 for row in group]) for _at, group in moments]
        memory = [sum(_float(row.get("memory_used")) or 0.0 for row in group) / 1024 for _at, group in moments]
        marker = "o" if len(moments) <= MARKED_SAMPLES else None
        line = util_axes.plot(times, util, label=host, marker=marker, markersize=4)[0]
        memory_axes.plot(times, memory, label=host, color=line.get_color(), marker=marker, markersize=4)
        if host in faults:
            reason, at = faults[host]
            for axes in (util_axes, memory_axes):
                axes.axvline((at - start) / unit, color=line.get_color(), linestyle="--")
            util_axes.annotate(reason.split(": ", 1)[-1], ((at - start) / unit, 100), fontsize=8,
                               color=line.get_color(), va="top")
    if span < 1.0:  # one moment: a second either side, not a range of a thousandth
        util_axes.set_xlim(-1.0, 1.0)
    util_axes.set_ylabel("GPU utilisation (%, mean)")
    util_axes.set_ylim(0, 105)
    memory_axes.set_ylabel("GPU memory used (GiB, all GPUs)")
    memory_axes.set_ylim(bottom=0)
    memory_axes.set_xlabel("%s since the first sample" % unit_name)
    for axes in (util_axes, memory_axes):
        axes.grid(True, alpha=0.3)
    util_axes.legend(loc="lower right", fontsize=8)
    util_axes.set_title("GPUs over the job, one line per node (dashed: a hardware XID)")
    figure.tight_layout()
    return figure


def picture(path: str, samples: Mapping[str, list[dict[str, Any]]], faults: Mapping[str, tuple[str, float]]) -> str:
    """draw()'s figure, saved as a PNG at path."""
    figure = draw(samples, faults)
    from matplotlib import pyplot  # pylint: disable=import-outside-toplevel

    figure.savefig(path, dpi=PICTURE_DPI)
    pyplot.close(figure)
    return path


def job_gpus(logs_dir: str, results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Everything the report says of the job's GPUs: ``lines`` (one per node with samples, then the likely
    stragglers) and ``picture`` (its path; '' without samples)."""
    hosts = [str(result.get("host")) for result in results]
    samples = read_samples(logs_dir, hosts)
    if not samples:
        return {"lines": [], "stragglers": [], "picture": "", "nodes": []}
    faults = {str(r.get("host")): (str(r["gpu_fault"]), float(r.get("gpu_fault_at") or 0)) for r in results
              if r.get("gpu_fault")}
    nodes = [summarize(host, rows, faults.get(host, ("", 0.0))[0]) for host, rows in samples.items()]
    slow = stragglers(nodes)
    return {"lines": [node.line() for node in nodes] + slow, "stragglers": slow,
            "picture": picture(os.path.join(logs_dir, PICTURE), samples, faults),
            "nodes": [node.__dict__ for node in nodes]}
