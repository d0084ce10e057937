# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""export.yml's mpijob format: the MPI Operator's kubeflow.org/v2beta1 MPIJob, a Launcher running mpirun (or
horovodrun) and Worker replicas. Pure."""

from __future__ import annotations

import shlex

from typing import Any

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import launchers
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._export import kubernetes
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._export.job import DEFAULT_PORT, MPI_OPERATOR_HOSTFILE, ExportJob


def _mpi_launch(job: ExportJob) -> str:
    """The launcher's script: the contract from the operator's hostfile (the first worker runs rank 0, for mpirun
    fills the hostfile's slots in order), then mpirun or horovodrun over that hostfile, each rank through the same
    wrapper train.yml's mpirun path uses (RANK, LOCAL_RANK, WORLD_SIZE and NODE_RANK from the launcher's own)."""
    world = job.nnodes * job.nproc_per_node
    starts = " ".join(str(node * job.nproc_per_node) for node in range(job.nnodes))
    port = job.master_port or DEFAULT_PORT
    rank = ["/bin/bash", "-c", launchers.RANK_ENV_WRAPPER, "gpufleet-rank", "python", job.script, *job.script_args]
    head = (
        "hostfile=%(hostfile)s\n"
        "# The operator's hostfile lists the workers in order: the first runs rank 0 and the rendezvous.\n"
        "MLP_WORKER_ALL_HOSTS=$(awk 'NF && $1 !~ /^#/ {print $1}' \"$hostfile\" | paste -sd, -)\n"
        "MASTER_ADDR=${MLP_WORKER_ALL_HOSTS%%%%,*}\n"
        "MLP_MPI_HOSTS=$(echo \"$MLP_WORKER_ALL_HOSTS\" | sed 's/\\([^,]*\\)/\\1:%(nproc)d/g')\n"
        "export MASTER_ADDR MASTER_PORT=%(port)d WORLD_SIZE=%(world)d GPUFLEET_RANK_STARTS='%(starts)s' "
        "MLP_WORKER_0_HOST=$MASTER_ADDR MLP_WORKER_0_PORT=%(port)d MLP_WORKER_ALL_HOSTS MLP_MPI_HOSTS "
        "MLP_MPI_HOSTFILE=$hostfile LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}\n"
        "echo \"[gpufleet] job %(job)s: %(world)d ranks on $MLP_WORKER_ALL_HOSTS, rendezvous $MASTER_ADDR:%(port)d\"\n"
        % {"hostfile": MPI_OPERATOR_HOSTFILE, "nproc": job.nproc_per_node, "port": port, "world": world,
           "starts": starts, "job": job.job})
    if job.launcher == "horovodrun":  # horovodrun passes the launcher's environment to every rank itself
        return head + "exec horovodrun -np %d --hostfile \"$hostfile\" %s\n" % (world, shlex.join(rank))
    forwarded = ["PATH", "LD_LIBRARY_PATH", "PYTHONUNBUFFERED", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE",
                 "GPUFLEET_RANK_STARTS", "MLP_WORKER_0_HOST", "MLP_WORKER_0_PORT", "MLP_WORKER_ALL_HOSTS",
                 "MLP_MPI_HOSTS", "MLP_MPI_HOSTFILE"]
    forwarded += [name for name, _value in job.env] + list(kubernetes.contract(job)) + list(job.secret_names)
    return head + (
        "export PYTHONUNBUFFERED=1\n"
        "# Images such as NGC's run as root, which Open MPI refuses unless told.\n"
        "root=\"\"; if [ \"$(id -u)\" = 0 ]; then root=--allow-run-as-root; fi\n"
        "exec mpirun $root --hostfile \"$hostfile\" -np %d --map-by slot --bind-to none %s %s\n"
        % (world, " ".join("-x %s" % name for name in dict.fromkeys(forwarded)), shlex.join(rank)))


def mpijob(job: ExportJob) -> dict[str, Any]:
    launcher = kubernetes.pod(job, "launcher", ["/bin/bash", "-c", _mpi_launch(job)],
                              kubernetes.environment(job, kubernetes.contract(job)), "OnFailure", gpus=False)
    worker = kubernetes.pod(job, "worker", ["/usr/sbin/sshd", "-De"], kubernetes.environment(job, kubernetes.contract(job)),
                            "OnFailure")
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": kubernetes.metadata(job, "mpi-operator-v2beta1"),
        "spec": {
            "slotsPerWorker": job.nproc_per_node,
            "runPolicy": {"backoffLimit": job.max_restarts, "cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {"Launcher": dict(launcher, replicas=1),
                                "Worker": dict(worker, replicas=job.nnodes)},
        },
    }
