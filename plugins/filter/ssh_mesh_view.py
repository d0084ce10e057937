# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter gpufleet.cluster.ssh_mesh_view: the SSH mesh from every node's variables (plugin_utils/_provision/ssh_mesh.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.gpufleet.cluster.plugins.filter.cluster_nodes import cluster_nodes
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._provision.ssh_mesh import MeshNode, mesh_view

DOCUMENTATION = r"""
name: ssh_mesh_view
short_description: The SSH mesh as every node's variables make it, in one pass over the nodes
version_added: 0.1.0
description:
  - O(_input) is the mesh's hosts (the ssh_mesh role's group), in rank order. The result holds each node as the mesh
    reaches it (names, address, sshd port), the three blocks the role writes (authorized keys, known hosts, SSH
    configuration) and the files they go in, the fingerprint of the mesh a node remembers having checked, each node's
    keys as read, and whether the role has nothing to change (C(settled)) or every node has its key and client
    (C(keys_everywhere)).
  - Read from each node's variables - C(gpufleet_cluster_address) or C(ansible_host), the facts' short hostname,
    C(gpufleet_ssh_port) else C(ansible_port) else 22, and the role's reads (C(__ssh_mesh_read), else provision.yml's
    C(_gpufleet_first_read)), the key C(__ssh_mesh_user) generated and provision.yml's C(_gpufleet_read) of the role.
options:
  _input:
    description: The mesh's hosts, in rank order.
    type: list
    elements: str
    required: true
  hostvars:
    description: C(hostvars).
    type: dict
    required: true
  user:
    description: The user whose keys and configuration the mesh is (C(ssh_mesh_user)).
    type: str
    required: true
  home:
    description: That user's home (C(_ssh_mesh_home)).
    type: str
    required: true
  verify:
    description: Whether the N x N check is part of the role (C(ssh_mesh_verify)).
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: The blocks every node of the mesh gets
  ansible.builtin.debug:
    msg: "{{ (groups['gpu_nodes'] | gpufleet.cluster.ssh_mesh_view(hostvars, user='root', home='/root')).blocks }}"
"""

RETURN = r"""
_value:
  description: >-
    hosts, targets, reads, user_keys, fingerprint, blocks, wants (files and blocks), keys_everywhere, settled.
  type: dict
"""


def _get(found: Any, *keys: str) -> Any:
    """found[keys[0]][keys[1]]..., None where any of them is missing (a variable not set, a task skipped)."""
    for key in keys:
        if not isinstance(found, Mapping) or key not in found:
            return None
        found = found[key]
    return found


def _node(host: str, ip: str, found: Any) -> MeshNode:
    port = found.get("gpufleet_ssh_port", found.get("ansible_port", 22))
    mine = _get(found, "__ssh_mesh_read", "contents")
    read = mine if mine is not None else _get(found, "_gpufleet_first_read", "contents")
    return MeshNode(host=host, ip=ip, hostname=_get(found, "ansible_facts", "hostname") or host, port=int(port),
                    read=read or {}, installed=_get(found, "_gpufleet_first_read", "installed") or {},
                    made_key=_get(found, "__ssh_mesh_user", "ssh_public_key") or "",
                    drift=_get(found, "_gpufleet_read", "reads", "ssh_mesh", "drift"))


def ssh_mesh_view(hosts: Any, hostvars: Any, user: str, home: str, verify: Any = True) -> dict[str, Any]:
    nodes = [_node(node["host"], node["ip"], hostvars[node["host"]]) for node in cluster_nodes(list(hosts), hostvars)]
    return mesh_view(nodes, str(user), str(home), bool(verify))


class FilterModule:
    """gpufleet.cluster filters."""

    def filters(self) -> dict:
        return {"ssh_mesh_view": ssh_mesh_view}
