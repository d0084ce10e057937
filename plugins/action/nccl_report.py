# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action gpufleet.cluster.nccl_report: nccl-tests output to a JSON report and a PNG plot, with a verdict."""

from __future__ import annotations

import os
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpufleet.cluster.plugins.module_utils._node import netinfo
from ansible_collections.gpufleet.cluster.plugins.modules import nccl_report as documentation
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import action_args
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._verify import nccl_tests, verify

display = Display()


class ActionModule(ActionBase):
    """Runs once on the controller after all_reduce_perf ran across the nodes (and, in pairwise mode, per pair)."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        args = action_args.validated(self, documentation.DOCUMENTATION)
        expected = args["expected_busbw_gbps"]
        folder = os.path.abspath(args["report_dir"])
        report = nccl_tests.parse(args["output"])
        verdict = nccl_tests.verdict(report, expected)
        report["verdict"] = verdict
        pair_reports = {str(pair): nccl_tests.parse(str(text)) for pair, text in (args["pairs"] or {}).items()}
        if pair_reports:
            report["pairwise"] = verify.pair_summary(pair_reports)
        traffic = {}
        for host, before in (args["ib_before"] or {}).items():
            after = (args["ib_after"] or {}).get(host)
            if before and after:
                traffic[str(host)] = netinfo.ib_traffic_bytes(before, after)
        report["infiniband_traffic_bytes"] = traffic
        path = verify.write_report(folder, "all_reduce_perf", report)
        plots = {"all nodes": report} if report["rows"] else {}
        plots.update({pair: r for pair, r in pair_reports.items() if r["rows"]})
        png = verify.plot_busbw(os.path.join(folder, "busbw.png"), plots, expected) if plots else None
        lines = ["all_reduce_perf across %d rank(s) on %s: peak bus bandwidth %s GB/s, average %s GB/s%s"
                 % (report["ranks"], ", ".join(report["hosts"]) or "-", verdict["peak_busbw_gbps"],
                    verdict["avg_busbw_gbps"], "" if expected is None else ", expected %.2f GB/s" % expected)]
        if report["ranks"] == 1:
            lines.append("  one rank: bus bandwidth is 0 by definition (nothing crosses a link); peak algorithm "
                         "bandwidth %s GB/s" % nccl_tests.peak_algbw(report))
        if pair_reports:
            summary = report["pairwise"]
            for pair, peak in sorted(summary["pairs"].items()):
                lines.append("  pair %-24s peak %8.2f GB/s%s" % (pair, peak, "  SLOW" if pair in summary["slow_pairs"] else ""))
            if summary["suspect_nodes"]:
                lines.append("  every slow pair includes: %s" % ", ".join(summary["suspect_nodes"]))
        for host, ports in sorted(traffic.items()):
            lines.append("  InfiniBand on %s: %s" % (host, ", ".join("%s sent %d B, received %d B" % (
                port, t["sent"], t["received"]) for port, t in ports.items()) or "no HCA"))
        lines.append("report: %s%s" % (path, "; plot: %s" % png if png else ""))
        display.display("\n".join(lines))
        result.update(changed=False, report_path=path, plot_path=png, verdict=verdict)
        if not verdict["passed"]:
            result.update(failed=True, msg="NCCL check failed: " + "; ".join(verdict["reasons"]))
        elif report.get("pairwise", {}).get("slow_pairs"):
            result["warnings"] = ["slow node pairs: %s" % ", ".join(report["pairwise"]["slow_pairs"])]
        return result
