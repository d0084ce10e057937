#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# This file holds documentation only: the work is done by the action plugin of the same name, on the controller.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: job_plan
short_description: Check a job's launch inputs and give each node its rank, on the controller
version_added: 0.1.0
description:
  - Runs on the controller only, before any node is touched. Takes the hosts of group O(group) in inventory order,
    kept to the play's hosts (C(--limit)), as the nodes in rank order; the first is the master (node_rank 0).
  - Each node's cluster address is C(gpufleet_cluster_address), else C(ansible_host), else the inventory name; each is
    resolved to an IP literal on the controller. An address that does not resolve, or two nodes with the same
    address, fail naming the host and the variable.
  - Also checks the job name, the script (it must exist on the controller unless O(script_on_nodes)), the script's
    arguments, C(nproc_per_node), C(master_port) and the environment's variable names.
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - gpufleet.cluster.attributes.controller
options:
  job:
    description: Job name; defaults to the script's file name without its extension.
    type: str
  script:
    description: The training script, on the controller (or on the nodes with O(script_on_nodes)).
    type: str
    required: true
  script_dir:
    description: A folder to copy with the script; O(script) is then relative to it.
    type: str
  script_on_nodes:
    description: The script is already on every node at the absolute path O(script); nothing is copied.
    type: bool
    default: false
  script_args:
    description:
      - The script's arguments as one string, split like a shell does.
      - Declared C(raw) so that a list is refused with a message that shows the string form, rather than being
        turned into its text.
    type: raw
  nproc_per_node:
    description: Ranks per node (at least 1); the nodes' GPU count when unset.
    type: raw
  master_port:
    description: Rendezvous port on the master; a free one is picked when unset.
    type: raw
  wait:
    description: Whether the play waits for the job to end.
    type: bool
    default: true
  env:
    description: Environment variables for every rank.
    type: dict
  secret_env_names:
    description: The names of the secret environment variables (their values are not given here), to check them.
    type: list
    elements: str
  logs_dir:
    description: Controller folder for the fetched logs.
    type: str
    default: logs
  group:
    description: The inventory group that lists the nodes in rank order.
    type: str
    default: gpu_nodes
  spare_group:
    description:
      - The inventory group of spare nodes, in the order they are used. Each stands by while the job runs, and takes
        the node rank of a node that is lost or whose GPU fails, when a restart remains (O(max_restarts)).
      - Spares serve torchrun jobs of two nodes or more under C(scheduler=ssh) with O(max_restarts) of 1 or more;
        otherwise they are left out, said in the plan's C(spares_note). Hosts of O(group) are never spares. A missing or empty group is no spare.
    type: str
    default: gpu_spares
  supervision:
    description:
      - The supervision settings as the user gave them, checked here before any node is touched.
      - C(hang_timeout) - seconds without output on every node before the job counts as hung (a whole number >= 1);
        unset is off.
      - C(stop_grace_s) - seconds a rank has from its stop notice (C(GPUFLEET_STOP_FILE)) to SIGKILL, SIGTERM coming
        with the notice; a number from 0 to 3600, 5 when unset.
      - C(restart_on) - the causes a failed attempt is restarted on, a list or a comma-separated string - C(node_lost),
        C(hang), C(hardware_fault), C(rank_exit), or an exit code from 1 to 255; every cause when unset.
      - C(min_nodes) - the fewest nodes the job goes on with when a node is lost or faulted and no spare is left,
        from 1 to the node count (all of them when unset); below it only with O(launcher) C(torchrun) or C(none) and
        O(scheduler) C(ssh).
    type: dict
    default: {}
  health_diag:
    description:
      - The level of DCGM's diagnostic the GPU health gate runs on every node before launch (C(dcgmi diag -r LEVEL),
        1 to 4; 1 takes seconds and does not load the GPUs); C(0) or C(false) runs none, C(true) is 1.
    type: raw
    default: 0
  max_restarts:
    description: Launches of the whole gang again after a failure (a whole number from 0 to 100).
    type: raw
    default: 0
  port_check:
    description:
      - When the job's ports are checked between the nodes before launch (the master's TCP port, every node's UDP
        heartbeat port). C(remembered) checks them unless every node remembers a pass on the same port for the same
        nodes and master, younger than O(port_check_ttl_s) (and then picks that port again where it is free);
        C(always) checks them at every launch. Any other value is refused.
    type: str
    default: remembered
  port_check_ttl_s:
    description: How long, in seconds, a pass of the port check is trusted (a whole number from 0, never, to 604800).
    type: raw
    default: 3600
  launcher:
    description: What starts the ranks; see M(gpufleet.cluster.launch).
    type: str
    default: torchrun
  scheduler:
    description:
      - C(ssh) launches on every node directly. C(slurm) submits the job to the Slurm cluster the nodes belong to
        (the C(slurm) role deploys one); C(mpirun) and C(horovodrun) are refused with it.
    type: str
    default: ssh
  gpus_per_node:
    description:
      - With O(scheduler=slurm), the GPUs to ask Slurm for on each node (C(--gres=gpu:N)); unset, the node's ranks
        on a node with GPUs, none on a node without.
    type: raw
  container_image:
    description:
      - Run every node's part inside this image (e.g. C(nvcr.io/nvidia/pytorch:25.10-py3)); every node must hold
        the same image ID before anything is launched. With O(container_image_archive), one of the archive's tags
        (or unset, the archive's first tag).
    type: str
    default: ""
  container_image_archive:
    description:
      - A C(docker save)/C(podman save) archive of one image on the controller, for nodes that cannot reach a
        registry; it is copied to and loaded on the nodes that do not hold its image yet.
    type: str
    default: ""
  container_engine:
    description: The nodes' container engine.
    type: str
    default: docker
  container_pull:
    description:
      - When the nodes pull O(container_image) (without an archive) - C(missing) (where a node does not hold it),
        C(always), or C(never).
    type: str
    default: missing
seealso:
  - module: gpufleet.cluster.launch
"""

EXAMPLES = r"""
- name: Plan the job
  gpufleet.cluster.job_plan:
    script: examples/train.py
    script_args: --epochs 5
  run_once: true
  register: __job_plan
"""

RETURN = r"""
plan:
  description: The job's plan.
  returned: success
  type: dict
  contains:
    job:
      description: The job name.
      type: str
    run_id:
      description: Id of this launch, the same on every node.
      type: str
    nodes:
      description: One entry per node in rank order, with C(host), C(node_rank), C(address) and C(ip).
      type: list
      elements: dict
    master_addr:
      description: The master's IP address.
      type: str
    script_args:
      description: The script's arguments, one item per argument.
      type: list
      elements: str
    gang_nodes:
      description: The C([host, ip]) pairs in rank order that the nodes' supervisors watch each other by.
      type: list
      elements: list
    spares:
      description: The spare nodes this job uses, as C(nodes) lists the nodes; a spare's C(node_rank) is past the nodes'.
      type: list
      elements: dict
    spare_hosts:
      description: The hosts of C(spares), in order.
      type: list
      elements: str
    node_history:
      description:
        - Which spare took the place of a quarantined node (a node with C(gpufleet_quarantine_after) hardware faults
          in the fleet's history, C(<gpufleet_logs_dir>/history.jsonl), within C(gpufleet_quarantine_window)), and
          what to say of each other host of the job with hardware faults short of that. Where no spare in service
          is left for a quarantined node, the plan fails naming it and its faults.
      type: list
      elements: str
    spares_note:
      description: >-
        Why the hosts of O(spare_group) are not used by this job (its launcher, scheduler or size, or no restart), or
        empty.
      type: str
    hang_timeout:
      description: The hang watchdog's timeout in seconds, or null when off.
      type: int
    grace_s:
      description: Seconds from a rank's stop notice to SIGKILL (C(stop_grace_s) of O(supervision)).
      type: float
    restart_on:
      description: The causes a failed attempt is restarted on (C(restart_on) of O(supervision)), exit codes as words.
      type: list
      elements: str
    min_nodes:
      description: The fewest nodes the job goes on with (C(min_nodes) of O(supervision)); 0 for all of them.
      type: int
    health_diag:
      description: The DCGM diagnostic level of the health gate, 0 for none.
      type: int
    max_restarts:
      description: How many times the whole gang may be launched again after a failure.
      type: int
    port_check:
      description: C(mode) (C(remembered) or C(always)) and C(ttl_s), as O(port_check) and O(port_check_ttl_s) say.
      type: dict
    port_nodes:
      description: The C([host, ip]) pairs of C(gang_nodes), then of C(spares), that the port check covers.
      type: list
      elements: list
    master_probe:
      description:
        - What the master node's probe does about the ports - C(pick_port) (a free master port, when none is
          given), C(extra_ports) (how many free relaunch ports besides) and C(check_port) (the given master port,
          or null). Nothing under C(scheduler=slurm), whose node 0 picks the ports when Slurm starts the job.
      type: dict
    container:
      description:
        - The job's container image, or null - C(engine), C(image), C(pull), C(archive) and C(archive_image_id)
          (null without an archive), and C(lookup), what the nodes look the image up by (an archive's image ID).
      type: dict
    image_lookup:
      description: What each node's probe looks the job's image up by (the container's C(lookup)); empty for a job
        on the host, whose probe looks at no container engine.
      type: str
"""
