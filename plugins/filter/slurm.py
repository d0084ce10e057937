# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters gpufleet.cluster.slurm_conf, gpufleet.cluster.gres_conf and gpufleet.cluster.slurm_health_check: Slurm's
configuration files for the nodes, and its HealthCheckProgram."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import node_program, slurm_health
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._provision import slurm

DOCUMENTATION = r"""
name: slurm
short_description: Slurm's slurm.conf (slurm_conf) and gres.conf (gres_conf) for the node group
version_added: 0.1.0
description:
  - C(slurm_conf) renders slurm.conf, the same text for every node. C(SlurmctldHost) is the controller's
    hostname with its cluster address; each node gets one C(NodeName) line in inventory order, with
    C(NodeHostname) when the hostname differs from the inventory name, C(NodeAddr), the counts C(slurmd -C)
    printed on that node, and C(Gres=gpu:N) where it has GPUs; one partition holds every node.
  - Fails naming the host and the variable when a name is one Slurm rejects, the controller is not a node, or
    C(slurmd -C) said too little.
  - C(gres_conf) renders one node's gres.conf from the same node dict (its input), one C(File=/dev/nvidia<i>)
    line per GPU; it takes no options.
  - C(slurm_health_check) renders Slurm's C(HealthCheckProgram) for a node, its input the node's python3 (a path) -
    the launch's GPU and network port health gate as one program with nothing of the collection installed, which
    drains the node it refuses with the fault as reason (C(plugins/plugin_utils/_control/slurm_health.py)); it
    takes no options.
options:
  _input:
    description: One dict per node, in inventory order, with C(name), C(hostname), C(address), C(slurmd_c) (the
      output of C(slurmd -C)) and C(gpus).
    type: list
    elements: dict
    required: true
  controller:
    description: The inventory name of the node that runs slurmctld.
    type: str
    required: true
  cluster_name:
    description: Slurm's ClusterName.
    type: str
    default: gpufleet
  partition:
    description: The name of the one partition.
    type: str
    default: gpufleet
  settings:
    description: Other slurm.conf keys and values, in order (plugins, paths, ports).
    type: dict
    default: {}
  memory_reserve_mb:
    description: MiB of each node's memory that Slurm does not hand out (taken off C(RealMemory)).
    type: int
    default: 0
"""

EXAMPLES = r"""
- name: Write slurm.conf
  ansible.builtin.copy:
    content: "{{ _slurm_nodes | gpufleet.cluster.slurm_conf(controller=groups['gpu_nodes'][0]) }}"
    dest: /etc/slurm/slurm.conf
    mode: "0644"
"""

RETURN = r"""
_value:
  description: The text of slurm.conf.
  type: str
"""


def _nodes(items: list[dict[str, Any]]) -> list[slurm.SlurmNode]:
    nodes = []
    for item in items:
        name = str(item["name"])
        nodes.append(slurm.SlurmNode(name=name, hostname=str(item["hostname"]), address=str(item["address"]),
                                     hardware=slurm.node_hardware(str(item.get("slurmd_c") or ""), name),
                                     gpus=int(item.get("gpus") or 0)))
    return nodes


def slurm_conf(items: list[dict[str, Any]], controller: str, cluster_name: str = "gpufleet",
               partition: str = "gpufleet", settings: dict[str, Any] | None = None, memory_reserve_mb: int = 0
               ) -> str:
    try:
        return slurm.slurm_conf(_nodes(items), str(controller), cluster_name=str(cluster_name),
                                partition=str(partition),
                                settings={str(k): str(v) for k, v in (settings or {}).items()},
                                memory_reserve_mb=int(memory_reserve_mb))
    except (slurm.SlurmConfigError, KeyError) as exc:
        raise AnsibleFilterError("slurm_conf: %s" % exc) from exc


def gres_conf(item: dict[str, Any]) -> str:
    node = slurm.SlurmNode(name=str(item["name"]), hostname=str(item.get("hostname") or item["name"]),
                           address=str(item.get("address") or ""), gpus=int(item.get("gpus") or 0))
    return slurm.gres_conf(node)


def slurm_health_check(python: str) -> str:
    return node_program.source(slurm_health, python=str(python or "/usr/bin/python3"))


class FilterModule:
    """gpufleet.cluster filters."""

    def filters(self) -> dict:
        return {"slurm_conf": slurm_conf, "gres_conf": gres_conf, "slurm_health_check": slurm_health_check}
