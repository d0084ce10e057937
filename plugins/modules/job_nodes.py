#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# This file holds documentation only: the work is done by the action plugin of the same name, on the controller.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: job_nodes
short_description: Decide, from every node's probe, what each node of a job runs, on the controller
version_added: 0.1.0
description:
  - The second half of a job's plan. Runs once on the controller after M(gpufleet.cluster.node_probe) has run on
    every node, reads all the probes (O(probes)) and decides what depends on the
    nodes - each node's first problem (container engine, training Python and torch, the interface Gloo and NCCL
    advertise, the launcher, the GPU health gate's refusals, C(nproc_per_node) against the node's GPUs, a
    rendezvous port in use), the GPU health gate's warnings, the nodes where
    the job is still running and the refusal unless O(force), each node's number of ranks (C(nproc_per_node),
    else the host's C(gpufleet_gpus), else the GPUs its probe found), the world size, the rendezvous and relaunch
    ports, and under C(scheduler=slurm) what the job asks of Slurm's nodes (from O(slurm_answer)).
  - Changes nothing on the nodes and fails on nothing itself; the role reports each node's problem on its host,
    then the job-wide refusal.
  - Appends the gate's findings of the nodes' hardware (a GPU's fault, a network port down, degraded or with error
    counters rising) to the fleet's history (C(<logs_dir>/history.jsonl) of the plan), each once for as long as it
    stands on the node, for quarantine (M(gpufleet.cluster.fleet_history)); not in check mode.
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - gpufleet.cluster.attributes.controller
options:
  plan:
    description: The job's plan, as M(gpufleet.cluster.job_plan) returned it.
    type: dict
    required: true
  probes:
    description:
      - Each host's M(gpufleet.cluster.node_probe) result, by host name (the plan's hosts and spare hosts); a host
        missing, or whose probe failed or was skipped, has no probe to decide on.
    type: dict
    default: {}
  dcgm:
    description:
      - With C(health_diag), each host's M(gpufleet.cluster.dcgm_diag) result, by host name, judged with the rest of
        its GPUs' health; a skipped one is left out.
    type: dict
    default: {}
  force:
    description: A forced relaunch stops the running job first, so it is not refused and its ports are not kept.
    type: bool
    default: false
  python:
    description: The training Python as the user named it (C(gpufleet_python)), for the messages.
    type: str
    default: python3
  container_engine:
    description: The container engine as the user named it (C(gpufleet_container_engine)), for the messages.
    type: str
    default: docker
  allow_busy_gpus:
    description: A GPU the job takes that another process holds is let through (shared) instead of refused.
    type: bool
    default: false
  slurm_answer:
    description:
      - Under C(scheduler=slurm), the result of C(scontrol --oneliner show node) run on the master (a command
        task's registered result, run with C(failed_when=false)).
    type: dict
seealso:
  - module: gpufleet.cluster.job_plan
  - module: gpufleet.cluster.node_probe
  - module: gpufleet.cluster.launch
"""

EXAMPLES = r"""
- name: Decide what every node's probe says
  gpufleet.cluster.job_nodes:
    plan: "{{ __job_plan.plan }}"
    probes: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'probe'))) }}"
    force: "{{ job_force }}"
  run_once: true
  register: __job_nodes
"""

RETURN = r"""
decided:
  description: What the probes decided.
  returned: success
  type: dict
  contains:
    problems:
      description: Each host's first problem, by host; absent for a host without one.
      type: dict
    running_hosts:
      description: The hosts where the job is still running, in rank order.
      type: list
      elements: str
    refusal:
      description:
        - Why the job is not launched, or empty - it still runs and O(force) is false; else, under
          C(scheduler=slurm), what Slurm cannot run as asked (no Slurm client, slurmctld does not answer, a node
          Slurm does not know or will not run, more CPUs or GPUs than Slurm gives a node, job folders that differ).
      type: str
    nproc:
      description: Each host's number of ranks.
      type: dict
    slots:
      description: The number of ranks of each node in rank order.
      type: list
      elements: int
    world_size:
      description: The number of ranks in all.
      type: int
    master_port:
      description: The rendezvous port (0 under Slurm when not given - node 0 picks it when the job starts).
      type: int
    restart_ports:
      description: The rendezvous ports of the relaunches (C(max_restarts)); empty under Slurm.
      type: list
      elements: int
    check_ports:
      description:
        - Whether the job's ports are checked between the nodes before launch; not with O(plan)'s C(port_check)
          C(remembered) where every node's probe remembers a pass on the port for the same nodes and master within
          its TTL.
      type: bool
    port_check_note:
      description: Why the port check runs or is skipped (empty where it is not for this launch).
      type: str
    slurm:
      description: What the job asks of Slurm (C(problem), C(slurm_nodes), C(cpus_per_node), C(gpus_per_node)),
        or null when not under Slurm.
      type: dict
    gpu_warnings:
      description: The health gate's warnings (a narrow PCIe link, clocks held down; a network port trained at a lower
        rate, an error counter that rose), by host.
      type: dict
    no_gpu:
      description: The hosts with no GPU to check (no nvidia-smi and none on the PCI bus).
      type: list
      elements: str
    slurm_drain:
      description:
        - Under C(scheduler=slurm), the Slurm nodes whose GPUs the health gate refuses, to drain - C(name) (Slurm's
          NodeName), C(host) and C(reason) (C(gpufleet:) and the first fault).
      type: list
      elements: dict
    spares:
      description: The spares that stand by, as C([host, ip]) in order - those of the plan's without a problem.
      type: list
      elements: list
    spare_problems:
      description: Why each other spare of the plan is left out (its first problem, read as a node's), by host.
      type: dict
    gate_faults:
      description:
        - The gate's findings of the nodes' hardware that the fleet's history counts - C(node), C(class) (C(gpu) or
          C(network)), C(gpu) (the GPU or port) and C(fact).
      type: list
      elements: dict
recorded:
  description: The fault records appended to the fleet's history (those of RV(decided.gate_faults) not already standing).
  returned: success
  type: list
  elements: dict
"""
