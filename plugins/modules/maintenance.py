#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# This file holds documentation only: the work is done by the action plugin of the same name, on the controller.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: maintenance
short_description: Plan a rolling maintenance, and record each node taken out of and put back in service
version_added: 0.1.0
description:
  - The controller's part of C(playbooks/maintain.yml), one step per call.
  - O(step=plan) checks O(batch) against the nodes and spares (a number of nodes or a whole percentage, as Ansible's
    C(serial) reads it; 0 or more than the nodes is refused), refuses a spare that stands in for a lost node in a
    running job, and prints what each batch will do (spares first, then the nodes, in the inventory's order; the
    jobs that hold each node, waited for or stopped). Nothing is changed or recorded.
  - O(step=begin) records each host of the batch as out of service for maintenance in the fleet's history
    (C(<logs_dir>/history.jsonl)); M(gpufleet.cluster.job_plan) then places no job on it (a spare takes its place,
    or the launch is refused naming why).
  - O(step=end) records each host back in service, or, for a host in O(refused), that it failed its check after
    the change and stays out of service with the reason; it prints the run's table (each node back, failed, out,
    or not reached) and returns the hosts that failed.
  - Check mode records nothing.
  - Where the batches and records are decided, C(plugins/plugin_utils/_control/maintenance.py).
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - gpufleet.cluster.attributes.controller
options:
  step:
    description: C(plan), C(begin) or C(end), as above.
    type: str
    choices: [plan, begin, end]
    required: true
  logs_dir:
    description: The controller's logs folder (C(gpufleet_logs_dir)), where the fleet's history is.
    type: path
    required: true
  what:
    description: What the maintenance changes, in a few words, for the history and the table.
    type: str
    default: provision.yml's roles
  run:
    description: The run's id, as O(step=plan) returned it (O(step=begin) and O(step=end)).
    type: str
    default: ""
  nodes:
    description: The nodes (C(gpu_nodes)), in order (O(step=plan); O(step=end) shows them all in its table).
    type: list
    elements: str
    default: []
  spares:
    description: The spares (C(gpu_spares)), in order; maintained first (O(step=plan) and O(step=end)).
    type: list
    elements: str
    default: []
  batch:
    description: C(maintain_batch), a number of nodes or a whole percentage of them (O(step=plan)).
    type: raw
    default: 1
  reboot:
    description:
      - C(maintain_reboot) (O(step=plan)), checked and returned for the batches' steps; C(auto) reboots a node
        where its change needs it, C(always) every node, C(never) none.
      - A raw value, so that a wrong one is refused naming C(maintain_reboot) before any change.
    type: raw
    default: auto
  wait_s:
    description: C(maintain_wait_s) (O(step=plan)), how long a node's jobs are waited for, in whole seconds; checked
      and returned for the batches' steps.
    type: raw
    default: 3600
  jobs:
    description: Each host's M(gpufleet.cluster.job_status) result, by host (O(step=plan)).
    type: dict
    default: {}
  stop_jobs:
    description: C(maintain_stop_jobs), whether the jobs on a node are stopped rather than waited for (O(step=plan)).
    type: bool
    default: false
  hosts:
    description: The hosts of this batch (O(step=begin) and O(step=end)).
    type: list
    elements: str
    default: []
  refused:
    description: The batch's hosts whose check failed after the change, each with why (O(step=end)).
    type: dict
    default: {}
seealso:
  - module: gpufleet.cluster.health_check
  - module: gpufleet.cluster.fleet_history
"""

EXAMPLES = r"""
- name: Plan the maintenance (refuses a bad batch before any change)
  gpufleet.cluster.maintenance:
    step: plan
    logs_dir: logs
    nodes: "{{ groups['gpu_nodes'] }}"
    spares: "{{ groups['gpu_spares'] | default([]) }}"
    batch: "{{ maintain_batch | default(1) }}"
  run_once: true
  register: __plan
"""

RETURN = r"""
run:
  description: The run's id (O(step=plan)), kept in each record of the run.
  returned: success
  type: str
batches:
  description: The hosts of each batch, in order (O(step=plan)).
  returned: success
  type: list
  elements: list
recorded:
  description: The records appended to the fleet's history (none in check mode).
  returned: success
  type: list
  elements: dict
failed_hosts:
  description: The hosts that failed their check, each with why (O(step=end)).
  returned: success
  type: dict
what:
  description: O(what), for the steps that follow (O(step=plan)).
  returned: success
  type: str
reboot:
  description: O(reboot), checked, for the steps that follow (O(step=plan)).
  returned: success
  type: str
wait_s:
  description: O(wait_s) in seconds, checked, for the steps that follow (O(step=plan)).
  returned: success
  type: int
plan:
  description: The plan printed (O(step=plan)), as lines.
  returned: success
  type: list
  elements: str
table:
  description: The table printed (O(step=end)), as lines.
  returned: success
  type: list
  elements: str
history:
  description: The fleet's history file.
  returned: always
  type: str
"""
