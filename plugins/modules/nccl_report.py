#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# This file holds documentation only: the work is done by the action plugin of the same name, on the controller.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nccl_report
short_description: Turn nccl-tests output into a JSON report and a PNG plot, and pass or fail it
version_added: 0.1.0
description:
  - Parses all_reduce_perf output (size, time, algbw, busbw, out-of-place and in-place, per message size; devices;
    average bus bandwidth; wrong and out-of-bounds counts) into C(<report_dir>/all_reduce_perf.json) and plots bus
    bandwidth against message size in C(<report_dir>/busbw.png).
  - Fails on wrong results, out-of-bounds values, no results, or a peak bus bandwidth below O(expected_busbw_gbps).
  - With O(pairs), summarises each node pair's peak bus bandwidth, marks pairs below 0.8 times the median as slow,
    and names the node common to all slow pairs.
  - With InfiniBand counters read before and after, reports the bytes each HCA port sent and received.
  - With O(gloo), the results of M(gpufleet.cluster.gloo_all_reduce) on every node (where some nodes have no GPU,
    so that NCCL could not run there), writes C(<report_dir>/gloo_all_reduce.json) and C(<report_dir>/gloo_busbw.png)
    and fails naming each node whose rank gave no result, or on a wrong sum. O(expected_busbw_gbps) is NCCL's
    alone, since Gloo over TCP is not held to it.
  - O(nccl_skipped) names the nodes where NCCL's bandwidth was not measured, and why; they are shown, not failed on.
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - gpufleet.cluster.attributes.controller
options:
  output:
    description: The output of all_reduce_perf across the nodes with GPUs; unset when it did not run (no node has a GPU).
    type: str
  pairs:
    description: Pair name (C(a+b)) to the output of all_reduce_perf on that pair.
    type: dict
  expected_busbw_gbps:
    description: The bus bandwidth (GB/s) the peak must reach; no bandwidth verdict when unset.
    type: float
  report_dir:
    description: Controller folder for the JSON report and the plot.
    type: path
    required: true
  ib_before:
    description: Node name to its InfiniBand HCAs (M(gpufleet.cluster.node_network) C(infiniband)) before the run.
    type: dict
  ib_after:
    description: The same after the run.
    type: dict
  gloo:
    description: Node name to its M(gpufleet.cluster.gloo_all_reduce) result (the C(async_status) result of its rank).
    type: dict
  gloo_hosts:
    description: The nodes in rank order that ran O(gloo); every one must have a result. The keys of O(gloo) by default.
    type: list
    elements: str
  nccl_skipped:
    description: Node name to why NCCL's bandwidth was not measured there (no NVIDIA GPU).
    type: dict
"""

EXAMPLES = r"""
- name: Report and judge
  gpufleet.cluster.nccl_report:
    output: "{{ __verify_all_nodes.stdout }}"
    expected_busbw_gbps: 180
    report_dir: logs/verify
  run_once: true
"""

RETURN = r"""
report_path:
  description: The JSON report of all_reduce_perf, or null when it did not run.
  returned: always
  type: str
plot_path:
  description: The PNG plot, or null when there were no results.
  returned: always
  type: str
verdict:
  description: C(passed), C(reasons), C(peak_busbw_gbps), C(avg_busbw_gbps), C(expected_busbw_gbps); null when
    all_reduce_perf did not run.
  returned: always
  type: dict
gloo:
  description: With O(gloo), C(report_path), C(plot_path) and C(verdict) (C(passed), C(reasons), C(peak_busbw_gbps))
    of the Gloo measurement; else null.
  returned: always
  type: dict
"""
