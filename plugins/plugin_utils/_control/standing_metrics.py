# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Each node's standing in the fleet and its last health check, as Prometheus metrics for the node's own node
exporter (textfile collector): where it is decided what gpufleet tells Prometheus of a node between jobs.

Two files per node, each written whole into the node's textfile folder (gpufleet_metrics_dir) by the module
gpufleet.cluster.node_metrics, so that every series carries the node's scrape labels (``node``):

- ``gpufleet_node_standing.prom`` (``standing()``): in service, in maintenance or quarantined, and the hardware
  faults counted toward quarantine, by class; written by health.yml and fleet.yml's release (the controller's
  history, history.standing(), is where the standing is decided).
- ``gpufleet_node_health.prom`` (``health()``): the last health check's time, result, findings by class and verdict,
  and each GPU's NVLink links that were down while others were up; written by health.yml.

A quarantine that a job's faults bring about (train.yml), and maintain.yml's steps, show here at the next health.yml
or fleet.yml run. The alert rules that read these: roles/prometheus/files/gpufleet.rules.yml (group
gpufleet-fleet)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_metrics import metric_label, metric_number
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import gpu_gate, health_check, history

STANDING_FILE = "gpufleet_node_standing.prom"
HEALTH_FILE = "gpufleet_node_health.prom"
# The history's states, as label values.
STATES = {history.IN_SERVICE: "in_service", history.IN_MAINTENANCE: "in_maintenance",
          history.QUARANTINED: "quarantined"}
RESULTS = {health_check.PASSED: "passed", health_check.WARNED: "warned", health_check.REFUSED: "refused"}


def _gauge(name: str, text: str, samples: list[tuple[dict[str, object], float]]) -> list[str]:
    lines = ["# HELP %s %s" % (name, text), "# TYPE %s gauge" % name]
    for labels, value in samples:
        shown = ",".join('%s="%s"' % (key, metric_label(label)) for key, label in labels.items())
        lines.append("%s%s %s" % (name, "{%s}" % shown if shown else "", metric_number(value)))
    return lines


def standing(entry: Mapping[str, Any], after: int) -> str:
    """A node's standing (an entry of history.standing()) as Prometheus text."""
    faults = list(entry.get("faults") or [])
    lines = _gauge("gpufleet_node_state", "The node's standing in gpufleet's history, 1 for the state it is in: in "
                   "service, in maintenance (maintain.yml) or quarantined (train.yml places no job on it).",
                   [({"state": label}, int(entry.get("state") == state)) for state, label in STATES.items()])
    lines += _gauge("gpufleet_node_hardware_faults", "The node's hardware faults counted toward its quarantine "
                    "(within gpufleet_quarantine_window, since its last release), by class.",
                    [({"class": klass}, sum(1 for fault in faults if fault.get("class") == klass))
                     for klass in history.HARDWARE_CLASSES])
    lines += _gauge("gpufleet_node_quarantine_after", "How many hardware faults quarantine the node "
                    "(gpufleet_quarantine_after).", [({}, after)])
    return "\n".join(lines) + "\n"


def _count(check: health_check.NodeCheck, klass: str, refused: bool) -> int:
    return sum(1 for finding in check.findings.get(klass) or [] if finding.refuse == refused)


def health(check: health_check.NodeCheck, at: float, probe: Mapping[str, Any] | None = None) -> str:
    """A node's health check (health_check.judge()'s) as Prometheus text; '' for a node not checked."""
    if check.result not in RESULTS:
        return ""
    lines = _gauge("gpufleet_node_health_check_timestamp_seconds", "When the node's last health check ran "
                   "(health.yml).", [({}, round(at, 3))])
    lines += _gauge("gpufleet_node_health_check_result", "The last health check's result, 1 for it: passed, warned "
                    "(it may run jobs) or refused (a launch's gate would refuse it).",
                    [({"result": label}, int(check.result == result)) for result, label in RESULTS.items()])
    lines += _gauge("gpufleet_node_health_check_findings", "What the last health check found, by class (gpu, "
                    "network) and verdict (refused, warned).",
                    [({"class": klass, "verdict": verdict}, _count(check, klass, verdict == "refused"))
                     for klass in ("gpu", "network") for verdict in ("refused", "warned")])
    health = (probe or {}).get("gpu_health") or {}
    # A GPU with no link up has no count nvidia-smi gives: left out rather than read as 0 (the check names it).
    down = {index: links for index, links in gpu_gate.nvlink_down(health).items()
            if not health["nvlink"][index].get("all_inactive")}
    if down:
        lines += _gauge("gpufleet_node_nvlink_links_down", "Each GPU's NVLink links that were down at the last "
                        "health check while other links of the node's GPUs were up.",
                        [({"gpu": index}, len(links)) for index, links in down.items()])
    return "\n".join(lines) + "\n"
