# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action gpufleet.cluster.stack_report: one table of every node's GPU stack; fail when the nodes disagree."""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpufleet.cluster.plugins.modules import stack_report as documentation
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import action_args
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._verify import verify

display = Display()


class ActionModule(ActionBase):
    """Runs once on the controller with every node's gpufleet.cluster.stack_facts result."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        args = action_args.validated(self, documentation.DOCUMENTATION)
        results = {str(host): dict(facts) for host, facts in args["results"].items()}
        table = verify.stack_table(results)
        services = verify.services_table(results)
        dcgm = {str(host): dict(diag or {}) for host, diag in (args["dcgm"] or {}).items()}
        shown = "GPU stack on %d node(s)\n%s\n\nNVIDIA services\n%s" % (len(results), table, services)
        dcgm_table = verify.dcgm_table(dcgm) if dcgm else ""
        if dcgm:
            shown += "\n\nDCGM diagnostic, per GPU\n%s" % dcgm_table
        findings = verify.health_findings(results, dict(args["expected_gpus"] or {}), dict(args["acknowledged"] or {}),
                                          dict(args.get("xid_check_required") or {}), dict(args.get("ib_rate") or {}))
        health = verify.health_table(findings, results)
        shown += "\n\nGPU and network port health (what train.yml's gate would refuse or warn of)\n%s" % health
        display.display(shown)
        problems = verify.stack_problems(results, dict(args["expected_gpus"] or {}))
        problems += verify.services_problems(results)
        problems += verify.dcgm_problems(dcgm, dict(args["dcgm_required"] or {}))
        problems += [finding.message(host) for host, found in findings.items() for finding in found if finding.refuse]
        result.update(changed=False, table=table.splitlines(), services=services.splitlines(),
                      dcgm=dcgm_table.splitlines(), health=health.splitlines(), problems=problems)
        if problems:
            result.update(failed=True, msg="; ".join(problems))
        return result
