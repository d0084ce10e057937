#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# This file holds documentation only: the work is done by the action plugin of the same name, on the controller.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: health_check
short_description: Judge every node's health between jobs by the launch's gate, and record it in the fleet's history
version_added: 0.1.0
description:
  - Runs once on the controller after M(gpufleet.cluster.node_probe) (and, where DCGM is installed,
    M(gpufleet.cluster.dcgm_diag)) ran on every node. Judges each node as train.yml's health gate does (its GPUs, its
    network ports in use, its settings), except that a GPU held by a process is not refused, since a job may run.
  - Each node passes, is warned of, or is refused; a node whose probe failed or did not answer is not checked.
  - Appends to the fleet's history (C(<logs_dir>/history.jsonl)) each finding of a node's hardware (a GPU's fault,
    a network port down, degraded or with error counters rising), once for as long as it stands on the node, and one
    check record per node (its result, GPUs and driver, which M(gpufleet.cluster.fleet_history) shows). Not in check
    mode.
  - Prints one table (node, result, GPUs, driver, each finding, the node's standing in the history after this
    check); the playbook fails the refused nodes with their messages.
  - Where a check is judged, C(plugins/plugin_utils/_control/health_check.py); where quarantine is decided,
    C(plugins/plugin_utils/_control/history.py).
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - gpufleet.cluster.attributes.controller
options:
  hosts:
    description: The nodes checked, in inventory order.
    type: list
    elements: str
    required: true
  probes:
    description: Each host's M(gpufleet.cluster.node_probe) result, by host; a host missing, failed or unreachable is not checked.
    type: dict
    default: {}
  dcgm:
    description: Each host's M(gpufleet.cluster.dcgm_diag) result, by host (skipped or absent where DCGM is not installed).
    type: dict
    default: {}
  dcgm_level:
    description:
      - C(health_dcgm_level) where the user gave it. A node without DCGM is warned of only then; by default its
        diagnostic runs where DCGM is installed and a node without DCGM is not held to it.
    type: int
  logs_dir:
    description: The controller's logs folder (C(gpufleet_logs_dir)), where the fleet's history is.
    type: path
    required: true
  quarantine_after:
    description: How many hardware faults within O(quarantine_window) quarantine a node (C(gpufleet_quarantine_after)).
    type: raw
    default: 3
  quarantine_window:
    description: How far back faults count, seconds or a number with s, m, h, d or w (C(gpufleet_quarantine_window)).
    type: raw
    default: 7d
seealso:
  - module: gpufleet.cluster.fleet_history
  - module: gpufleet.cluster.node_probe
"""

EXAMPLES = r"""
- name: Judge and record every node's health
  gpufleet.cluster.health_check:
    hosts: "{{ ansible_play_hosts_all }}"
    probes: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, '__probe'))) }}"
    logs_dir: logs
  run_once: true
"""

RETURN = r"""
results:
  description: Per host, C(result) (C(passed), C(warned), C(refused) or C(not checked)), C(summary) and C(findings) (each a message naming the host).
  returned: success
  type: dict
refused:
  description: Each refused host's refusals, one a line.
  returned: success
  type: dict
recorded:
  description: The fault records appended to the fleet's history.
  returned: success
  type: list
  elements: dict
quarantined:
  description: The checked hosts quarantined after this check.
  returned: success
  type: list
  elements: str
metrics:
  description:
    - Per checked host, the files M(gpufleet.cluster.node_metrics) writes for its node exporter, by name, in
      Prometheus's text format (C(plugin_utils/_control/standing_metrics.py)) - C(gpufleet_node_standing.prom), its
      standing after this check, and C(gpufleet_node_health.prom), this check's result and findings ('' for a host
      not checked).
  returned: success
  type: dict
table:
  description: The table printed, as lines.
  returned: success
  type: list
  elements: str
history:
  description: The fleet's history file.
  returned: always
  type: str
"""
