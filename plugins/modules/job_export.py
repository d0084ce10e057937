#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# This file holds documentation only: the work is done by the action plugin of the same name, on the controller.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: job_export
short_description: Write a job as one file for a Slurm or Kubernetes cluster gpufleet did not provision
version_added: 0.1.0
description:
  - Writes the job that C(train.yml) would run on the node group (script, arguments, nodes, ranks and GPUs per
    node, environment with the NCCL and Gloo interface settings and the MLP_* contract, max_restarts, launcher) as
    one file, on the controller.
  - C(sbatch) is a self-contained Slurm batch script (one task per node, torchrun's static rendezvous at the first
    node of the allocation, C(srun --kill-on-bad-exit), requeued up to O(max_restarts) times after a failure, one
    output file per node). C(trainjob) is a Kubeflow Trainer TrainJob (C(trainer.kubeflow.org/v1alpha1), written for
    Trainer v2.0 and its C(torch-distributed) runtime). C(pytorchjob) is the Training Operator's C(kubeflow.org/v1)
    PyTorchJob (Master and Worker). C(mpijob) is the MPI Operator's C(kubeflow.org/v2beta1) MPIJob (Launcher and
    Worker; the workers' image needs sshd).
  - Secret values are never written. The sbatch script stops unless they are in its environment; the manifests
    read them from the Secret C(<job>-secrets).
  - Nothing on the nodes is read or changed; the nodes' count comes from the inventory group.
  - Refused before anything is written, naming the variable, are a variable in both C(gpufleet_env) and
    C(gpufleet_secret_env); a variable named like one of the job's contract (C(MASTER_ADDR), C(WORLD_SIZE),
    C(MLP_*), ...) or like one the format's operator sets in the container (C(PET_*) for C(trainjob) and
    C(pytorchjob), the MPI Operator's C(OMPI_MCA_*) settings and C(K_MPI_JOB_ROLE) for C(mpijob)); and a job name
    that would give one of the operator's pods a hostname longer than 63 characters.
  - The MPIJob's launcher gives every rank the contract C(train.yml)'s mpirun path gives it (MASTER_ADDR at the
    first worker of the operator's C(/etc/mpi/hostfile), WORLD_SIZE, RANK, LOCAL_RANK, NODE_RANK), runs mpirun as
    root where the image does (C(--allow-run-as-root)) and forwards PATH and LD_LIBRARY_PATH; C(horovodrun) is
    given the operator's hostfile.
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - gpufleet.cluster.attributes.controller
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
options:
  format:
    description: What to write.
    type: str
    required: true
  script:
    description: The training script, as the cluster's nodes or the image see it (a path relative to the working directory, or absolute).
    type: str
    required: true
  job:
    description: Job name; defaults to the script's file name without its extension.
    type: str
  script_args:
    description: The script's arguments, one string split like a shell does.
    type: str
    default: ""
  group:
    description: The inventory group whose hosts are the job's nodes.
    type: str
    default: gpu_nodes
  nproc_per_node:
    description: Ranks per node; defaults to O(gpus_per_node), else C(gpufleet_gpus) of the group's first host, else 1.
    type: int
  gpus_per_node:
    description: GPUs per node to ask for; defaults to C(gpufleet_gpus) of the group's first host, else 0.
    type: int
  container_image:
    description:
      - The container image the ranks run in (required by C(trainjob), C(pytorchjob) and C(mpijob)); the same
        C(container_image) as C(train.yml)'s, so one C(-e container_image=...) serves both playbooks.
      - C(export.yml) takes it from C(-e container_image), else C(gpufleet_container_image) of the group's first host.
    type: str
    default: ""
    aliases: [image]
  python:
    description: (sbatch) The Python with torch on the cluster's nodes; defaults to C(gpufleet_python) of the first host.
    type: str
  env:
    description: Environment of every rank (C(gpufleet_env)); the NCCL and Gloo interface settings of the nccl_env role's variables are added.
    type: dict
    default: {}
  secret_env_names:
    description: Names of the secret variables (C(gpufleet_secret_env)'s keys); their values are never written.
    type: list
    elements: str
    default: []
  max_restarts:
    description:
      - Relaunches after a failure, as each format can carry them.
      - C(sbatch) and C(mpijob) restart the whole job (Slurm's requeue; the MPIJob launcher's C(backoffLimit), its
        mpirun started again).
      - C(pytorchjob) restarts each failed pod in place (C(restartPolicy=OnFailure)); the other pods' torchrun fails
        when its peer goes and restarts too. The operator's C(backoffLimit) counts every pod's restarts, so it is
        written as O(max_restarts) times the nodes, and the task warns.
      - C(trainjob) cannot carry it (a TrainJob of Kubeflow Trainer v2.0 has no such field; the
        ClusterTrainingRuntime's JobSet C(failurePolicy.maxRestarts) restarts the whole job), so a value above 0 is
        refused.
    type: int
    default: 0
  launcher:
    description: What starts the ranks; C(torchrun) or C(none) for sbatch, trainjob and pytorchjob, C(mpirun) or C(horovodrun) for mpijob.
    type: str
    default: torchrun
  master_port:
    description: (sbatch) A fixed rendezvous port; unset, C(29500 + job id % 500).
    type: int
  dest:
    description:
      - The file to write, on the controller; defaults to C(<job>.sbatch) or C(<job>-<format>.yaml) in the current
        folder. A folder gets that default name inside it; a file in a folder that does not exist is refused.
    type: str
seealso:
  - module: gpufleet.cluster.job_plan
"""

EXAMPLES = r"""
- name: Write the job as a Slurm batch script
  gpufleet.cluster.job_export:
    format: sbatch
    script: train.py
    script_args: --epochs 3
    nproc_per_node: 8
  run_once: true

- name: Write it as a Kubeflow TrainJob
  gpufleet.cluster.job_export:
    format: trainjob
    script: /workspace/train.py
    container_image: nvcr.io/nvidia/pytorch:25.01-py3
  run_once: true
"""

RETURN = r"""
dest:
  description: The file written.
  returned: always
  type: str
  sample: /home/ml/project/train.sbatch
format:
  description: The format written.
  returned: always
  type: str
  sample: sbatch
content:
  description: The file's text.
  returned: always
  type: str
"""
