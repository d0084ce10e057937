# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What each launcher runs on a node, and the files and variables every launcher's processes get alike.

Launchers:

- ``torchrun`` (default) and ``deepspeed``: every node runs its own part with the node rank gpufleet gives
  it (DeepSpeed with ``--no_ssh``), under its own supervisor, so fail-fast and stop work per node.
- ``mpirun`` and ``horovodrun``: node 0 runs the one entry command over the generated hostfile; the other
  nodes take part through MPI (or Horovod's Gloo), as on MPI training platforms. Their supervisors start
  nothing: they follow node 0's part and end the ranks on their own node (found by run token) when it ends.
- ``none``: the script itself runs once per node, for scripts written for a training platform that start their
  own launcher from the MLP_* variables.

The contract every launcher's processes see: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, NODE_RANK, and per rank RANK
and LOCAL_RANK (set by the launcher, or mapped from Open MPI's or Horovod's own), plus the platform-compatible
MLP_WORKER_NUM, MLP_WORKER_GPU, MLP_ROLE_INDEX, MLP_WORKER_0_HOST, MLP_WORKER_0_PORT, MLP_WORKER_ALL_HOSTS,
MLP_MPI_HOSTS, MLP_MPI_HOSTFILE and MLP_MPI_NP; and two files in the job folder, the same on every node and
across runs with the same inventory: ``hostfile`` (``<address> slots=<n>``) and ``ranks.json``, the rank manifest.
"""

from __future__ import annotations

import json
import os
import shlex

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.attempt_files import FLIGHT_RECORDER_DIR
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import HOSTFILE, SINGLE_ENTRY
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.output_once import TORCHELASTIC_DIR
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.rank_output import RANK_OUTPUT_DIR
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.rank_stacks import HOOK_DIR, STACK_DIR
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.stack_hook import STACK_DIR_VAR
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.stop_notice import STOP_FILE_VAR, STOP_GRACE_VAR

LAUNCHERS = ("torchrun", "deepspeed", "mpirun", "horovodrun", "none")
CHECKPOINT_DIR = "checkpoints"
# torchrun's entry point in the job folder: run as `python -m` would, without the interpreter's teardown at its end
# (module_utils/_runtime/launcher_entry.py says why).
LAUNCHER_ENTRY = "launcher_entry.py"


def nodes_of(spec) -> list[tuple[str, str, int]]:
    """(host, address, ranks on it) in rank order; a job without a node list is this node alone."""
    if spec.nodes:
        slots = list(spec.slots) or [spec.nproc_per_node] * len(spec.nodes)
        return [(host, address, int(count)) for (host, address), count in zip(spec.nodes, slots)]
    return [("node%d" % spec.node_rank, spec.master_addr, spec.nproc_per_node)]


def hostfile_text(spec) -> str:
    """The MPI / DeepSpeed hostfile of the job: one ``<address> slots=<n>`` line per node, in rank order."""
    return "".join("%s slots=%d\n" % (address, count) for _host, address, count in nodes_of(spec))


def manifest_text(spec) -> str:
    """The rank manifest: which global ranks run where. Nothing in it changes from one launch to the next."""
    entries, first = [], 0
    for rank, (host, address, count) in enumerate(nodes_of(spec)):
        entries.append({"host": host, "address": address, "node_rank": rank, "gpus": count,
                        "ranks": [first, first + count - 1]})
        first += count
    data = {"job": spec.job, "launcher": spec.launcher, "world_size": first, "nodes": entries}
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def node_place(spec) -> dict[str, str]:
    """This node's place in the job, which no variable of the user's may change: NODE_RANK and NNODES."""
    return {"NODE_RANK": str(spec.node_rank), "NNODES": str(spec.nnodes)}


def contract_env(spec, job_dir: str) -> dict[str, str]:
    """The variables every process of the job sees, whatever the launcher (RANK and LOCAL_RANK come per rank)."""
    nodes = nodes_of(spec)
    world = sum(count for _h, _a, count in nodes)
    return {
        "MASTER_ADDR": spec.master_addr,
        "MASTER_PORT": str(spec.master_port),
        "WORLD_SIZE": str(world),
        **node_place(spec),
        "MLP_WORKER_NUM": str(len(nodes)),
        "MLP_WORKER_GPU": str(spec.nproc_per_node),
        "MLP_ROLE_INDEX": str(spec.node_rank),
        "MLP_WORKER_0_HOST": spec.master_addr,
        "MLP_WORKER_0_PORT": str(spec.master_port),
        "MLP_WORKER_ALL_HOSTS": ",".join(address for _h, address, _c in nodes),
        "MLP_MPI_HOSTS": ",".join("%s:%d" % (address, count) for _h, address, count in nodes),
        "MLP_MPI_HOSTFILE": os.path.join(job_dir, HOSTFILE),
        "MLP_MPI_NP": str(world),
        # Live logs: progress lines reach job.log (and the hang watchdog) as they are printed.
        "PYTHONUNBUFFERED": "1",
        # Where the job keeps its checkpoints, per job, on each node (the job's env may name shared storage instead);
        # kept across relaunches and restarts, which resume from it (examples/train.py).
        "GPUFLEET_CHECKPOINT_DIR": os.path.join(job_dir, CHECKPOINT_DIR),
    }


def torchrun_options(nnodes: object, node_rank: object, nproc_per_node: object, master_addr: object,
                     master_port: object, log_dir: str | None = None) -> list[str]:
    """torchrun's options for one node of a static rendezvous, up to the script: the one spelling of them. The
    launch passes them as an argv (numbers and the master's address); export.yml's scripts write them into a shell
    line with the scheduler's variables as the values ('"$SLURM_NODEID"', '$PET_NODE_RANK'). No restart by torchrun:
    a restart is the supervisor's (or the scheduler's) to decide, for the whole gang.

    With log_dir, torchrun keeps each worker's TORCHELASTIC_ERROR_FILE there (in the job folder), so the error a
    script records with ``@record`` outlives the run and reaches the report; and tees each worker's output there
    (``--tee=3``) and into the node's log, each line tagged as TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE says
    (torch_prelude: ``[rank4|0]: ``, global and local rank).
    """
    return [
        "--nnodes=%s" % nnodes,
        "--node-rank=%s" % node_rank,
        "--nproc-per-node=%s" % nproc_per_node,
        "--master-addr=%s" % master_addr,
        "--master-port=%s" % master_port,
        "--rdzv-backend=static",
    ] + (["--log-dir=%s" % log_dir, "--tee=3"] if log_dir else []) + ["--max-restarts=0"]


def torchrun_command(spec, log_dir: str | None = None, entry: str | None = None) -> list[str]:
    """The command this node runs: torchrun (as ``python -m torch.distributed.run``, or through entry, the job
    folder's LAUNCHER_ENTRY, with the same arguments) with torchrun_options."""
    start = [entry, "torch.distributed.run"] if entry else ["-m", "torch.distributed.run"]
    return [spec.python, *start,
            *torchrun_options(spec.nnodes, spec.node_rank, spec.nproc_per_node, spec.master_addr, spec.master_port,
                              log_dir),
            spec.script, *spec.script_args]


def runs_here(spec) -> bool:
    """Whether this node runs an entry command (every node, except the followers of a single-entry launcher)."""
    return spec.launcher not in SINGLE_ENTRY or spec.node_rank == 0


# Run by mpirun / horovodrun on every rank before the script: the contract's per-rank names from the launcher's
# own, NODE_RANK from the rank manifest's ranges (ranks fill the hostfile's slots in order), and the run token
# of the node the rank is on, so that node's supervisor can find and end it.
RANK_ENV_WRAPPER = (
    'RANK=${OMPI_COMM_WORLD_RANK:-${HOROVOD_RANK:-${PMI_RANK:-0}}}; '
    'LOCAL_RANK=${OMPI_COMM_WORLD_LOCAL_RANK:-${HOROVOD_LOCAL_RANK:-${MPI_LOCALRANKID:-0}}}; '
    'WORLD_SIZE=${OMPI_COMM_WORLD_SIZE:-${HOROVOD_SIZE:-$WORLD_SIZE}}; '
    'NODE_RANK=0; n=0; for first in $GPUFLEET_RANK_STARTS; do [ "$RANK" -ge "$first" ] && NODE_RANK=$n; '
    'n=$((n+1)); done; MLP_ROLE_INDEX=$NODE_RANK; GPUFLEET_RUN_TOKEN=$GPUFLEET_RUN_ID.$NODE_RANK; '
    'export RANK LOCAL_RANK WORLD_SIZE NODE_RANK MLP_ROLE_INDEX GPUFLEET_RUN_TOKEN; exec "$@"'
)


def rank_starts(spec) -> str:
    starts, first = [], 0
    for _host, _address, count in nodes_of(spec):
        starts.append(str(first))
        first += count
    return " ".join(starts)


def exported_names(env: dict[str, str]) -> list[str]:
    """The variables mpirun must pass to the ranks on other nodes (its -x list)."""
    names = set(env) | {"GPUFLEET_RUN_ID", "GPUFLEET_RANK_STARTS", "GPUFLEET_JOB", "GPUFLEET_ATTEMPT",
                        "GPUFLEET_RESTART_REASON", STOP_FILE_VAR, STOP_GRACE_VAR, "PATH",
                        "PYTHONUNBUFFERED"} | {name for name, _older, _value in FLIGHT_RECORDER}
    return sorted(names)


def command(spec, job_dir: str, env_names: list[str]) -> list[str] | None:
    """The entry command of this node's part, one list item per argument; None on an MPI follower.

    ``@MASTER_PORT@`` and ``@IFACE_OPTS@`` stand for the attempt's master port and the TCP-interface options,
    which launch.sh fills in when it runs (see launch_script.render_launch_script).
    """
    if not runs_here(spec):
        return None
    script = [spec.script] + list(spec.script_args)
    world = sum(count for _h, _a, count in nodes_of(spec))
    if spec.launcher == "torchrun":
        parts = torchrun_command(spec, os.path.join(job_dir, TORCHELASTIC_DIR), os.path.join(job_dir, LAUNCHER_ENTRY))
        fixed = {"--master-port=%d" % spec.master_port: "--master-port=@MASTER_PORT@"}
        if spec.elastic:  # a spare may take a node's rank, the gang may shrink: the attempt says (spares.py)
            fixed.update({"--nnodes=%d" % spec.nnodes: "--nnodes=@NNODES@",
                          "--node-rank=%d" % spec.node_rank: "--node-rank=@NODE_RANK@",
                          "--master-addr=%s" % spec.master_addr: "--master-addr=@MASTER_ADDR@",
                          "--nproc-per-node=%d" % spec.nproc_per_node: "--nproc-per-node=@NPROC@"})
        agent = len(parts) - len(spec.script_args) - 1  # torchrun's own arguments, before the script's
        return [fixed.get(part, part) for part in parts[:agent]] + parts[agent:]
    if spec.launcher == "deepspeed":
        # Each rank's output into a file of its own, which the supervisor copies, tagged, into the log (rank_output.py).
        return [spec.python, "-m", "deepspeed.launcher.runner", "--hostfile=%s" % os.path.join(job_dir, HOSTFILE),
                "--no_ssh", "--node_rank=%d" % spec.node_rank, "--master_addr=%s" % spec.master_addr,
                "--master_port=@MASTER_PORT@", "--enable_each_rank_log=%s" % os.path.join(job_dir, RANK_OUTPUT_DIR)
                ] + script
    if spec.launcher == "mpirun":
        exports = []
        for name in env_names:
            exports += ["-x", name]
        # --tag-output: each rank's lines in node 0's log begin with [<job>,<rank>]<stdout>: (Open MPI's own tag).
        head = ["mpirun", "--hostfile", os.path.join(job_dir, HOSTFILE), "-np", str(world), "--map-by", "slot",
                "--bind-to", "none", "--tag-output", "@ROOT_OPTS@", "@IFACE_OPTS@"]
        return head + exports + ["/bin/bash", "-c", RANK_ENV_WRAPPER, "gpufleet-rank", spec.python] + script
    if spec.launcher == "horovodrun":
        hosts = ",".join("%s:%d" % (address, count) for _h, address, count in nodes_of(spec))
        return ["horovodrun", "-np", str(world), "-H", hosts, "--gloo", "@IFACE_OPTS@",
                "/bin/bash", "-c", RANK_ENV_WRAPPER, "gpufleet-rank", spec.python] + script
    if spec.launcher == "none":
        runner = ["/bin/bash"] if spec.script.endswith(".sh") else [spec.python]
        return runner + script
    raise ValueError("launcher: %r is not one of %s" % (spec.launcher, ", ".join(LAUNCHERS)))


# What launch.sh puts in place of the placeholders, per launcher.
PLACEHOLDERS = {
    "@MASTER_PORT@": '"${GPUFLEET_MASTER_PORT}"',
    "@ROOT_OPTS@": '${GPUFLEET_MPI_ROOT_OPTS}',
    "@IFACE_OPTS@": '${GPUFLEET_IFACE_OPTS}',
    "@NODE_RANK@": '"${GPUFLEET_NODE_RANK}"',
    "@MASTER_ADDR@": '"${GPUFLEET_MASTER_ADDR}"',
    "@NPROC@": '"${GPUFLEET_NPROC}"',
    "@NNODES@": '"${GPUFLEET_NNODES}"',
}


def place_prelude(spec) -> str:
    """For a job whose members may change (spares, min_nodes; JobSpec.elastic): shell lines that take this part's
    node rank, master address, ranks, node count and world size from the supervisor's attempt (spares.place_env: a
    spare takes a lost node's rank; node 0's address changes when a spare replaces it; the gang goes on smaller),
    defaulting to the launch's, and export the contract's names of them over the job's environment file's."""
    if not spec.elastic:
        return ""
    nodes = nodes_of(spec)
    return ("# A spare may take a node's place, the gang may go on without a node: the supervisor gives each attempt\n"
            "# this part's place (spares.py); run by hand, the launch's own.\n"
            "GPUFLEET_NODE_RANK=${GPUFLEET_NODE_RANK:-%d} GPUFLEET_MASTER_ADDR=${GPUFLEET_MASTER_ADDR:-%s} "
            "GPUFLEET_NPROC=${GPUFLEET_NPROC:-%d} GPUFLEET_NNODES=${GPUFLEET_NNODES:-%d} "
            "GPUFLEET_WORLD_SIZE=${GPUFLEET_WORLD_SIZE:-%d} GPUFLEET_MPI_HOSTS=${GPUFLEET_MPI_HOSTS:-%s} "
            "GPUFLEET_ALL_HOSTS=${GPUFLEET_ALL_HOSTS:-%s}\n"
            "export NODE_RANK=$GPUFLEET_NODE_RANK MLP_ROLE_INDEX=$GPUFLEET_NODE_RANK MASTER_ADDR=$GPUFLEET_MASTER_ADDR "
            "MLP_WORKER_0_HOST=$GPUFLEET_MASTER_ADDR NNODES=$GPUFLEET_NNODES MLP_WORKER_NUM=$GPUFLEET_NNODES "
            "WORLD_SIZE=$GPUFLEET_WORLD_SIZE MLP_MPI_NP=$GPUFLEET_WORLD_SIZE MLP_MPI_HOSTS=$GPUFLEET_MPI_HOSTS "
            "MLP_WORKER_ALL_HOSTS=$GPUFLEET_ALL_HOSTS\n"
            % (spec.node_rank, shlex.quote(spec.master_addr), spec.nproc_per_node, len(nodes),
               sum(count for _h, _a, count in nodes),
               shlex.quote(",".join("%s:%d" % (address, count) for _h, address, count in nodes)),
               shlex.quote(",".join(address for _h, address, _c in nodes))))


def render_command(parts: list[str]) -> str:
    """The command as launch.sh writes it: each argument shell-quoted, placeholders left to the shell."""
    rendered = []
    for part in parts:
        expanded = shlex.quote(part)
        for placeholder, shell in PLACEHOLDERS.items():
            if placeholder in part:
                if part == placeholder:
                    expanded = shell
                else:
                    head, _sep, tail = part.partition(placeholder)
                    expanded = shlex.quote(head) + shell + shlex.quote(tail) if tail else shlex.quote(head) + shell
        rendered.append(expanded)
    return " \\\n  ".join(rendered)


# PyTorch's flight recorder (NCCL process groups): each rank keeps its last collectives and, when one times out,
# dumps them (torch/distributed/flight_recorder reads the dumps), into the job folder (<dump file prefix><rank>; an
# earlier attempt's are kept aside by the supervisor: _runtime/attempt_files.py). The names torch 2.13 reads; each
# is set unless the job or an environment file set it, or its older name (the second; older torch reads only that
# one).
FLIGHT_RECORDER = (
    ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "2000"),
    ("TORCH_NCCL_DUMP_ON_TIMEOUT", "", "1"),
    ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "@JOB_DIR@/%s/rank_" % FLIGHT_RECORDER_DIR),
)
# torchrun's tag of each rank's lines in the node's log (torch.distributed.run reads it; ${rank} is the global rank).
TORCHRUN_LINE_PREFIX = "[rank${rank}|${local_rank}]: "


def torch_prelude(launcher: str, job_dir: str) -> str:
    """Shell lines that set the flight recorder's variables and torchrun's line tags, each unless already set, and
    the ranks' own stack dump (_runtime/stack_hook.py: its folder first on PYTHONPATH, where the dumps go)."""
    unset = [(name, older, value.replace("@JOB_DIR@", job_dir)) for name, older, value in FLIGHT_RECORDER]
    if launcher == "torchrun":
        unset.append(("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "", TORCHRUN_LINE_PREFIX))
    stacks = shlex.quote(os.path.join(job_dir, STACK_DIR))
    lines = ["mkdir -p %s %s" % (shlex.quote(os.path.join(job_dir, FLIGHT_RECORDER_DIR)), stacks),
             "export %s=%s PYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH}" % (
                 STACK_DIR_VAR, stacks, shlex.quote(os.path.join(job_dir, HOOK_DIR)))]
    for name, older, value in unset:
        either = "${%s:-}${%s:-}" % (name, older) if older else "${%s:-}" % name
        lines.append('if [ -z "%s" ]; then export %s=%s; fi' % (either, name, shlex.quote(value)))
    return "\n".join(lines) + "\n"


def iface_prelude(launcher: str) -> str:
    """Shell lines that set GPUFLEET_IFACE_OPTS from NCCL_SOCKET_IFNAME (the nccl_env role's choice), without the
    "=" that makes NCCL match the name exactly (${NCCL_SOCKET_IFNAME#=}: Open MPI and Horovod take plain names)."""
    if launcher == "mpirun":
        return ('GPUFLEET_IFACE_OPTS=""\n'
                'if [ -n "${NCCL_SOCKET_IFNAME:-}" ]; then GPUFLEET_IFACE_OPTS="--mca btl_tcp_if_include '
                '${NCCL_SOCKET_IFNAME#=} --mca oob_tcp_if_include ${NCCL_SOCKET_IFNAME#=}"; fi\n'
                'GPUFLEET_MPI_ROOT_OPTS=""\n'
                'if [ "$(id -u)" = 0 ]; then GPUFLEET_MPI_ROOT_OPTS="--allow-run-as-root"; fi\n')
    if launcher == "horovodrun":
        return ('GPUFLEET_IFACE_OPTS=""\n'
                'if [ -n "${NCCL_SOCKET_IFNAME:-}" ]; then GPUFLEET_IFACE_OPTS="--network-interface '
                '${NCCL_SOCKET_IFNAME#=}"; fi\n')
    return ""
