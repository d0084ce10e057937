# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parse nccl-tests output (all_reduce_perf and friends) into a report, and decide pass or fail.

Handles single- and multi-node output: NCCL INFO lines interleaved, launcher prefixes
such as ``0: `` or ``[1,0]<stdout>:``, the out-of-place and in-place column groups,
``N/A`` in ``#wrong`` when checking is off, numbers too wide for their column, which nccl-tests prints in
exponent form (``2e+06``), and the closing ``# Avg bus bandwidth`` line.
"""

from __future__ import annotations

import re
from typing import Any

_PREFIX = r"^(?:\s*\d+:\s*|\[\d+,\d+\]<std(?:out|err)>:\s*)?"
# A measured figure: 1494.0, or 2e+06 when it does not fit its column (an in-place time of 0.35 us on one GPU).
_FIG = r"\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"
_ROW_RE = re.compile(
    _PREFIX + r"\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>\w+)\s+(?P<redop>\w+)\s+(?P<root>-?\d+)\s+"
    r"(?P<time>{f})\s+(?P<algbw>{f})\s+(?P<busbw>{f})\s+(?P<wrong>\S+)"
    r"(?:\s+(?P<ip_time>{f})\s+(?P<ip_algbw>{f})\s+(?P<ip_busbw>{f})\s+(?P<ip_wrong>\S+))?\s*$".format(f=_FIG)
)
_AVG_RE = re.compile(_PREFIX + r"#\s*Avg bus bandwidth\s*:\s*(?P<avg>" + _FIG + ")")
_OOB_RE = re.compile(_PREFIX + r"#\s*Out of bounds values\s*:\s*(?P<count>\d+)\s+(?P<verdict>\w+)")
_DEVICE_RE = re.compile(_PREFIX + r"#\s+Rank\s+(?P<rank>\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(?P<host>\S+)\s+device\s+"
                        r"(?P<device>\d+)\s+\[(?P<bus>[^\]]+)\]\s+(?P<model>.+?)\s*$")


def _wrong(value: str | None) -> int | None:
    if value is None or value == "N/A":
        return None
    return int(value) if value.isdigit() else None


def parse(text: str) -> dict[str, Any]:
    """The rows (one per message size), the devices, the average bus bandwidth and the error counts."""
    rows = []
    devices = []
    avg = None
    out_of_bounds = None
    for line in text.splitlines():
        match = _ROW_RE.match(line)
        if match:
            row = {
                "size_bytes": int(match.group("size")),
                "count": int(match.group("count")),
                "type": match.group("type"),
                "redop": match.group("redop"),
                "out_of_place": {"time_us": float(match.group("time")), "algbw_gbps": float(match.group("algbw")),
                                 "busbw_gbps": float(match.group("busbw")), "wrong": _wrong(match.group("wrong"))},
            }
            if match.group("ip_time"):
                row["in_place"] = {"time_us": float(match.group("ip_time")),
                                   "algbw_gbps": float(match.group("ip_algbw")),
                                   "busbw_gbps": float(match.group("ip_busbw")),
                                   "wrong": _wrong(match.group("ip_wrong"))}
            rows.append(row)
            continue
        found = _DEVICE_RE.match(line)
        if found:
            devices.append({"rank": int(found.group("rank")), "host": found.group("host"),
                            "device": int(found.group("device")), "bus": found.group("bus"),
                            "model": found.group("model")})
            continue
        found = _AVG_RE.match(line)
        if found:
            avg = float(found.group("avg"))
            continue
        found = _OOB_RE.match(line)
        if found:
            out_of_bounds = int(found.group("count"))
    wrong = sum((r[group]["wrong"] or 0) for r in rows for group in ("out_of_place", "in_place") if group in r)
    return {"rows": rows, "devices": devices, "avg_busbw_gbps": avg, "out_of_bounds": out_of_bounds,
            "wrong": wrong, "ranks": len(devices), "hosts": sorted({d["host"] for d in devices})}


def peak_busbw(report: dict[str, Any]) -> float | None:
    """The best bus bandwidth over all sizes (out-of-place and in-place): what the links can carry."""
    values = [r[g]["busbw_gbps"] for r in report["rows"] for g in ("out_of_place", "in_place") if g in r]
    return max(values) if values else None


def peak_algbw(report: dict[str, Any]) -> float | None:
    """The best algorithm bandwidth over the out-of-place rows (in-place rows on one rank copy nothing)."""
    values = [r["out_of_place"]["algbw_gbps"] for r in report["rows"]]
    return max(values) if values else None


def verdict(report: dict[str, Any], expected_busbw_gbps: float | None) -> dict[str, Any]:
    """Pass or fail: no rows, wrong results or out-of-bounds values fail; so does a peak busbw below the expectation."""
    reasons = []
    if not report["rows"]:
        reasons.append("no result rows in the output")
    if report["wrong"]:
        reasons.append("%d wrong results" % report["wrong"])
    if report["out_of_bounds"]:
        reasons.append("%d out-of-bounds values" % report["out_of_bounds"])
    peak = peak_busbw(report)
    if report["ranks"] == 1 and expected_busbw_gbps is not None:
        # Bus bandwidth is algbw * 2(n-1)/n for all_reduce: 0 with one rank, whatever the GPU can do.
        reasons.append("one rank moves no data between GPUs, so its bus bandwidth (0) says nothing of the links; "
                       "run across 2 or more GPUs to check the expected %.2f GB/s" % float(expected_busbw_gbps))
    elif expected_busbw_gbps is not None and peak is not None and peak < float(expected_busbw_gbps):
        reasons.append("peak bus bandwidth %.2f GB/s is below the expected %.2f GB/s" % (peak, float(expected_busbw_gbps)))
    return {"passed": not reasons, "reasons": reasons, "peak_busbw_gbps": peak,
            "avg_busbw_gbps": report["avg_busbw_gbps"], "expected_busbw_gbps": expected_busbw_gbps}
