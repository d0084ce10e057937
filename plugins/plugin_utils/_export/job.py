# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The job export.yml writes, what every format carries of it, and what each format refuses: the one place the
formats' shared facts live (the operators' variables, the restarts each format carries, pod names). Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass

FORMATS = ("sbatch", "trainjob", "pytorchjob", "mpijob")
# What each format can start the ranks with (an MPIJob's launcher is mpirun).
FORMAT_LAUNCHERS = {"sbatch": ("torchrun", "none"), "trainjob": ("torchrun", "none"),
                    "pytorchjob": ("torchrun", "none"), "mpijob": ("mpirun", "horovodrun")}
TRAINER_VERSION = "v2.0"  # the Kubeflow Trainer release the TrainJob is written for
TRAINER_RUNTIME = "torch-distributed"
DEFAULT_PORT = 29500
_K8S_NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_LABEL_MAX = 63  # a pod's hostname and a Service's name are DNS labels (RFC 1123)

# Where the MPI Operator mounts the hostfile it writes, one "<worker>.<job>.<namespace>.svc slots=<n>" line per
# worker in the workers' order (kubeflow/mpi-operator v0.8.0, pkg/controller/mpi_job_controller.go: configMountPath,
# hostfileName, newConfigMap).
MPI_OPERATOR_HOSTFILE = "/etc/mpi/hostfile"

# The names each format's operator sets in the rank's container itself, which a variable of the job's must not take.
OPERATOR_ENV = {
    "sbatch": (),
    # Kubeflow Trainer v2.0.1, pkg/constants/constants.go TorchRunReservedEnvNames; its webhook refuses a TrainJob
    # whose trainer env has one (pkg/runtime/framework/plugins/torch/torch.go).
    "trainjob": ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"),
    # Training Operator v1.9.3, pkg/controller.v1/pytorch/envvar.go and master.go: appended after the pod's own.
    "pytorchjob": ("PYTHONUNBUFFERED", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "PET_NNODES",
                   "PET_NODE_RANK", "PET_NPROC_PER_NODE"),
    # MPI Operator v0.8.0, pkg/controller/mpi_job_controller.go: launcherEnvVars, workerEnvVars, ompiEnvVars and
    # openMPISlotsEnv.
    "mpijob": ("K_MPI_JOB_ROLE", "OMPI_MCA_orte_keep_fqdn_hostnames", "OMPI_MCA_orte_default_hostfile",
               "OMPI_MCA_plm_rsh_args", "OMPI_MCA_orte_set_default_slots"),
}
# torchrun reads every PET_<OPTION> as its --<option> (torch.distributed.run's env defaults): in the formats whose
# operator drives torchrun through them, the prefix is the operator's.
OPERATOR_PREFIX = {"trainjob": "PET_", "pytorchjob": "PET_"}
# What gpufleet itself sets for every rank (the contract), in every format.
CONTRACT_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "MLP_WORKER_NUM",
                "MLP_WORKER_GPU", "MLP_ROLE_INDEX", "MLP_WORKER_0_HOST", "MLP_WORKER_0_PORT", "MLP_WORKER_ALL_HOSTS",
                "MLP_MPI_HOSTS", "MLP_MPI_HOSTFILE", "MLP_MPI_NP", "GPUFLEET_RANK_STARTS")

# How each format restarts a failed job, as its scheduler or operator can.
RESTARTS = {
    "sbatch": "the whole job, requeued by Slurm (scontrol requeue) up to max_restarts times",
    "trainjob": "not carried: a TrainJob (Kubeflow Trainer v2.0) has no field for it; the ClusterTrainingRuntime's "
                "JobSet failurePolicy.maxRestarts restarts the whole job",
    "pytorchjob": "each failed pod in place (restartPolicy OnFailure); the other pods' torchrun fails when its peer "
                  "goes and restarts too, so backoffLimit, which counts every pod's restarts, is max_restarts x nodes",
    "mpijob": "the whole job: the launcher's mpirun starts again, up to backoffLimit = max_restarts times",
}


class ExportError(ValueError):
    """The job cannot be written in that format; the message names the variable."""


@dataclass(frozen=True)
class ExportJob:
    job: str
    script: str
    nnodes: int
    nproc_per_node: int
    gpus_per_node: int = 0
    script_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    secret_names: tuple[str, ...] = ()
    max_restarts: int = 0
    launcher: str = "torchrun"
    python: str = "python3"
    container_image: str = ""
    master_port: int | None = None


def pod_names(job: ExportJob, fmt: str) -> list[str]:
    """The hostnames of the pods the format's operator creates (each must be a DNS label)."""
    if fmt == "trainjob":  # the JobSet's pods: <jobset>-<replicatedJob>-<job index>-<pod index>
        return ["%s-node-0-%d" % (job.job, index) for index in range(job.nnodes)]
    if fmt == "pytorchjob":  # <job>-<replica type>-<index>
        return ["%s-master-0" % job.job] + ["%s-worker-%d" % (job.job, index) for index in range(job.nnodes - 1)]
    if fmt == "mpijob":
        return ["%s-launcher" % job.job] + ["%s-worker-%d" % (job.job, index) for index in range(job.nnodes)]
    return []


def _check_env(job: ExportJob, fmt: str) -> None:
    names = [name for name, _value in job.env]
    for name in job.secret_names:
        if name in names:
            raise ExportError("gpufleet_secret_env: %s is also in gpufleet_env; a variable has one value, give it in "
                              "one of them" % name)
    for variable, found in (("gpufleet_env", names), ("gpufleet_secret_env", list(job.secret_names))):
        for name in found:
            if name in CONTRACT_ENV:
                raise ExportError("%s: %s is set by gpufleet for every rank (the job's contract), in every format; "
                                  "rename the variable" % (variable, name))
            prefix = OPERATOR_PREFIX.get(fmt, "")
            if name in OPERATOR_ENV[fmt] or (prefix and name.startswith(prefix)):
                raise ExportError("%s: %s is set by the operator of format=%s in the rank's container%s; rename the "
                                  "variable" % (variable, name, fmt,
                                                " (%s* are torchrun's options)" % prefix if prefix else ""))


def check(job: ExportJob, fmt: str) -> None:
    if fmt not in FORMATS:
        raise ExportError("format: %r is not one of %s" % (fmt, ", ".join(FORMATS)))
    if job.launcher not in FORMAT_LAUNCHERS[fmt]:
        raise ExportError("launcher: format=%s starts the ranks with %s, not %s"
                          % (fmt, " or ".join(FORMAT_LAUNCHERS[fmt]), job.launcher))
    _check_env(job, fmt)
    if fmt == "sbatch":
        return
    if not job.container_image:
        raise ExportError("container_image: format=%s needs the container image to train in, e.g. "
                          "-e container_image=nvcr.io/nvidia/pytorch:25.01-py3" % fmt)
    if not _K8S_NAME_RE.match(job.job):
        raise ExportError("job: %r is not a Kubernetes name (lower-case letters, digits and '-', starting with a "
                          "letter); give one with -e job=NAME" % job.job)
    longest = max(reversed(pod_names(job, fmt)), key=len)  # the last of the longest: the highest index
    if len(longest) > DNS_LABEL_MAX:
        raise ExportError("job: %r is too long for format=%s: its pod %s would have a %d-character hostname (at most "
                          "%d); use a job name of at most %d characters"
                          % (job.job, fmt, longest, len(longest), DNS_LABEL_MAX,
                             DNS_LABEL_MAX - (len(longest) - len(job.job))))
    if fmt == "trainjob" and job.max_restarts:
        raise ExportError("max_restarts: %d cannot be carried by format=trainjob: %s. Leave max_restarts at 0 "
                          "(and set it in the runtime), or use format=mpijob or sbatch"
                          % (job.max_restarts, RESTARTS["trainjob"]))


def warnings(job: ExportJob, fmt: str) -> list[str]:
    """What the file does differently from train.yml, for the user to know before applying it."""
    if fmt == "pytorchjob" and job.max_restarts:
        return ["max_restarts=%d with format=pytorchjob restarts %s (backoffLimit %d)"
                % (job.max_restarts, RESTARTS["pytorchjob"], job.max_restarts * job.nnodes)]
    return []
