#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# This file holds documentation only: the work is done by the action plugin of the same name, on the controller.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stack_report
short_description: One table of every node's GPU stack; fail when the nodes disagree
version_added: 0.1.0
description:
  - Prints a line per node (GPUs, model, driver, CUDA, NCCL, torch) from M(gpufleet.cluster.stack_facts) results.
  - Fails naming each field on which the nodes differ, with the nodes per value, and each node with fewer GPUs than
    its inventory's C(gpufleet_gpus).
  - A second table shows each node's NVIDIA services (Fabric Manager's version and state, persistence mode, and the
    path GPUDirect RDMA takes, C(peermem), C(DMA-BUF) or why neither); it fails naming the node whose Fabric Manager
    is not the driver's version, or whose NVSwitches need Fabric Manager while it is not running.
  - With O(dcgm), a third table shows DCGM's diagnostic per node and GPU (result, the tests not passed, DCGM's
    message); it fails naming the node and GPU of each failed result, each node whose diagnostic gave no result,
    and each node of O(dcgm_required) without DCGM. Warnings are shown, not failed on.
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - gpufleet.cluster.attributes.controller
options:
  results:
    description: Node name to its M(gpufleet.cluster.stack_facts) result.
    type: dict
    required: true
  expected_gpus:
    description: Node name to the number of GPUs it should have (null for no expectation).
    type: dict
  dcgm:
    description: Node name to its M(gpufleet.cluster.dcgm_diag) result (a skipped task's result shows C(not run)).
    type: dict
  dcgm_required:
    description: Node name to whether it must have DCGM (its C(dcgm_enabled)).
    type: dict
  acknowledged:
    description: Node name to its C(gpufleet_xids_acknowledged_before) (XIDs logged before it do not count).
    type: dict
  xid_check_required:
    description: Node name to its C(gpufleet_xid_check_required) (a kernel log that cannot be read fails the node).
    type: dict
  ib_rate:
    description: Node name to its C(gpufleet_ib_rate_gbps) (the rate its network ports in use should run at; a port below it is warned of).
    type: dict
"""

EXAMPLES = r"""
- name: Compare the nodes
  gpufleet.cluster.stack_report:
    results: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, '__verify_stack'))) }}"
  run_once: true
"""

RETURN = r"""
table:
  description: The printed table, a line per item.
  returned: always
  type: list
  elements: str
services:
  description: The printed table of NVIDIA services, a line per item.
  returned: always
  type: list
  elements: str
dcgm:
  description: The printed table of DCGM's diagnostic, a line per item (empty without O(dcgm)).
  returned: always
  type: list
  elements: str
problems:
  description: Each disagreement, missing GPU, Fabric Manager problem, or GPU that failed DCGM's diagnostic.
  returned: always
  type: list
  elements: str
health:
  description:
    - The GPU health table, a line per item - what train.yml's gate would refuse or warn of on each node (from
      M(gpufleet.cluster.stack_facts)'s C(gpu_health)); a refusal fails the task, naming node, GPU and fact.
  returned: always
  type: list
  elements: str
"""
