# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter gpufleet.cluster.cluster_nodes: the nodes in rank order with their cluster address resolved to an IP."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import plan

DOCUMENTATION = r"""
name: cluster_nodes
short_description: The nodes in rank order, each with its cluster address and IP
version_added: 0.1.0
description:
  - Takes the hosts of the node group in inventory order and C(hostvars), and returns one dict per node with
    C(host), C(node_rank), C(address), C(ip) and C(address_variable), resolving each cluster address
    (C(gpufleet_cluster_address), else C(ansible_host), else the name) to an IP on the controller.
  - Fails naming the host and variable when an address does not resolve, or when two nodes share an address.
options:
  _input:
    description: Host names in rank order, usually C(groups['gpu_nodes']).
    type: list
    elements: str
    required: true
  hostvars:
    description: C(hostvars).
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Map every node's address to its name
  ansible.builtin.debug:
    msg: "{{ groups['gpu_nodes'] | gpufleet.cluster.cluster_nodes(hostvars) }}"
"""

RETURN = r"""
_value:
  description: One dict per node.
  type: list
  elements: dict
"""


def cluster_nodes(hosts: list[str], hostvars: Any) -> list[dict[str, Any]]:
    def vars_of(host: str) -> dict[str, Any]:
        found = hostvars[host]
        return {key: found.get(key) for key in ("gpufleet_cluster_address", "ansible_host")}

    try:
        return plan.plan_nodes(list(hosts), vars_of)
    except plan.PlanError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    """gpufleet.cluster filters."""

    def filters(self) -> dict:
        return {"cluster_nodes": cluster_nodes}
