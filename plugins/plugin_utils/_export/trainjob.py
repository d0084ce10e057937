# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""export.yml's trainjob format: a Kubeflow Trainer TrainJob (trainer.kubeflow.org/v1alpha1, Trainer v2.0),
referring to the ``torch-distributed`` ClusterTrainingRuntime, whose torch plugin gives torchrun its PET_* settings.
Pure."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._export import kubernetes
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._export.job import TRAINER_RUNTIME, TRAINER_VERSION, ExportJob


def trainjob(job: ExportJob) -> dict[str, Any]:
    trainer: dict[str, Any] = {
        "image": job.container_image,
        "command": kubernetes.torch_shell(job, "$PET_NNODES", "$PET_NODE_RANK", "$PET_MASTER_ADDR", "$PET_MASTER_PORT"),
        "numNodes": job.nnodes,
        "numProcPerNode": job.nproc_per_node,
        "env": kubernetes.environment(job, kubernetes.contract(job)),
    }
    if job.gpus_per_node:
        trainer["resourcesPerNode"] = kubernetes.resources(job)
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": kubernetes.metadata(job, "kubeflow-trainer-%s" % TRAINER_VERSION),
        "spec": {
            "runtimeRef": {"name": TRAINER_RUNTIME, "apiGroup": "trainer.kubeflow.org",
                           "kind": "ClusterTrainingRuntime"},
            "trainer": trainer,
        },
    }
