# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action gpufleet.cluster.health_check: every node's health between jobs judged by the launch's gate, and put in the
fleet's history (plugin_utils/_control/health_check.py)."""

from __future__ import annotations

import os
import time
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpufleet.cluster.plugins.modules import health_check as documentation
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import action_args
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import health_check, history, node_plan, standing_metrics

display = Display()


class ActionModule(ActionBase):
    """Runs once on the controller with every node's probe and DCGM diagnostic."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        args = action_args.validated(self, documentation.DOCUMENTATION)
        hosts = [str(host) for host in args["hosts"]]
        path = history.path_of(os.path.abspath(os.path.expanduser(str(args["logs_dir"]))))
        window = str(args["quarantine_window"])
        try:
            records, after, window_s = history.load(path, args["quarantine_after"], window)
        except history.HistoryError as exc:
            result.update(failed=True, msg=str(exc), history=path)
            return result
        hostvars = (task_vars or {})["hostvars"]
        settings = node_plan.gate_settings(
            hosts, lambda host, name, default: self._templar.template(hostvars[host].get(name, default)),
            python="", container_engine="")  # a GPU held by a job is allowed: health_check.judge()
        checks = health_check.judge(hosts, dict(args["probes"] or {}), dict(args["dcgm"] or {}), settings,
                                    args["dcgm_level"])
        now = time.time()
        new = health_check.records(checks, records, at=now)
        if not self._task.check_mode:
            history.append(path, new)
            records += new
        standing = history.standing(records, hosts, after, window_s)
        shown = health_check.table(checks, standing)
        display.display("Health check of %d node(s)%s; the fleet's history: %s (hardware faults within %s, %d "
                        "quarantine a node)\n%s" % (len(hosts), " (check mode: nothing recorded)"
                                                    if self._task.check_mode else "", path, window, after, shown))
        result.update(
            changed=False, table=shown.splitlines(), history=path, refused=health_check.refusals(checks),
            results={host: {"result": check.result, "summary": health_check.summary(check),
                            "findings": [finding.message(host) for finding in check.all()]}
                     for host, check in checks.items()},
            recorded=[entry for entry in new if entry["kind"] == "fault"] if not self._task.check_mode else [],
            quarantined=sorted(history.quarantined(standing)),
            metrics={host: {standing_metrics.STANDING_FILE: standing_metrics.standing(standing[host], after),
                            standing_metrics.HEALTH_FILE: standing_metrics.health(check, now,
                                                                                  (args["probes"] or {}).get(host))}
                     for host, check in checks.items()})
        return result
