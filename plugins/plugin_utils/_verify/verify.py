# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""verify.yml's judgements: do the nodes' stacks agree, and which node pair is slow."""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Mapping
from typing import Any

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import gpu_gate, port_health
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control.tables import text_table
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._verify import nccl_tests
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._provision.nvidia_packaging import upstream_version

FIELDS = ("gpu_count", "gpu_models", "driver", "cuda", "nccl", "torch")
TITLES = {"gpu_count": "GPUs", "gpu_models": "model", "driver": "driver", "cuda": "CUDA", "nccl": "NCCL",
          "torch": "torch"}


def _show(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(value) or "-"
    return "-" if value in (None, "") else str(value)


def stack_table(results: Mapping[str, Mapping[str, Any]]) -> str:
    """One line per node: GPUs, model, driver, CUDA, NCCL, torch."""
    return text_table(["node"] + [TITLES[f] for f in FIELDS],
                      [[host] + [_show(facts.get(f)) for f in FIELDS] for host, facts in results.items()])


def _differ(title: str, values: Mapping[str, list[str]]) -> str:
    return "the nodes' %s differ: %s" % (title, "; ".join(
        "%s on %s" % (value, ", ".join(hosts)) for value, hosts in sorted(values.items())))


def stack_problems(results: Mapping[str, Mapping[str, Any]], expected_gpus: Mapping[str, Any]) -> list[str]:
    """Each disagreement between nodes, and each node with fewer GPUs than its inventory says. The GPU stack (model,
    driver, CUDA, NCCL, torch's build) must agree among the nodes with GPUs: a node without one (a CPU, login or
    data node) has no driver and needs no CUDA or NCCL. torch's version without its build's local label (+cpu,
    +cu128) must agree across every node, since their ranks meet in one group."""
    problems = []
    gpu_hosts = [host for host, facts in results.items() if int(facts.get("gpu_count") or 0) > 0]
    differ = set()
    for field in FIELDS:
        if field == "gpu_count":
            continue
        values: dict[str, list[str]] = {}
        for host in gpu_hosts:
            values.setdefault(_show(results[host].get(field)), []).append(host)
        if len(values) > 1:
            differ.add(field)
            problems.append(_differ(TITLES[field], values))
    if len(gpu_hosts) < len(results) and "torch" not in differ:  # torch said once
        versions: dict[str, list[str]] = {}
        for host, facts in results.items():
            versions.setdefault(_show(facts.get("torch")).split("+", 1)[0], []).append(host)
        if len(versions) > 1:
            problems.append(_differ("torch (without the build's local label, +cpu or +cu128)", versions))
    for host, facts in results.items():
        wanted = expected_gpus.get(host)
        if wanted not in (None, "") and int(facts.get("gpu_count") or 0) < int(wanted):
            problems.append("%s has %d GPUs, its inventory says %d (gpufleet_gpus)" % (host, facts.get("gpu_count") or 0,
                                                                                       int(wanted)))
    return problems


def health_findings(results: Mapping[str, Mapping[str, Any]], expected_gpus: Mapping[str, Any],
                    acknowledged: Mapping[str, Any], xid_check_required: Mapping[str, Any] | None = None,
                    ib_rate: Mapping[str, Any] | None = None) -> dict[str, list[gpu_gate.Finding]]:
    """The health gate's findings on each node, as train.yml's preflight judges them: its GPUs'
    (plugin_utils/_control/gpu_gate.py, with every GPU counted as one a job takes), then its network ports'
    (port_health.py, without a reading to compare the error counters with); a bad acknowledgement time or
    gpufleet_ib_rate_gbps is the node's finding."""
    required, rates = xid_check_required or {}, ib_rate or {}
    found = {}
    for host, facts in results.items():
        found[host] = gpu_gate.judge(facts.get("gpu_health") or {}, acknowledged.get(host), expected_gpus.get(host),
                                     xid_check_required=required.get(host, False))
        found[host] += port_health.node_findings(facts.get("ib_ports") or {}, rates.get(host))
    return found


def health_table(findings: Mapping[str, list[gpu_gate.Finding]], results: Mapping[str, Mapping[str, Any]]) -> str:
    """One line per finding (node, GPU, refuse or warn, the fact), or one saying the node's GPUs are healthy."""
    rows = []
    for host, found in findings.items():
        health = results.get(host, {}).get("gpu_health") or {}
        if not found:
            rows.append([host, "-", "ok", "healthy (%d GPUs)" % len(health.get("gpus") or [])
                         if gpu_gate.has_gpus(health) else "no GPU"])
        rows += [[host, finding.gpu or "-", "refuse" if finding.refuse else "warn", finding.fact] for finding in found]
    return text_table(["node", "GPU or port", "verdict", "fact"], rows)


SERVICE_FIELDS = ("fabricmanager", "fabricmanager_state", "persistence_mode", "gpudirect_rdma")
SERVICE_TITLES = {"fabricmanager": "Fabric Manager", "fabricmanager_state": "state", "persistence_mode": "persistence",
                  "gpudirect_rdma": "GPUDirect RDMA"}


def services_table(results: Mapping[str, Mapping[str, Any]]) -> str:
    """One line per node: Fabric Manager's version and state, persistence mode, the path GPUDirect RDMA takes
    (nvidia-peermem, DMA-BUF, or why neither; stack_facts decides it on the node), and IMEX's state on multi-node
    NVLink nodes (GB200/GB300 NVL; the health gate judges it)."""
    header = ["node"] + [SERVICE_TITLES[f] for f in SERVICE_FIELDS] + ["IMEX"]
    rows = []
    for host, facts in results.items():
        rdma = facts.get("gpudirect_rdma") or ("peermem" if facts.get("peermem") else "-")
        cells = [_show(facts.get(f)) for f in SERVICE_FIELDS[:3]] + [rdma]
        if not facts.get("fabricmanager_needed") and not facts.get("fabricmanager"):
            cells[0:2] = ["not needed", "-"]
        imex = (facts.get("gpu_health") or {}).get("imex")
        rows.append([host] + cells + [imex.get("state") or "unknown" if imex else "not needed"])
    return text_table(header, rows)


def services_problems(results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Each node whose Fabric Manager is not the driver's version (without the package revision, which NVIDIA's
    repositories set differently for the two), or is needed (NVSwitches) and not running."""
    problems = []
    for host, facts in results.items():
        fabric, driver = facts.get("fabricmanager"), facts.get("driver_package")
        if fabric and driver and upstream_version(fabric) != upstream_version(driver):
            problems.append("%s: Fabric Manager %s is not the driver's version %s; they must be equal" % (
                host, fabric, driver))
        if facts.get("fabricmanager_needed") and facts.get("fabricmanager_state") != "active":
            state = facts.get("fabricmanager_state") or "unknown"
            problems.append("%s: the node has NVSwitches, so CUDA needs Fabric Manager running, but it is %s" % (
                host, "not installed" if not fabric else "not running (systemd is not this node's init)"
                if state == "no systemd" else "not running (%s)" % state))
    return problems


def _dcgm_entity(entry: Mapping[str, Any]) -> str:
    name = str(entry.get("entity") or ("GPU %s" % entry["gpu"] if entry.get("gpu") is not None else "node"))
    return name + (" (serial %s)" % entry["serial"] if entry.get("serial") else "")


def dcgm_table(results: Mapping[str, Mapping[str, Any]]) -> str:
    """One line per node and GPU: DCGM's diagnostic result, the tests not passed (those DCGM did not run among them)
    and DCGM's first message; a node without DCGM, or whose diagnostic did not run, gets one line saying so."""
    rows = []
    for host, diag in results.items():
        if diag.get("skipped"):
            rows.append([host, "-", "not run", "", ""])
            continue
        if not diag.get("present"):
            rows.append([host, "-", "no DCGM", "", ""])
            continue
        if diag.get("error"):
            rows.append([host, "-", "error", "", str(diag["error"])[:120]])
            continue
        for entry in diag.get("gpus") or []:
            not_passed = list(entry.get("failed") or []) + ["%s (not run)" % name for name in entry.get("skipped") or []]
            rows.append([host, _dcgm_entity(entry), str(entry.get("result")), ", ".join(not_passed),
                         ((entry.get("messages") or [""])[0])[:120]])
    return text_table(["node", "GPU or entity", "result", "not passed", "message"], rows)


def dcgm_problems(results: Mapping[str, Mapping[str, Any]], required: Mapping[str, Any]) -> list[str]:
    """Each GPU whose diagnostic failed (or gave a word other than Pass, Warn or Skip), naming node, GPU, tests and
    DCGM's message; each node whose diagnostic did not run; each node that should have DCGM (dcgm_enabled) and has
    none. Warnings are shown, not failed on."""
    problems = []
    for host, diag in results.items():
        if diag.get("skipped"):
            continue
        level = diag.get("level", 1)
        if not diag.get("present"):
            if required.get(host):
                problems.append("%s: dcgm_enabled is true but dcgmi is not installed; run provision.yml --tags dcgm"
                                % host)
            continue
        if diag.get("error"):
            problems.append("%s: DCGM's diagnostic (level %s) gave no result: %s" % (host, level, diag["error"]))
            continue
        for entry in diag.get("gpus") or []:
            if entry.get("result") in ("Pass", "Warn", "Skip", "Not Run"):
                continue
            messages = "; ".join(entry.get("messages") or []) or "no message"
            problems.append("%s: %s failed DCGM's diagnostic (level %s): %s: %s" % (
                host, _dcgm_entity(entry), level, ", ".join(entry.get("failed") or [str(entry.get("result"))]),
                messages))
    return problems


def pair_summary(reports: Mapping[str, Mapping[str, Any]], slow_ratio: float = 0.8) -> dict[str, Any]:
    """Peak busbw of every node pair; pairs below slow_ratio x the median are slow; a node in all slow pairs is named."""
    peaks = {pair: nccl_tests.peak_busbw(report) or 0.0 for pair, report in reports.items()}
    if not peaks:
        return {"pairs": {}, "median_gbps": None, "slow_pairs": [], "suspect_nodes": []}
    median = statistics.median(peaks.values())
    slow = sorted(pair for pair, peak in peaks.items() if peak < slow_ratio * median)
    suspects: list[str] = []
    if slow:
        members = [set(pair.split("+")) for pair in slow]
        common = set.intersection(*members)
        suspects = sorted(common)
    return {"pairs": peaks, "median_gbps": median, "slow_pairs": slow, "suspect_nodes": suspects}


def write_report(folder: str, name: str, report: Mapping[str, Any]) -> str:
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name + ".json")
    with open(path, "w") as handle:
        json.dump(report, handle, indent=2, sort_keys=True)
        handle.write("\n")
    return path


def plot_busbw(path: str, reports: Mapping[str, Mapping[str, Any]], expected: float | None = None,
               title: str = "all_reduce_perf, out-of-place") -> str:
    """A PNG of bus bandwidth against message size, one line per run (nccl-tests' rows: their out-of-place figures;
    the Gloo measurement's rows carry theirs at the top)."""
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    from matplotlib import pyplot  # pylint: disable=import-outside-toplevel

    figure, axes = pyplot.subplots(figsize=(8, 4.5))
    for label, report in reports.items():
        sizes = [row["size_bytes"] for row in report["rows"]]
        busbw = [row.get("out_of_place", row)["busbw_gbps"] for row in report["rows"]]
        axes.plot(sizes, busbw, marker="o", label=label)
    if expected is not None:
        axes.axhline(expected, color="red", linestyle="--", label="expected %.1f GB/s" % expected)
    axes.set_xscale("log", base=2)
    axes.set_xlabel("message size (bytes)")
    axes.set_ylabel("bus bandwidth (GB/s)")
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
    return path
