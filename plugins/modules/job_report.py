#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# This file holds documentation only: the work is done by the action plugin of the same name, on the controller.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: job_report
short_description: Print a job's per-node summary table and fail naming the node that failed first
version_added: 0.1.0
description:
  - Prints one line per node (node, rank, state, exit code or signal, duration, log path), in rank order.
  - When a node failed, fails with a message naming the host, its node_rank, the first failed worker's global and
    local rank and its exit code or signal, and the last 30 lines of that node's log. Nodes stopped because another
    failed are shown as C(stopped (gang)), never as the cause.
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - gpufleet.cluster.attributes.controller
options:
  job:
    description: Job name.
    type: str
    required: true
  hosts:
    description: Node names in rank order, matching O(results).
    type: list
    elements: str
  results:
    description: One result per node (from M(gpufleet.cluster.job_wait), M(gpufleet.cluster.job_status) or M(gpufleet.cluster.launch)).
    type: list
    elements: dict
    required: true
  logs_dir:
    description: Controller folder of the fetched logs; the table then shows C(<logs_dir>/<host>.log).
    type: str
  samples_dir:
    description:
      - Controller folder of the nodes' fetched GPU samples (C(<host>.gpus.csv)), reported under the table with
        C(gpus.png) drawn there; O(logs_dir) when not given.
    type: str
  title:
    description: Line printed above the table.
    type: str
  show_job:
    description: Add a job column (for several jobs).
    type: bool
    default: false
  fail_on_error:
    description: Fail when a node failed.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Report
  gpufleet.cluster.job_report:
    job: llama-ft
    hosts: "{{ ansible_play_hosts }}"
    results: "{{ ansible_play_hosts | map('extract', hostvars, ['__job_wait', 'job_result']) }}"
  run_once: true
"""

RETURN = r"""
table:
  description: The printed table, one item per line.
  returned: always
  type: list
  elements: str
gpus:
  description:
    - With O(logs_dir), what the nodes' GPU samples (C(<node>.gpus.csv) there) say, printed under the table - C(lines)
      (per node, mean utilisation, peak memory, maximum temperature, seconds throttled and why, its hardware XID;
      then the likely stragglers), C(stragglers), C(nodes) and C(picture), the path of C(gpus.png) (utilisation and
      memory over time, one line per node, XIDs marked); empty lists and no picture without samples.
  returned: always
  type: dict
events_log:
  description:
    - With O(logs_dir), C(<logs_dir>/events.log), every node's supervisor events in time order (attempts and their
      ports, each rank's end, stops and their causes, hangs, stacks, lost peers, restarts), on node 0's clock as the
      heartbeats measured it; empty when no node recorded events.
  returned: always
  type: str
rank_logs:
  description:
    - With O(logs_dir), the files C(<logs_dir>/ranks/rank<N>.log) written from the fetched logs, one per rank, each
      with that rank's tagged lines, the tag removed (torchrun and mpirun tag their ranks' lines; DeepSpeed's launcher
      does not, so its jobs get none).
  returned: always
  type: list
  elements: str
"""
