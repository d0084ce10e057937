# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action gpufleet.cluster.nccl_report: nccl-tests output (and, where NCCL could not run, the Gloo measurement) to a
JSON report and a PNG plot, with a verdict."""

from __future__ import annotations

import os
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpufleet.cluster.plugins.module_utils._node import netinfo
from ansible_collections.gpufleet.cluster.plugins.modules import nccl_report as documentation
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import action_args
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._verify import gloo, nccl_tests, verify

display = Display()


class ActionModule(ActionBase):
    """Runs once on the controller after all_reduce_perf ran across the nodes with GPUs (and, in pairwise mode, per
    pair), and the Gloo all_reduce across all of them where some have none."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        args = action_args.validated(self, documentation.DOCUMENTATION)
        folder = os.path.abspath(args["report_dir"])
        shown: list[str] = []
        failures: list[str] = []
        if args["nccl_skipped"]:
            shown.append(gloo.skipped_line(args["nccl_skipped"]))
        result.update(changed=False, report_path=None, plot_path=None, verdict=None, gloo=None)
        if args["output"] is not None:
            self._nccl(args, folder, shown, failures, result)
        if args["gloo"]:
            hosts = [str(host) for host in args["gloo_hosts"] or args["gloo"]]
            found = gloo.report({str(host): dict(value or {}) for host, value in args["gloo"].items()}, hosts)
            found["nccl_skipped"] = {str(host): str(why) for host, why in (args["nccl_skipped"] or {}).items()}
            path = verify.write_report(folder, "gloo_all_reduce", found)
            png = verify.plot_busbw(os.path.join(folder, "gloo_busbw.png"), {"all nodes": found}, None,
                                    title="Gloo all_reduce, one rank per node") if found["rows"] else None
            shown += gloo.lines(found) + ["report: %s%s" % (path, "; plot: %s" % png if png else "")]
            result["gloo"] = {"report_path": path, "plot_path": png, "verdict": found["verdict"]}
            if not found["verdict"]["passed"]:
                failures.append("Gloo check failed: " + "; ".join(found["verdict"]["reasons"]))
        display.display("\n".join(shown))
        if failures:
            result.update(failed=True, msg="; ".join(failures))
        return result

    @staticmethod
    def _nccl(args: dict, folder: str, shown: list[str], failures: list[str], result: dict) -> None:
        """all_reduce_perf's output (and the pairs') to all_reduce_perf.json and busbw.png, its lines and verdict."""
        expected = args["expected_busbw_gbps"]
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
        shown += lines
        result.update(report_path=path, plot_path=png, verdict=verdict)
        if not verdict["passed"]:
            failures.append("NCCL check failed: " + "; ".join(verdict["reasons"]))
        elif report.get("pairwise", {}).get("slow_pairs"):
            result["warnings"] = ["slow node pairs: %s" % ", ".join(report["pairwise"]["slow_pairs"])]
