#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# This file holds documentation only: the work is done by the action plugin of the same name.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: job_wait
short_description: Wait for a job's part on a node and return how it ended
version_added: 0.1.0
description:
  - Polls the node's job until it ends, and returns the node's final result, read with
    M(gpufleet.cluster.job_status). Each poll while the job runs is one POSIX shell command (C(cat) and C(tail) of
    the job's files), read on the controller as M(gpufleet.cluster.job_status) reads them, so that no Python starts
    on the node every O(poll_s); when a node's answer is not understood, M(gpufleet.cluster.job_status) polls it.
  - All nodes of the job run this task at once, each reading its own node only. The wait stops nothing because
    of another node - the nodes' supervisors are the job's one fail-fast authority - they hear each other's
    heartbeats and stop their parts when another part failed, hung or its node was lost, attached or detached;
    a part stopped so is reported as stopped for that node, not failed. A node that does not answer
    O(max_misses) polls in a row is reported unreachable.
  - On Ctrl-C (the gpufleet.cluster.interrupt callback), stops the node's part with M(gpufleet.cluster.job_stop).
  - With O(progress), prints the last line of the node's log every O(progress_s) seconds when it changed.
  - The task itself never fails because the job failed; M(gpufleet.cluster.job_report) decides after the logs are fetched.
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - gpufleet.cluster.job_folder
attributes:
  check_mode:
    support: none
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
  action:
    support: full
    details: The loop runs on the controller; each poll runs one shell command on the node.
  async:
    support: none
  bypass_host_loop:
    support: none
options:
  job:
    description: Job name.
    type: str
    required: true
  node_rank:
    description: The node's rank, for the report.
    type: int
  poll_s:
    description:
      - Seconds between polls of the progress node, and of any node whose part is not running steadily.
      - Where the gpufleet.cluster.interrupt callback is enabled, a node whose part runs steadily (running, standing
        by or queued, the same attempt) is polled five times less often while nothing changes. The wait that sees a
        node's part change (a new state or attempt, a missed poll, the end) tells every other node's wait, which then
        polls at once, and every O(poll_s) for a while. Without the callback, every node is polled every O(poll_s).
    type: float
    default: 2
  progress:
    description: Print the last line of the node's log as it changes.
    type: bool
    default: false
  progress_s:
    description: Seconds between progress lines.
    type: float
    default: 5
  max_misses:
    description: Failed polls in a row after which the node counts as unreachable.
    type: int
    default: 3
  tail:
    description: Log lines to return at the end.
    type: int
    default: 30
  dump_stacks:
    description:
      - On Ctrl-C, take every rank's Python stack before the ranks are stopped (M(gpufleet.cluster.job_stop)'s
        O(gpufleet.cluster.job_stop#module:dump_stacks)); the wait of train.yml sets it from C(-e dump_stacks=true).
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Wait for the job
  gpufleet.cluster.job_wait:
    job: llama-ft
    progress: "{{ inventory_hostname == ansible_play_hosts[0] }}"
  register: __job_wait
"""

RETURN = r"""
job_result:
  description: The node's final state (see M(gpufleet.cluster.job_status)), with C(host) and C(node_rank); when
    the supervisors stopped the part for another node's failure, C(stopped_for) names that node.
  returned: always
  type: dict
polls:
  description: How the node was read while waiting. C(shell) counts the one-command polls, C(job_status) the
    module's runs (the final read, and every poll after a shell answer that was not understood, which is also
    warned about).
  returned: always
  type: dict
  sample: {"shell": 14, "job_status": 1}
"""
