# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action gpufleet.cluster.maintenance: maintain.yml's plan, and each batch taken out of and put back in service."""

from __future__ import annotations

import os
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpufleet.cluster.plugins.modules import maintenance as documentation
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import action_args
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import history, maintenance

display = Display()


class ActionModule(ActionBase):
    """Runs once per batch on the controller."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        args = action_args.validated(self, documentation.DOCUMENTATION)
        path = history.path_of(os.path.abspath(os.path.expanduser(str(args["logs_dir"]))))
        result.update(changed=False, history=path)
        try:
            records = history.read(path)  # refused, naming the line, before any change where it does not read
            if args["step"] == "plan":
                result.update(self._plan(args))
                return result
            hosts, what, run = [str(host) for host in args["hosts"]], str(args["what"]), str(args["run"])
            refused = {str(host): str(why) for host, why in dict(args["refused"] or {}).items()}
            new = (maintenance.taken_out(hosts, what, run) if args["step"] == "begin"
                   else maintenance.put_back(hosts, refused, what, run))
        except (history.HistoryError, maintenance.MaintenanceError) as exc:
            result.update(failed=True, msg=str(exc))
            return result
        if not self._task.check_mode:
            history.append(path, new)
        records += new  # in check mode, shown as it would be, not recorded
        result.update(changed=bool(new) and not self._task.check_mode, recorded=[] if self._task.check_mode else new)
        if args["step"] == "begin":
            display.display("%s: out of service for maintenance%s" % (
                ", ".join(hosts), " (check mode: nothing recorded)" if self._task.check_mode else ""))
            return result
        shown = maintenance.table(_ordered(args)[0] or hosts, records, run)
        display.display("Maintenance %s (%s)%s\n%s" % (
            run, what, " (check mode: as it would be; nothing recorded)" if self._task.check_mode else "", shown))
        result.update(failed_hosts={host: refused[host] for host in hosts if host in refused},
                      table=shown.splitlines())
        return result

    def _plan(self, args: dict) -> dict:
        hosts, spares = _ordered(args)
        size = maintenance.batch_size(args["batch"], len(hosts))
        reboot, wait_s = maintenance.reboot_choice(args["reboot"]), maintenance.wait_seconds(args["wait_s"])
        jobs = dict(args["jobs"] or {})
        refused = maintenance.refusals(spares, jobs)
        if refused:
            raise maintenance.MaintenanceError("; ".join(refused) + "; nothing was changed")
        groups = maintenance.batches(hosts, size)
        lines = maintenance.plan_lines(groups, spares, jobs, bool(args["stop_jobs"]), str(args["what"]))
        display.display("\n".join(lines + (["(check mode: nothing is changed or recorded)"]
                                           if self._task.check_mode else [])))
        return {"run": maintenance.run_id(), "batches": groups, "plan": lines, "what": str(args["what"]),
                "reboot": reboot, "wait_s": wait_s}


def _ordered(args: dict) -> tuple[list[str], list[str]]:
    """The hosts in the order they are maintained (spares first), and the spares."""
    spares = [str(host) for host in args["spares"]]
    return maintenance.order([str(host) for host in args["nodes"]], spares), spares
