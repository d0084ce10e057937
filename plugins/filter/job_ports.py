# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter gpufleet.cluster.job_ports: the launch's rendezvous and relaunch ports (plugin_utils/ports.py)."""

from __future__ import annotations

from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import ports

DOCUMENTATION = r"""
name: job_ports
short_description: The rendezvous port and the relaunch ports of a launch
version_added: 0.1.0
description:
  - The port the user gave (O(_input)), else the ports of the same job still running on the master (the launch is
    then a no-op) unless O(force), else the free ports the master's probe found.
options:
  _input:
    description: The master_port the user gave, or null.
    type: raw
    required: true
  master_probe:
    description: The master's gpufleet.cluster.node_probe result (its C(job), C(free_port) and C(free_ports)).
    type: dict
    required: true
  force:
    description: A forced relaunch (force=true) stops the running job first, so its ports are not kept.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Show the ports of this launch
  ansible.builtin.debug:
    msg: "{{ _job_plan.master_port | gpufleet.cluster.job_ports(hostvars[_job_plan.master_host]['__job_probe']) }}"
"""

RETURN = r"""
_value:
  description: C(master_port) and C(restart_ports).
  type: dict
"""


def job_ports(given: Any, master_probe: dict, force: Any = False) -> dict[str, Any]:
    return ports.job_ports(given, master_probe, boolean(force, strict=False))


class FilterModule:
    """gpufleet.cluster filters."""

    def filters(self) -> dict:
        return {"job_ports": job_ports}
