# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action gpufleet.cluster.launch: the launch module's work, by its light path where it can.

The options are validated here, on the controller, against the module's own argument spec; then one shell
command runs the launch on the node from the collection's code cached there (plugin_utils/_control/cached_run.py,
module_utils/_job/cached_runner.py): no module run, whose Ansible half and the collection's code compiled out of
its zip on every run cost a node about twice the launch itself (docs/scale, issue 50). The answer is the module's:
module_utils/_job/launch_run.py is the one body of both. The module runs as Ansible would before this play knows
the node's Python (the probe's module run finds it), for a delegated or async task, and where the light path gave
no answer of its own (a warning says so).
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import launch_options
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import cached_run

ENTRY = "ansible_collections.gpufleet.cluster.plugins.module_utils._job.launch_run"


class ActionModule(ActionBase):
    """Launches one node's part of a job: the launch module's work, without a module run where it can."""

    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        result.update(cached_run.action_run(self, "gpufleet.cluster.launch", ENTRY, launch_options.argument_spec(),
                                            task_vars or {}))
        return result
