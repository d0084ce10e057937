#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# This file holds documentation only: the work is done by the action plugin of the same name, on the controller.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_history
short_description: Show each node's standing in the fleet's history of faults, and release a quarantined node
version_added: 0.1.0
description:
  - Reads the fleet's history (C(<logs_dir>/history.jsonl), append-only JSON lines that M(gpufleet.cluster.job_report)
    writes) and prints one line per node of O(nodes), in service or quarantined, with its hardware faults within
    O(quarantine_window) since its last release and its last fault.
  - With O(release), appends a release record for that node, which returns it to service (train.yml places jobs on
    it again); refused, with nothing written, when the node is not in O(nodes) or not quarantined.
  - A history line that is not a JSON record is refused naming the file and the line; the file is never rewritten.
  - Where quarantine is decided, and which faults count, C(plugins/plugin_utils/_control/history.py).
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - gpufleet.cluster.attributes.controller
options:
  logs_dir:
    description: The controller's logs folder (C(gpufleet_logs_dir)), where the history is.
    type: path
    required: true
  nodes:
    description: The inventory's nodes and spares, in order.
    type: list
    elements: str
    required: true
  release:
    description: A quarantined node to return to service.
    type: str
  quarantine_after:
    description: How many hardware faults within O(quarantine_window) quarantine a node (C(gpufleet_quarantine_after)).
    type: raw
    default: 3
  quarantine_window:
    description: How far back faults count, seconds or a number with s, m, h, d or w (C(gpufleet_quarantine_window)).
    type: raw
    default: 7d
"""

EXAMPLES = r"""
- name: The fleet's standing, and node7 returned to service
  gpufleet.cluster.fleet_history:
    logs_dir: logs
    nodes: "{{ groups['gpu_nodes'] }}"
    release: node7
  run_once: true
"""

RETURN = r"""
nodes:
  description: Per node, C(state) (C(in service) or C(quarantined)), C(faults) (the hardware faults counted) and C(last).
  returned: always
  type: dict
released:
  description: The release record written (in check mode, that would be), or null.
  returned: always
  type: dict
metrics:
  description:
    - The released node's standing as M(gpufleet.cluster.node_metrics) writes it for its node exporter
      (C(gpufleet_node_standing.prom), C(plugin_utils/_control/standing_metrics.py)), by node; empty without
      O(release).
  returned: always
  type: dict
history:
  description: The history file.
  returned: always
  type: str
"""
