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
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from typing import Any

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import launchers
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control.slurm_batch import sbatch_head

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


# -- sbatch ---------------------------------------------------------------------------------------------------------

def _rank_command(job: ExportJob) -> str:
    args = shlex.join((job.script, *job.script_args))
    if job.launcher == "none":
        return 'exec "$PYTHON" %s' % args
    return ('exec "$PYTHON" -m torch.distributed.run --nnodes="$SLURM_NNODES" --nproc-per-node=%d '
            '--node-rank="$SLURM_NODEID" --master-addr="$MASTER_ADDR" --master-port="$MASTER_PORT" '
            '--max-restarts=0 %s' % (job.nproc_per_node, args))


def sbatch(job: ExportJob) -> str:
    options = ["--job-name=%s" % job.job, "--nodes=%d" % job.nnodes, "--ntasks-per-node=1",
               "--cpus-per-task=%d" % job.nproc_per_node]
    if job.gpus_per_node:
        options.append("--gres=gpu:%d" % job.gpus_per_node)
    options += ["--output=%s-%%j.out" % job.job]
    if job.max_restarts:
        options.append("--requeue")
    port = ('MASTER_PORT=%d' % job.master_port if job.master_port
            else '# One port per job, so that jobs sharing a node do not collide.\n'
                 'MASTER_PORT=$((%d + SLURM_JOB_ID %% 500))' % DEFAULT_PORT)
    secrets = "".join(': "${%s:?is a secret of job %s: export it before sbatch (never written in this file)}"\n'
                      % (name, job.job) for name in job.secret_names)
    env = "".join("export %s=%s\n" % (name, shlex.quote(value)) for name, value in job.env)
    world = job.nnodes * job.nproc_per_node
    task = (
        "# Each node's part (one srun task per node): the MLP_* contract, then the ranks.\n"
        'MLP_ROLE_INDEX=$SLURM_NODEID NODE_RANK=$SLURM_NODEID\n'
        'export MLP_ROLE_INDEX NODE_RANK\n'
        "%s\n" % _rank_command(job))
    return (
        sbatch_head(options)
        + "# Written by gpufleet (playbooks/export.yml) for job {job}: {nnodes} node(s), {nproc} rank(s) per node.\n"
        "# Submit it with `sbatch {job}.sbatch` from the folder that holds the script, on storage every node sees\n"
        "# (or with a copy of it at the same path on every node). Node ranks follow Slurm's order of the allocation.\n"
        "set -euo pipefail\n"
        "{secrets}"
        "export PYTHON=${{PYTHON:-{python}}}\n"
        "{env}"
        "# The rendezvous: torchrun's static one, at the first node of the allocation (its address from Slurm).\n"
        "first=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n"
        "MASTER_ADDR=$(scontrol --oneliner show node \"$first\" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')\n"
        "{port}\n"
        "WORLD_SIZE={world}\n"
        "MLP_WORKER_ALL_HOSTS=$(for node in $(scontrol show hostnames \"$SLURM_JOB_NODELIST\"); do\n"
        "  scontrol --oneliner show node \"$node\" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p'; done | paste -sd, -)\n"
        "MLP_MPI_HOSTS=$(echo \"$MLP_WORKER_ALL_HOSTS\" | sed 's/\\([^,]*\\)/\\1:{nproc}/g')\n"
        "export MASTER_ADDR MASTER_PORT WORLD_SIZE MLP_WORKER_ALL_HOSTS MLP_MPI_HOSTS\n"
        "export MLP_WORKER_NUM=$SLURM_NNODES MLP_WORKER_GPU={nproc} MLP_WORKER_0_HOST=$MASTER_ADDR "
        "MLP_WORKER_0_PORT=$MASTER_PORT MLP_MPI_NP={world}\n"
        "echo \"[gpufleet] Slurm job $SLURM_JOB_ID (restart ${{SLURM_RESTART_COUNT:-0}}) on $SLURM_JOB_NODELIST: "
        "rendezvous $MASTER_ADDR:$MASTER_PORT\"\n"
        "# Any node's part failing ends the step on every node; one output file per node.\n"
        "status=0\n"
        "srun --kill-on-bad-exit=1 --ntasks-per-node=1 --output={job}-%j-%N.out bash -c {task} || status=$?\n"
        "{requeue}"
        "exit $status\n"
    ).format(job=job.job, nnodes=job.nnodes, nproc=job.nproc_per_node, secrets=secrets,
             python=shlex.quote(job.python), env=env, port=port, world=world, task=shlex.quote(task),
             requeue=("if [ \"$status\" -ne 0 ] && [ \"${{SLURM_RESTART_COUNT:-0}}\" -lt {max} ]; then\n"
                      "  echo \"[gpufleet] the job failed (exit $status): requeued, restart "
                      "$(( ${{SLURM_RESTART_COUNT:-0}} + 1 )) of {max}\"\n"
                      "  scontrol requeue \"$SLURM_JOB_ID\"\n"
                      "  exit 0\n"
                      "fi\n").format(max=job.max_restarts) if job.max_restarts else "")


# -- Kubernetes -----------------------------------------------------------------------------------------------------

def _env(job: ExportJob, static: dict[str, str]) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [{"name": name, "value": value} for name, value in job.env]
    env += [{"name": name, "value": value} for name, value in static.items()]
    env += [{"name": name, "valueFrom": {"secretKeyRef": {"name": "%s-secrets" % job.job, "key": name}}}
            for name in job.secret_names]
    return env


def _contract(job: ExportJob) -> dict[str, str]:
    return {"MLP_WORKER_NUM": str(job.nnodes), "MLP_WORKER_GPU": str(job.nproc_per_node),
            "MLP_MPI_NP": str(job.nnodes * job.nproc_per_node)}


def _resources(job: ExportJob) -> dict[str, Any]:
    return {"limits": {"nvidia.com/gpu": job.gpus_per_node}} if job.gpus_per_node else {}


def _metadata(job: ExportJob, written_for: str) -> dict[str, Any]:
    return {"name": job.job, "labels": {"app.kubernetes.io/managed-by": "gpufleet-export"},
            "annotations": {"gpufleet/written-for": written_for}}


def _torch_shell(job: ExportJob, nnodes: str, node_rank: str, addr: str, port: str) -> list[str]:
    """The container's command: the MLP_* contract from the operator's variables, then torchrun (or the script)."""
    args = shlex.join((job.script, *job.script_args))
    run = ("exec python %s" % args if job.launcher == "none" else
           "exec torchrun --nnodes=%s --nproc-per-node=%d --node-rank=%s --master-addr=%s --master-port=%s %s"
           % (nnodes, job.nproc_per_node, node_rank, addr, port, args))
    return ["/bin/bash", "-c",
            "export NODE_RANK=%s MLP_ROLE_INDEX=%s MLP_WORKER_0_HOST=%s MLP_WORKER_0_PORT=%s; %s"
            % (node_rank, node_rank, addr, port, run)]


def trainjob(job: ExportJob) -> dict[str, Any]:
    trainer: dict[str, Any] = {
        "image": job.container_image,
        "command": _torch_shell(job, "$PET_NNODES", "$PET_NODE_RANK", "$PET_MASTER_ADDR", "$PET_MASTER_PORT"),
        "numNodes": job.nnodes,
        "numProcPerNode": job.nproc_per_node,
        "env": _env(job, _contract(job)),
    }
    if job.gpus_per_node:
        trainer["resourcesPerNode"] = _resources(job)
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": _metadata(job, "kubeflow-trainer-%s" % TRAINER_VERSION),
        "spec": {
            "runtimeRef": {"name": TRAINER_RUNTIME, "apiGroup": "trainer.kubeflow.org",
                           "kind": "ClusterTrainingRuntime"},
            "trainer": trainer,
        },
    }


def _pod(job: ExportJob, name: str, command: list[str], env: list[dict[str, Any]], restart: str,
         gpus: bool = True) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": job.container_image, "command": command, "env": env}
    if gpus and job.gpus_per_node:
        container["resources"] = _resources(job)
    return {"restartPolicy": restart, "template": {"spec": {"containers": [container]}}}


def pytorchjob(job: ExportJob) -> dict[str, Any]:
    # The operator gives each pod MASTER_ADDR and MASTER_PORT (the Master's Service), PET_NNODES (pods), PET_NODE_RANK
    # (the pod's index, the Master 0) and, with nprocPerNode, WORLD_SIZE as pods x ranks per pod (envvar.go).
    command = _torch_shell(job, "$PET_NNODES", "$PET_NODE_RANK", "$MASTER_ADDR", "$MASTER_PORT")
    env = _env(job, _contract(job))
    replicas = {"Master": dict(_pod(job, "pytorch", command, env, "OnFailure"), replicas=1)}
    if job.nnodes > 1:
        replicas["Worker"] = dict(_pod(job, "pytorch", command, env, "OnFailure"), replicas=job.nnodes - 1)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": _metadata(job, "kubeflow-training-operator-v1"),
        "spec": {"nprocPerNode": str(job.nproc_per_node),
                 "runPolicy": {"backoffLimit": job.max_restarts * job.nnodes, "cleanPodPolicy": "Running"},
                 "pytorchReplicaSpecs": replicas},
    }


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
    forwarded += [name for name, _value in job.env] + list(_contract(job)) + list(job.secret_names)
    return head + (
        "export PYTHONUNBUFFERED=1\n"
        "# Images such as NGC's run as root, which Open MPI refuses unless told.\n"
        "root=\"\"; if [ \"$(id -u)\" = 0 ]; then root=--allow-run-as-root; fi\n"
        "exec mpirun $root --hostfile \"$hostfile\" -np %d --map-by slot --bind-to none %s %s\n"
        % (world, " ".join("-x %s" % name for name in dict.fromkeys(forwarded)), shlex.join(rank)))


def mpijob(job: ExportJob) -> dict[str, Any]:
    launcher = _pod(job, "launcher", ["/bin/bash", "-c", _mpi_launch(job)], _env(job, _contract(job)), "OnFailure",
                    gpus=False)
    worker = _pod(job, "worker", ["/usr/sbin/sshd", "-De"], _env(job, _contract(job)), "OnFailure")
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": _metadata(job, "mpi-operator-v2beta1"),
        "spec": {
            "slotsPerWorker": job.nproc_per_node,
            "runPolicy": {"backoffLimit": job.max_restarts, "cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {"Launcher": dict(launcher, replicas=1),
                                "Worker": dict(worker, replicas=job.nnodes)},
        },
    }


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
