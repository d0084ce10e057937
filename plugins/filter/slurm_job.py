# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter gpufleet.cluster.slurm_batch_script: a job's sbatch script (what it asks of Slurm is decided by
plugin_utils/_control/node_plan.py, through the job_nodes action)."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import slurm_batch

DOCUMENTATION = r"""
name: slurm_job
short_description: A job's sbatch script (slurm_batch_script)
version_added: 0.1.0
description:
  - C(slurm_batch_script) renders the sbatch script from the job's plan and what the job asks of Slurm (the
    C(slurm) answer of M(gpufleet.cluster.job_nodes)).
options:
  _input:
    description: The job's plan (C(job), C(run_id), C(max_restarts)).
    type: dict
    required: true
  allocation:
    description: What the job asks of Slurm (C(slurm_nodes), C(cpus_per_node), C(gpus_per_node)), as
      M(gpufleet.cluster.job_nodes) decided it.
    type: dict
  job_dir:
    description: The job's folder, the same path on every node.
    type: str
  master_port:
    description: A master port given by the user; unset, it is chosen on node_rank 0 when Slurm starts the job.
    type: int
"""

EXAMPLES = r"""
- name: Show the batch script of the job
  ansible.builtin.debug:
    msg: "{{ _job_plan | gpufleet.cluster.slurm_batch_script(_job_nodes.slurm, _job_dir, _job_plan.master_port) }}"
"""

RETURN = r"""
_value:
  description: The script's text.
  type: str
"""


def slurm_batch_script(plan: dict[str, Any], allocation: dict[str, Any], job_dir: str,
                       master_port: Any = None) -> str:
    return slurm_batch.batch_script(plan, str(job_dir), list(allocation["slurm_nodes"]),
                                    int(allocation["cpus_per_node"]), int(allocation["gpus_per_node"]),
                                    None if master_port in (None, "") else int(master_port))


class FilterModule:
    """gpufleet.cluster filters."""

    def filters(self) -> dict:
        return {"slurm_batch_script": slurm_batch_script}
