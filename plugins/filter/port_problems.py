# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter gpufleet.cluster.port_problems: which node a job's ports do not reach (plugin_utils/_control/ports.py)."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import ports

DOCUMENTATION = r"""
name: port_problems
short_description: The node, port and protocol at fault from the port check of a launch
version_added: 0.1.0
description:
  - Reads every node's gpufleet.cluster.port_check reports (its listener's and its probe's) and returns, by host,
    the first problem of each node that has one, with the fix (the firewall rule).
options:
  _input:
    description:
      - Each host's listener report, as the M(gpufleet.cluster.port_check) module's
        O(gpufleet.cluster.port_check#module:mode=quit) returns it (RV(gpufleet.cluster.port_check#module:listener)).
    type: dict
    required: true
  probes:
    description: Each host's probe report.
    type: dict
    required: true
  master_host:
    description: The master's inventory name (the TCP rendezvous is there).
    type: str
    required: true
  port:
    description: The master port.
    type: int
    required: true
"""

EXAMPLES = r"""
- name: Fail naming the node a port does not reach
  ansible.builtin.assert:
    that: _problems | length == 0
    fail_msg: "{{ _problems.values() | join('; ') }}"
  vars:
    _problems: "{{ listeners | gpufleet.cluster.port_problems(probes, 'gpu01', 29500) }}"
"""

RETURN = r"""
_value:
  description: Host to its problem; empty when every port reached every node.
  type: dict
"""


def port_problems(listeners: Any, probes: Any, master_host: str, port: Any) -> dict[str, str]:
    return ports.port_problems(dict(listeners or {}), dict(probes or {}), str(master_host), int(port))


class FilterModule:
    """gpufleet.cluster filters."""

    def filters(self) -> dict:
        return {"port_problems": port_problems}
