# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""export.yml's sbatch format: a self-contained Slurm batch script, one task per node, torchrun with a static
rendezvous at the first node of the allocation (its address from Slurm), srun --kill-on-bad-exit, the job requeued up
to max_restarts times after a failure, one output file per node. Pure."""

from __future__ import annotations

import shlex

from ansible_collections.gpufleet.cluster.plugins.module_utils._job.launchers import torchrun_options
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control.slurm_batch import sbatch_head
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._export.job import DEFAULT_PORT, ExportJob


def _rank_command(job: ExportJob) -> str:
    args = shlex.join((job.script, *job.script_args))
    if job.launcher == "none":
        return 'exec "$PYTHON" %s' % args
    options = torchrun_options('"$SLURM_NNODES"', '"$SLURM_NODEID"', job.nproc_per_node, '"$MASTER_ADDR"',
                               '"$MASTER_PORT"')
    return 'exec "$PYTHON" -m torch.distributed.run %s %s' % (" ".join(options), args)


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
