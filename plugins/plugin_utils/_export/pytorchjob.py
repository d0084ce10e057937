# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""export.yml's pytorchjob format: the Training Operator's kubeflow.org/v1 PyTorchJob, Master and Worker replicas.
Pure."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._export import kubernetes
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._export.job import ExportJob


def pytorchjob(job: ExportJob) -> dict[str, Any]:
    # The operator gives each pod MASTER_ADDR and MASTER_PORT (the Master's Service), PET_NNODES (pods), PET_NODE_RANK
    # (the pod's index, the Master 0) and, with nprocPerNode, WORLD_SIZE as pods x ranks per pod (envvar.go).
    command = kubernetes.torch_shell(job, "$PET_NNODES", "$PET_NODE_RANK", "$MASTER_ADDR", "$MASTER_PORT")
    env = kubernetes.environment(job, kubernetes.contract(job))
    replicas = {"Master": dict(kubernetes.pod(job, "pytorch", command, env, "OnFailure"), replicas=1)}
    if job.nnodes > 1:
        replicas["Worker"] = dict(kubernetes.pod(job, "pytorch", command, env, "OnFailure"), replicas=job.nnodes - 1)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": kubernetes.metadata(job, "kubeflow-training-operator-v1"),
        "spec": {"nprocPerNode": str(job.nproc_per_node),
                 "runPolicy": {"backoffLimit": job.max_restarts * job.nnodes, "cleanPodPolicy": "Running"},
                 "pytorchReplicaSpecs": replicas},
    }
