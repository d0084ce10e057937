# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Slurm's configuration for the node group, from the inventory and what each node's slurmd says of itself.
Pure functions; no Ansible imports.

- ``node_hardware()`` reads ``slurmd -C`` (the node's CPUs, sockets, cores, threads and memory, as slurmd itself
  will count them, so that no node is drained for having less than slurm.conf says);
- ``slurm_conf()`` renders slurm.conf: the controller, one NodeName line per node in inventory order, one
  partition; the same text on every node;
- ``gres_conf()`` renders a node's gres.conf: one explicit ``File=/dev/nvidia<i>`` line per GPU (Debian's NVML
  autodetection plugin is in contrib and needs NVIDIA's non-free NVML, so it is not relied on).

Names: Slurm's NodeName is the inventory name; NodeHostname is the name the node calls itself (slurmd finds its
own line by it, and slurmctld checks SlurmctldHost against it); NodeAddr is the node's cluster address, so that no
name resolution is needed between the daemons.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

HARDWARE_FIELDS = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# Settings that must not come from slurm_extra_settings: the role derives them, and a second line would win.
DERIVED = ("ClusterName", "SlurmctldHost", "NodeName", "PartitionName", "GresTypes")


class SlurmConfigError(ValueError):
    """The inventory cannot make a working slurm.conf; the message names the host and the variable."""


@dataclass(frozen=True)
class SlurmNode:
    name: str  # the inventory name: Slurm's NodeName
    hostname: str  # what the node calls itself (short): NodeHostname
    address: str  # the cluster address: NodeAddr
    hardware: dict[str, int] = field(default_factory=dict)  # slurmd -C's counts
    gpus: int = 0


def node_hardware(slurmd_c: str, host: str = "") -> dict[str, int]:
    """The counts of ``slurmd -C``'s first line (``NodeName=x CPUs=2 Boards=1 ... RealMemory=23979``)."""
    line = next((text for text in slurmd_c.splitlines() if text.startswith("NodeName=")), "")
    pairs = dict(part.split("=", 1) for part in line.split() if "=" in part)
    missing = [name for name in HARDWARE_FIELDS if not pairs.get(name, "").isdigit()]
    if missing:
        raise SlurmConfigError("%s: slurmd -C did not say %s (it printed %r)"
                               % (host or "node", ", ".join(missing), slurmd_c.strip()[:200]))
    return {name: int(pairs[name]) for name in HARDWARE_FIELDS}


def _check_name(value: str, what: str, host: str) -> str:
    if not _NAME_RE.match(value):
        raise SlurmConfigError("%s: %s %r is not a name Slurm accepts (letters, digits, '.', '_', '-')"
                               % (host, what, value))
    return value


def _node_line(node: SlurmNode, memory_reserve_mb: int) -> str:
    hardware = dict(node.hardware)
    hardware["RealMemory"] = max(1, hardware["RealMemory"] - memory_reserve_mb)
    parts = ["NodeName=%s" % node.name]
    if node.hostname != node.name:
        parts.append("NodeHostname=%s" % node.hostname)
    parts.append("NodeAddr=%s" % node.address)
    parts += ["%s=%d" % (name, hardware[name]) for name in HARDWARE_FIELDS]
    if node.gpus:
        parts.append("Gres=gpu:%d" % node.gpus)
    parts.append("State=UNKNOWN")
    return " ".join(parts)


def slurm_conf(nodes: list[SlurmNode], controller: str, cluster_name: str = "gpufleet",
               partition: str = "gpufleet", settings: dict[str, str] | None = None,
               memory_reserve_mb: int = 0) -> str:
    """slurm.conf for the nodes (inventory order), with ``controller`` (an inventory name among them) running
    slurmctld; ``settings`` are the other keys (plugins, paths), rendered in order after the derived ones."""
    if not nodes:
        raise SlurmConfigError("slurm: the node group is empty")
    by_name = {node.name: node for node in nodes}
    if controller not in by_name:
        raise SlurmConfigError("slurm_controller: %r is not one of the node group's hosts (%s)"
                               % (controller, ", ".join(by_name)))
    for node in nodes:
        _check_name(node.name, "the inventory name", node.name)
        _check_name(node.hostname, "the hostname", node.name)
    _check_name(cluster_name, "slurm_cluster_name", controller)
    _check_name(partition, "slurm_partition", controller)
    overridden = sorted(set(settings or {}) & set(DERIVED))
    if overridden:
        raise SlurmConfigError("slurm_extra_settings: %s are derived from the inventory and cannot be set there"
                               % ", ".join(overridden))
    head = by_name[controller]
    lines = [
        "# Written by gpufleet (role gpufleet.cluster.slurm) from the inventory; the same on every node.",
        "# Changes made here are overwritten: set slurm_extra_settings instead.",
        "ClusterName=%s" % cluster_name,
        "SlurmctldHost=%s(%s)" % (head.hostname, head.address),
    ]
    lines += ["%s=%s" % (key, value) for key, value in (settings or {}).items()]
    if any(node.gpus for node in nodes):
        lines.append("GresTypes=gpu")
    lines.append("")
    lines += [_node_line(node, memory_reserve_mb) for node in nodes]
    lines.append("PartitionName=%s Nodes=%s Default=YES MaxTime=INFINITE State=UP"
                 % (partition, ",".join(node.name for node in nodes)))
    return "\n".join(lines) + "\n"


def gres_conf(node: SlurmNode) -> str:
    """gres.conf for one node: its GPUs' device files, one line each (empty of GPUs: a comment only)."""
    lines = ["# Written by gpufleet (role gpufleet.cluster.slurm) from the node's GPU facts."]
    lines += ["NodeName=%s Name=gpu File=/dev/nvidia%d" % (node.name, index) for index in range(node.gpus)]
    return "\n".join(lines) + "\n"
