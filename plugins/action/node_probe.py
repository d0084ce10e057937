# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action gpufleet.cluster.node_probe: the probe module's read, by its light path where it can.

As the launch's (plugins/action/launch.py): the options validated on the controller against the module's own spec,
then one shell command on the node runs module_utils/_job/probe_run.py, the one body of the module and of this
path, from the collection's code cached there (plugin_utils/_control/cached_run.py). The probe is a play's first
run on a node: the node's Python is found as Ansible finds it for the module (its interpreter discovery, and the
fact returned as a module run returns it).
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import probe_run
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import cached_run

ENTRY = "ansible_collections.gpufleet.cluster.plugins.module_utils._job.probe_run"


class ActionModule(ActionBase):
    """Reads what a launch on the node depends on, changing nothing, without a module run where it can."""

    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        result.update(cached_run.action_run(self, "gpufleet.cluster.node_probe", ENTRY, probe_run.argument_spec(),
                                            task_vars or {}, discover=True))
        return result
