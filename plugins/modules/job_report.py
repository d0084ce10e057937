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
  - With O(logs_dir) (or O(samples_dir)), writes the same story as one page beside the logs,
    C(<logs_dir>/report.html) (returned as RV(page)), which opens from the file in a browser without a network.
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
    description:
      - Controller folder of the fetched logs; the table then shows C(<logs_dir>/<host>.log).
      - The nodes' faults the results show (a spare took a node's place, a GPU's new hardware XID) are appended to
        the fleet's history, C(history.jsonl) in the folder above O(logs_dir), which M(gpufleet.cluster.job_plan)
        reads to warn of a node, or to refuse it once quarantined.
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
      with that rank's tagged lines, the tag removed (torchrun and mpirun tag their ranks' lines; under DeepSpeed the
      node's supervisor does, from each rank's own output file).
  returned: always
  type: list
  elements: str
stacks:
  description:
    - Where each rank was when the job was stopped, grouped by frame, with the ranks that are elsewhere than the
      most named as the likely cause, and the fetched C(<node>.stacks.txt) files; when the nodes took every rank's
      stack (on a hang, or before a stop with C(dump_stacks)). Empty otherwise.
  returned: always
  type: str
  sample: "ranks 0–3, 5 in all_reduce (train.py:42), rank 4 in load_next_batch (train.py:38): rank 4 on node2 is the likely cause"
replaced:
  description: Which spare node replaced which node, from which attempt and why; empty when no spare took a place.
  returned: always
  type: str
  sample: "node3 replaced node1 (node_rank 1) from attempt 2, after: node1 lost; node3 takes node_rank 1"
left_out:
  description: Which attempt ran on fewer nodes (C(min_nodes)), without which node and why;
    empty when the gang never went on smaller.
  returned: always
  type: str
  sample: "attempt 2 ran on 2 of 3 nodes, without node2 (node_rank 2), after: node2 lost; the gang goes on without
    node2 (node_rank 2) on 2 nodes (min_nodes=2)"
last_lines:
  description:
    - With O(logs_dir), the master rank's last lines (global rank 0's, from C(<logs_dir>/ranks/rank0.log); for a
      launcher that tags no line with its rank, the master node's log without gpufleet's own lines), printed last.
  returned: always
  type: list
  elements: str
  sample: ["final test_accuracy 0.9972 world_size 2"]
page:
  description:
    - With O(logs_dir) (or O(samples_dir), for status.yml's one job), the job's story as one page,
      C(<logs_dir>/report.html), self-contained (no script, nothing loaded from elsewhere, the GPUs' picture inline,
      the logs linked beside it), its path printed; empty without either.
  returned: always
  type: str
  sample: "logs/llama-ft/report.html"
earlier_attempts:
  description:
    - With O(logs_dir), what the attempts before a restart left (each node's stacks, the flight recorder's dumps),
      fetched to C(<logs_dir>/attempt<N>/) and printed under the table; empty when they left nothing.
  returned: always
  type: str
  sample: "logs/llama-ft/attempt1/ (stacks of 2 nodes, 4 flight recorder dumps)"
flight_recorder:
  description:
    - With O(logs_dir), what the dumps of PyTorch's flight recorder fetched into C(<logs_dir>/flight_recorder/) say
      (C(said), also added to the failure message); per process group, the ranks waiting in its latest collective
      and those that never entered it, or the ranks that called different collectives at the same place; then
      torch's own analyser's verdict (C(python -m torch.distributed.flight_recorder.fr_trace)) when torch is
      importable by the controller's Python, its whole output in C(analyser) (C(fr_trace.txt)). C(dumps), the files
      read. The dumps are read as plain data only; a file that names a class or function is not read.
  returned: always
  type: dict
  sample:
    said: >-
      ranks 0–3, 5 wait in nccl:all_reduce #7 of process group default_pg at all_reduce (train.py:42); rank 4 never
      entered it (rank 4's last: #6, completed): the likely cause; torch's analyser: Not all ranks joining
      collective, sequence number: 7; group info: 0:default_pg; collective: nccl:all_reduce; missing ranks: {4}
      (logs/llama-ft/flight_recorder/fr_trace.txt) (6 dumps in logs/llama-ft/flight_recorder)
    dumps: [logs/llama-ft/flight_recorder/rank_0]
    analyser: logs/llama-ft/flight_recorder/fr_trace.txt
"""
