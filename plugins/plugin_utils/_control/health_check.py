# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Health between jobs (playbooks/health.yml): where a node's health check is judged and what it leaves in the fleet's
history.

Every node (and spare) is probed as a launch probes it (gpufleet.cluster.node_probe, with DCGM's level-1
diagnostic where DCGM is installed) and judged by the launch's own gate (node_plan.gate_findings): the same
refusals and warnings, except that a GPU held by a process is not the node's fault between jobs (a job may be
running). A node passes (nothing found), is warned of, or is refused; one that did not answer (or whose probe failed) is not checked. What
the history counts (history.py) is appended to it: each finding of the node's hardware (Finding.counts), once for as
long as it stays; and one check record per node, its result, GPUs and driver, which fleet.yml shows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import gpu_gate, history, node_plan
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control.tables import text_table

PASSED, WARNED, REFUSED, NOT_CHECKED = "passed", "warned", "refused", "not checked"


@dataclass
class NodeCheck:
    """One node's health check: its result, the gate's findings by class (gpu, network), the GPUs nvidia-smi listed
    (None without nvidia-smi) and their driver, and why it could not be checked."""

    result: str
    findings: dict[str, list[gpu_gate.Finding]] = field(default_factory=dict)
    gpus: int | None = None
    driver: str = ""
    why: str = ""

    def all(self) -> list[gpu_gate.Finding]:
        return [finding for found in self.findings.values() for finding in found]


def _answered(result: Any) -> bool:
    return isinstance(result, Mapping) and not result.get("failed") and not result.get("unreachable") \
        and not result.get("skipped")


def _diag(diag: Any, level: int | None) -> Any:
    """DCGM's diagnostic as the gate judges it: a node without DCGM is held to it only where the user asked for a
    level (health_dcgm_level); by default the diagnostic runs where DCGM is installed."""
    if not isinstance(diag, Mapping) or diag.get("present", True):
        return diag
    return dict(diag, asked_by="health_dcgm_level=%d" % level) if level else None


def judge(hosts: list[str], probes: Mapping[str, Any], diags: Mapping[str, Any], settings: node_plan.NodeSettings,
          dcgm_level: int | None = None) -> dict[str, NodeCheck]:
    """Each host's check from its probe and DCGM's diagnostic (by host), judged against its settings; a GPU held by
    a process is allowed (settings.allow_busy is set here). dcgm_level: health_dcgm_level where the user gave it."""
    settings = replace(settings, allow_busy=True)
    checks = {}
    for host in hosts:
        probe = probes.get(host)
        if not _answered(probe):
            why = str((probe or {}).get("msg") or "no answer") if isinstance(probe, Mapping) else "no answer"
            checks[host] = NodeCheck(NOT_CHECKED, why=why.strip().splitlines()[0][:200] if why.strip() else "no answer")
            continue
        probe = node_plan.with_diag(probe, _diag(diags.get(host), dcgm_level))
        found = node_plan.gate_findings(host, probe, settings, None)
        everything = found["gpu"] + found["network"]
        result = REFUSED if any(f.refuse for f in everything) else WARNED if everything else PASSED
        health = probe.get("gpu_health") or {}
        gpus = list(health.get("gpus") or [])
        checks[host] = NodeCheck(result, found, len(gpus) if health.get("nvidia_smi") else None,
                                 str(gpus[0].get("driver") or "") if gpus else "")
    return checks


def summary(check: NodeCheck) -> str:
    """The check's record in a phrase: what refused it (or the warnings, or why it was unreachable), or healthy."""
    if check.result == NOT_CHECKED:
        return "not checked: %s" % check.why
    refused = [f for f in check.all() if f.refuse]
    shown = refused or check.all()
    if not shown:
        return "healthy (%s)" % ("no GPU" if check.gpus is None else "%d GPUs" % check.gpus)
    return "; ".join(("%s: %s" % (f.gpu, f.fact)) if f.gpu else f.fact for f in shown)


def records(checks: Mapping[str, NodeCheck], held: list[Mapping[str, Any]], at: float | None = None
            ) -> list[dict[str, Any]]:
    """What to append to the fleet's history (``held``: what it holds): each hardware finding not already standing
    on the node since its release, then one check record per node."""
    faults = [history.record(host, "fault", finding.fact, klass=klass, gpu=finding.gpu, at=at)
              for host, check in checks.items() for klass, found in check.findings.items()
              for finding in found if finding.counts]
    return history.standing_faults(held, faults) + [
        history.check(host, check.result, summary(check), check.gpus, check.driver, at=at)
        for host, check in checks.items()]


def table(checks: Mapping[str, NodeCheck], standing: Mapping[str, Mapping[str, Any]]) -> str:
    """One line per finding (the node's result, GPU or port, verdict, fact) or per healthy node, with the node's
    standing in the fleet's history after this check."""
    rows = []
    for host, check in checks.items():
        state = standing.get(host) or {}
        where = "%s (%d fault%s)" % (state.get("state", "-"), len(state.get("faults") or []),
                                     "" if len(state.get("faults") or []) == 1 else "s")
        head = [host, check.result, "-" if check.gpus is None else str(check.gpus), check.driver or "-"]
        if not check.all():
            rows.append(head + ["-", "ok" if check.result == PASSED else "-", summary(check), where])
        for number, finding in enumerate(check.all()):
            # The node's cells are said on its first line only.
            rows.append((head if number == 0 else [""] * len(head))
                        + [finding.gpu or "-", "refuse" if finding.refuse else "warn", finding.fact,
                           where if number == 0 else ""])
    return text_table(["node", "result", "GPUs", "driver", "GPU or port", "verdict", "fact", "standing"], rows)


def refusals(checks: Mapping[str, NodeCheck]) -> dict[str, str]:
    """Each refused node's message, every refusal one a line (a person mends them in one visit)."""
    return {host: "\n".join(f.message(host) for f in check.all() if f.refuse)
            for host, check in checks.items() if check.result == REFUSED}
