# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What export.yml's Kubernetes formats share: the containers' environment (the job's, the secrets from the job's
Secret, the MLP_* contract), GPU resources, metadata, torchrun's shell and a pod template. Pure."""

from __future__ import annotations

import shlex
from typing import Any

from ansible_collections.gpufleet.cluster.plugins.module_utils._job.launchers import torchrun_options
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._export.job import ExportJob


def environment(job: ExportJob, static: dict[str, str]) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [{"name": name, "value": value} for name, value in job.env]
    env += [{"name": name, "value": value} for name, value in static.items()]
    env += [{"name": name, "valueFrom": {"secretKeyRef": {"name": "%s-secrets" % job.job, "key": name}}}
            for name in job.secret_names]
    return env


def contract(job: ExportJob) -> dict[str, str]:
    return {"MLP_WORKER_NUM": str(job.nnodes), "MLP_WORKER_GPU": str(job.nproc_per_node),
            "MLP_MPI_NP": str(job.nnodes * job.nproc_per_node)}


def resources(job: ExportJob) -> dict[str, Any]:
    return {"limits": {"nvidia.com/gpu": job.gpus_per_node}} if job.gpus_per_node else {}


def metadata(job: ExportJob, written_for: str) -> dict[str, Any]:
    return {"name": job.job, "labels": {"app.kubernetes.io/managed-by": "gpufleet-export"},
            "annotations": {"gpufleet/written-for": written_for}}


def torch_shell(job: ExportJob, nnodes: str, node_rank: str, addr: str, port: str) -> list[str]:
    """The container's command: the MLP_* contract from the operator's variables, then torchrun (or the script)."""
    args = shlex.join((job.script, *job.script_args))
    run = ("exec python %s" % args if job.launcher == "none" else
           "exec torchrun %s %s" % (" ".join(torchrun_options(nnodes, node_rank, job.nproc_per_node, addr, port)), args))
    return ["/bin/bash", "-c",
            "export NODE_RANK=%s MLP_ROLE_INDEX=%s MLP_WORKER_0_HOST=%s MLP_WORKER_0_PORT=%s; %s"
            % (node_rank, node_rank, addr, port, run)]


def pod(job: ExportJob, name: str, command: list[str], env: list[dict[str, Any]], restart: str,
        gpus: bool = True) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": job.container_image, "command": command, "env": env}
    if gpus and job.gpus_per_node:
        container["resources"] = resources(job)
    return {"restartPolicy": restart, "template": {"spec": {"containers": [container]}}}
