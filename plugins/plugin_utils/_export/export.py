# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/export.yml: one job as one file for a cluster gpufleet did not provision. Pure functions.

- ``sbatch``: a self-contained Slurm batch script: one task per node, torchrun with a static rendezvous at the
  first node of the allocation (its address from Slurm), srun --kill-on-bad-exit, the job requeued up to
  max_restarts times after a failure, one output file per node;
- ``trainjob``: a Kubeflow Trainer TrainJob (trainer.kubeflow.org/v1alpha1, Trainer v2.0), referring to the
  ``torch-distributed`` ClusterTrainingRuntime, whose torch plugin gives torchrun its PET_* settings;
- ``pytorchjob``: the Training Operator's kubeflow.org/v1 PyTorchJob, Master and Worker replicas;
- ``mpijob``: the MPI Operator's kubeflow.org/v2beta1 MPIJob, a Launcher running mpirun and Worker replicas.

Every format carries the same job: script and arguments, nodes, ranks and GPUs per node, the environment (the job's,
with the NCCL and Gloo interface settings) and the MLP_* contract, max_restarts. Secret values are never written:
the sbatch script refuses to start without them in its environment; the manifests read them from a Kubernetes
Secret named ``<job>-secrets``.

Each format is its own file (`sbatch.py`, `trainjob.py`, `pytorchjob.py`, `mpijob.py`; what the Kubernetes ones share
in `kubernetes.py`); the job, its checks and the formats' shared facts are `job.py`. This file is what export.yml's
action calls: the check, the file's text, where it goes.
"""

from __future__ import annotations

import os
from typing import Any

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._export.job import (  # noqa: F401  (the action's names)
    FORMATS,
    RESTARTS,
    ExportError,
    ExportJob,
    check,
    warnings,
)
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._export.mpijob import mpijob
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._export.pytorchjob import pytorchjob
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._export.sbatch import sbatch
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._export.trainjob import trainjob

__all__ = ["FORMATS", "ExportError", "ExportJob", "check", "default_dest", "render", "resolve_dest", "warnings"]


def render(job: ExportJob, fmt: str, dump: Any) -> str:
    """The file's text; ``dump`` turns a manifest into YAML (yaml.safe_dump on the controller)."""
    check(job, fmt)
    if fmt == "sbatch":
        return sbatch(job)
    manifest = {"trainjob": trainjob, "pytorchjob": pytorchjob, "mpijob": mpijob}[fmt](job)
    header = "# Written by gpufleet (playbooks/export.yml) for job %s: %s, %d node(s), %d rank(s) per node.\n" % (
        job.job, manifest["kind"], job.nnodes, job.nproc_per_node)
    if job.max_restarts:
        header += "# max_restarts=%d restarts %s.\n" % (job.max_restarts, RESTARTS[fmt])
    if job.secret_names:
        header += "# Its secrets come from the Secret %s-secrets (keys: %s); create it before applying this.\n" % (
            job.job, ", ".join(job.secret_names))
    return header + dump(manifest)


def default_dest(job: str, fmt: str) -> str:
    return "%s.sbatch" % job if fmt == "sbatch" else "%s-%s.yaml" % (job, fmt)


def resolve_dest(dest: str | None, job: str, fmt: str, cwd: str) -> str:
    """The file to write: dest (relative to cwd), or the default name in cwd or in dest when dest is a folder."""
    if not dest:
        return os.path.join(cwd, default_dest(job, fmt))
    path = os.path.join(cwd, os.path.expanduser(dest))
    if os.path.isdir(path):
        return os.path.join(path, default_dest(job, fmt))
    folder = os.path.dirname(path) or cwd
    if not os.path.isdir(folder):
        raise ExportError("dest: %s is in the folder %s, which does not exist (a folder as dest gets %s)"
                          % (dest, folder, default_dest(job, fmt)))
    return path
