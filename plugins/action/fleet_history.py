# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action gpufleet.cluster.fleet_history: each node's standing in the fleet's history; a quarantined node released."""

from __future__ import annotations

import os
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpufleet.cluster.plugins.modules import fleet_history as documentation
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import action_args
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import history, standing_metrics

display = Display()


class ActionModule(ActionBase):
    """Runs once on the controller."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        args = action_args.validated(self, documentation.DOCUMENTATION)
        path = history.path_of(os.path.abspath(os.path.expanduser(str(args["logs_dir"]))))
        nodes = [str(node) for node in args["nodes"]]
        window = str(args["quarantine_window"])
        try:
            records, after, window_s = history.load(path, args["quarantine_after"], window)
            released = history.release(records, str(args["release"]), nodes, after, window_s) if args["release"] else None
        except history.HistoryError as exc:
            result.update(failed=True, msg=str(exc), history=path)
            return result
        if released:
            if not self._task.check_mode:
                history.append(path, [released])
            records.append(released)
        standing = history.standing(records, nodes, after, window_s)
        display.display("The fleet's history (%s), hardware faults within %s, %d quarantine a node%s\n%s"
                        % (path, window, after, " (check mode: the release as it would be; nothing recorded)"
                           if released and self._task.check_mode else "", history.standing_table(standing)))
        result.update(changed=bool(released), nodes=standing, released=released, history=path,
                      metrics={released["node"]: {standing_metrics.STANDING_FILE: standing_metrics.standing(
                          standing[released["node"]], after)}} if released else {})
        return result
