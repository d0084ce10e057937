# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Inventory gpufleet.cluster.hostfile: the nodes of a pssh host_file, an MPI or DeepSpeed hostfile, or MLP_* variables."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: hostfile
short_description: The nodes of a pssh, MPI or DeepSpeed hostfile, or of a training platform's MLP_* variables
version_added: 0.1.0
description:
  - Reads the host list you already have and makes it the group O(group) (C(gpu_nodes)) in the file's order,
    which is gpufleet's rank order. Each node gets C(ansible_host), and where the list says so C(ansible_user),
    C(ansible_port) and C(gpufleet_gpus) (the slots of an MPI or DeepSpeed hostfile, or MLP_WORKER_GPU).
  - "Formats: C(pssh) (parallel-ssh's host_file, C([user@]host[:port]) per line), C(mpi) and C(deepspeed)
    (C(host slots=N [max_slots=M]) per line), and C(mlp): no file, the variables a training platform injects
    (MLP_WORKER_NUM, MLP_WORKER_GPU, and the hosts from MLP_MPI_HOSTFILE, MLP_WORKER_ALL_HOSTS, MLP_MPI_HOSTS or
    MLP_WORKER_<i>_HOST). Blank lines and C(#) comments are ignored. C(auto) picks C(mpi) when a line has
    C(slots=), else C(pssh)."
  - A malformed list (a port that is not a number, C(slots=0), no host, a host listed twice) fails naming the
    file and the line.
  - The inventory source is a YAML file whose name ends in C(.hostfile.yml) or C(.hostfile.yaml).
author:
  - gpufleet contributors (@gpufleet)
options:
  plugin:
    description: The name of this plugin.
    required: true
    choices: [gpufleet.cluster.hostfile]
    type: str
  path:
    description: The host list, relative to the inventory source's folder when not absolute. Not used with O(format=mlp).
    type: str
  format:
    description: The host list's format.
    type: str
    default: auto
    choices: [auto, pssh, mpi, deepspeed, mlp]
  group:
    description: The group that receives the nodes, in order.
    type: str
    default: gpu_nodes
  gpus:
    description: C(gpufleet_gpus) of nodes whose line gives no slots.
    type: int
  vars:
    description: Variables for the whole group (C(ansible_user), C(gpufleet_python), ...).
    type: dict
    default: {}
"""

EXAMPLES = r"""
# inventories/lab.hostfile.yml, next to the pssh host_file hosts.txt:
#   ml@192.0.2.10
#   ml@192.0.2.11:2222
plugin: gpufleet.cluster.hostfile
path: hosts.txt
gpus: 8
vars:
  gpufleet_python: /opt/venvs/train/bin/python

# An MPI or DeepSpeed hostfile ("192.0.2.10 slots=8" lines):
# plugin: gpufleet.cluster.hostfile
# path: /etc/gpufleet/hostfile
# format: mpi

# Inside a training platform's worker, from its MLP_* variables:
# plugin: gpufleet.cluster.hostfile
# format: mlp
"""

import os

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import hostfile


class InventoryModule(BaseInventoryPlugin):
    NAME = "gpufleet.cluster.hostfile"

    def verify_file(self, path: str) -> bool:
        return super().verify_file(path) and path.endswith((".hostfile.yml", ".hostfile.yaml"))

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        fmt = self.get_option("format")
        try:
            if fmt == "mlp":
                nodes = hostfile.parse_mlp(os.environ, read_file=_read)
            else:
                source = self.get_option("path")
                if not source:
                    raise hostfile.HostfileError("%s: path is required with format %s" % (path, fmt))
                source = os.path.expanduser(source)
                if not os.path.isabs(source):
                    source = os.path.join(os.path.dirname(os.path.abspath(path)), source)
                nodes = hostfile.parse(_read(source), source, fmt)
        except (hostfile.HostfileError, OSError) as exc:
            raise AnsibleParserError(str(exc)) from exc
        group = self.inventory.add_group(self.get_option("group"))
        for name, node in zip(hostfile.inventory_names(nodes), nodes):
            self.inventory.add_host(name, group=group)
            for key, value in hostfile.host_vars(node, self.get_option("gpus")).items():
                self.inventory.set_variable(name, key, value)
        for key, value in (self.get_option("vars") or {}).items():
            self.inventory.set_variable(group, key, value)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()
