# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action gpufleet.cluster.job_nodes: decide, from every node's probe, what each node runs (plugin_utils/_control/node_plan.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpufleet.cluster.plugins.modules import job_nodes as documentation
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import action_args
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import history, node_plan

display = Display()


def record_gate_faults(plan: Mapping[str, Any], faults: list[dict[str, str]]) -> list[dict[str, Any]]:
    """Append the gate's findings of the nodes' hardware to the fleet's history, each once for as long as it stands
    on the node (history.standing_faults); a history that cannot be read is said, and left as it is."""
    if not faults or not plan.get("logs_dir"):
        return []
    path = history.path_of(str(plan["logs_dir"]))
    found = [history.record(fault["node"], "fault", fault["fact"], str(plan.get("job") or ""), fault["class"],
                            fault["gpu"], run=str(plan.get("run_id") or "")) for fault in faults]
    try:
        new = history.add(path, found, history.standing_faults)
    except history.HistoryError as exc:
        display.warning("the health gate's findings were not recorded: %s" % exc)
        return []
    if new:
        display.display("Recorded in the fleet's history (%s): %s" % (path, history.said(new)))
    return new


class ActionModule(ActionBase):
    """Reads every node's probe (given, by host) and its settings (its host variables) and returns what they
    decide; changes nothing on the nodes (the fleet's history, on the controller, gets the gate's hardware
    findings)."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = action_args.validated(self, documentation.DOCUMENTATION)
        plan = args["plan"]
        hostvars = task_vars["hostvars"]
        given, diags = dict(args["probes"] or {}), dict(args["dcgm"] or {})
        hosts = list(plan["hosts"]) + list(plan.get("spare_hosts") or [])
        probes = {host: node_plan.with_diag(given[host], diags.get(host)) for host in hosts
                  if isinstance(given.get(host), Mapping) and not given[host].get("failed")
                  and not given[host].get("skipped")}
        settings = node_plan.gate_settings(
            hosts, lambda host, name, default: self._templar.template(hostvars[host].get(name, default)),
            python=str(args["python"]), container_engine=str(args["container_engine"]),
            allow_busy=bool(args["allow_busy_gpus"]))
        decided = node_plan.decide(plan, probes, settings, bool(args["force"]), args.get("slurm_answer"))
        recorded = [] if self._task.check_mode else record_gate_faults(plan, decided.gate_faults)
        result.update(changed=False, decided=decided.as_dict(), recorded=recorded)
        return result
