# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""verify.yml's Gloo measurement (module gloo_all_reduce, one rank per node) as a report and a verdict, and the
words for the nodes where NCCL's was not taken."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def report(results: Mapping[str, Mapping[str, Any]], hosts: list[str]) -> dict[str, Any]:
    """The rows (rank 0's), every node's interface and error, and the verdict: passed when every node in hosts gave
    a result, the rows are there and no sum was wrong."""
    errors: dict[str, str] = {}
    interfaces: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    for host in hosts:
        found = results.get(host) or {}
        # A rank that ended returns its rank; a module that failed (its msg), an async job that timed out or a wait
        # that gave up does not.
        if found.get("error") or "rank" not in found:
            errors[host] = str(found.get("error") or found.get("msg") or "no result (its rank did not end)")
        if found.get("interface"):
            interfaces[host] = str(found["interface"])
        if found.get("rank") == 0:
            rows = list(found.get("rows") or [])
    reasons = ["%s: %s" % (host, error) for host, error in errors.items()]
    if not errors and not rows:
        reasons.append("no result rows from rank 0 (%s)" % (hosts[0] if hosts else "no node"))
    wrong = sum(int(row.get("wrong") or 0) for row in rows)
    if wrong:
        reasons.append("%d wrong sums (an element of the first all_reduce was not the number of ranks)" % wrong)
    peak = max((float(row["busbw_gbps"]) for row in rows), default=None)
    return {"backend": "gloo", "hosts": list(hosts), "ranks": len(hosts), "rows": rows, "interfaces": interfaces,
            "errors": errors, "verdict": {"passed": not reasons, "reasons": reasons, "peak_busbw_gbps": peak}}


def lines(found: Mapping[str, Any]) -> list[str]:
    """What verify.yml shows of it: a headline, then one line per message size."""
    verdict = found["verdict"]
    shown = ["Gloo all_reduce across %d node(s) (%s), one rank each: peak bus bandwidth %s GB/s" % (
        found["ranks"], ", ".join(found["hosts"]), "-" if verdict["peak_busbw_gbps"] is None
        else "%.3f" % verdict["peak_busbw_gbps"])]
    if found["ranks"] == 1:
        shown.append("  one node: nothing crosses the network (bus bandwidth 0 by definition)")
    for row in found["rows"]:
        shown.append("  %12d B  %12.1f us  algbw %8.3f GB/s  busbw %8.3f GB/s" % (
            row["size_bytes"], row["time_us"], row["algbw_gbps"], row["busbw_gbps"]))
    return shown


def skipped_line(skipped: Mapping[str, str]) -> str:
    """One line naming the nodes where NCCL's bandwidth was not measured, grouped by why."""
    by_reason: dict[str, list[str]] = {}
    for host, reason in skipped.items():
        by_reason.setdefault(str(reason), []).append(str(host))
    return "NCCL bandwidth was not measured on " + "; on ".join(
        "%s: %s" % (", ".join(hosts), reason) for reason, hosts in by_reason.items())
