# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters gpufleet.cluster.slurm_allocation and gpufleet.cluster.slurm_batch_script: a job for Slurm."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import slurm_batch

DOCUMENTATION = r"""
name: slurm_job
short_description: What a job asks of Slurm (slurm_allocation) and its sbatch script (slurm_batch_script)
version_added: 0.1.0
description:
  - C(slurm_allocation) reads the registered result of C(scontrol --oneliner show node) and the job's nodes in
    rank order, and returns C(problem) (the first thing wrong, naming the host and the variable; empty when none),
    C(slurm_nodes) (Slurm's names of the nodes, in rank order), C(cpus_per_node) (one per rank) and
    C(gpus_per_node). It refuses a Slurm client that is missing, a slurmctld that does not answer, a node Slurm
    does not know or will not run jobs on, more CPUs or GPUs (Gres) than Slurm gives a node, and job folders
    that differ between nodes.
  - C(slurm_batch_script) renders the sbatch script from the job's plan and C(slurm_allocation)'s answer.
options:
  _input:
    description: For C(slurm_allocation), the registered result of C(scontrol --oneliner show node); for
      C(slurm_batch_script), the job's plan (C(job), C(run_id), C(max_restarts)).
    type: dict
    required: true
  nodes:
    description: (slurm_allocation) The job's nodes in rank order, each with C(host), C(ip), C(ranks), C(gpus)
      (found on the node) and C(jobs_dir).
    type: list
    elements: dict
  gpus_per_node:
    description: (slurm_allocation) GPUs to ask for on each node; unset, the ranks of a node with GPUs.
    type: int
  asker:
    description: (slurm_allocation) The inventory name of the node scontrol ran on, for the messages.
    type: str
  allocation:
    description: (slurm_batch_script) C(slurm_allocation)'s answer.
    type: dict
  job_dir:
    description: (slurm_batch_script) The job's folder, the same path on every node.
    type: str
  master_port:
    description: (slurm_batch_script) A master port given by the user; unset, it is chosen on node_rank 0 when
      Slurm starts the job.
    type: int
"""

EXAMPLES = r"""
- name: Check the job against Slurm's nodes
  ansible.builtin.assert:
    that: (__nodes | gpufleet.cluster.slurm_allocation(nodes=__job_nodes, asker='node0')).problem == ''
"""

RETURN = r"""
_value:
  description: C(slurm_allocation) a dict (problem, slurm_nodes, cpus_per_node, gpus_per_node);
    C(slurm_batch_script) the script's text.
  type: raw
"""


def slurm_allocation(answer: dict[str, Any], nodes: list[dict[str, Any]], gpus_per_node: Any = None,
                     asker: str = "") -> dict[str, Any]:
    try:
        return slurm_batch.allocation(answer, nodes, None if gpus_per_node in (None, "") else int(gpus_per_node),
                                      str(asker))
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("slurm_allocation: %s" % exc) from exc


def slurm_batch_script(plan: dict[str, Any], allocation: dict[str, Any], job_dir: str,
                       master_port: Any = None) -> str:
    return slurm_batch.batch_script(plan, str(job_dir), list(allocation["slurm_nodes"]),
                                    int(allocation["cpus_per_node"]), int(allocation["gpus_per_node"]),
                                    None if master_port in (None, "") else int(master_port))


class FilterModule:
    """gpufleet.cluster filters."""

    def filters(self) -> dict:
        return {"slurm_allocation": slurm_allocation, "slurm_batch_script": slurm_batch_script}
