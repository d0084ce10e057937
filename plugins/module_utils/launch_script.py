# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Render one node's launch script and environment file for a job.

The launch script is what a person would type on the node, written down:
``cd`` to the working directory, source the job's environment, exec torchrun
with this node's rank. Every value is shell-quoted, so spaces and quotes in
arguments and environment values reach the training script unchanged.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from dataclasses import asdict, dataclass, field

from ansible_collections.gpufleet.cluster.plugins.module_utils import launchers
from ansible_collections.gpufleet.cluster.plugins.module_utils.supervisor import Defaults

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A Linux interface name as the kernel allows it in practice (no spaces, quotes or slashes).
IFACE_RE = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")


@dataclass(frozen=True)
class JobSpec:
    """Everything that defines one node's part of a job; two equal specs are the same launch."""

    job: str
    node_rank: int
    nnodes: int
    nproc_per_node: int
    world_size: int
    master_addr: str
    master_port: int
    python: str
    script: str
    workdir: str
    script_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    grace_s: float = Defaults.GRACE_S
    # The sha256 of a script written by the launch itself (script_content), so that changed code is a changed spec.
    script_sha256: str = ""
    # Environment files of the node (e.g. the nccl_env role's) sourced before the job's own environment, if present.
    env_files: tuple[str, ...] = ()
    # The sha256 of the job's secret environment: the values live only in the owner-only secret_env file.
    secret_env_sha256: str = ""
    # The job's nodes as (inventory host, address) in rank order: the gang whose supervisors watch each other.
    nodes: tuple[tuple[str, str], ...] = ()
    # Seconds between heartbeats (UDP, on master_port's number).
    heartbeat_s: float = Defaults.HEARTBEAT_S
    # Heartbeats a node may miss before the others count it lost and stop.
    heartbeat_misses: int = Defaults.HEARTBEAT_MISSES
    # Seconds a node waits for another node's first heartbeat.
    join_timeout_s: float = Defaults.JOIN_TIMEOUT_S
    # Seconds of silence in every node's log after which the job counts as hung and is stopped; 0 is off.
    hang_timeout_s: int = 0
    # Before a node's first output of an attempt, its silence counts towards hang_timeout_s only past this.
    hang_startup_s: float = 0.0
    # The interface of this node's cluster address: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME where nothing sets them.
    iface: str = ""
    # Launches of the whole gang again after a failure, each on the next of restart_ports.
    max_restarts: int = 0
    restart_ports: tuple[int, ...] = ()
    # torchrun, deepspeed, mpirun, horovodrun or none (see launchers.py).
    launcher: str = "torchrun"
    # Ranks on each node, in rank order (the hostfile's slots and the rank manifest's ranges).
    slots: tuple[int, ...] = ()

    def as_dict(self) -> dict:
        data = asdict(self)
        data["script_args"] = list(self.script_args)
        data["env"] = dict(self.env)
        data["env_files"] = list(self.env_files)
        data["nodes"] = [list(node) for node in self.nodes]
        data["restart_ports"] = list(self.restart_ports)
        data["slots"] = list(self.slots)
        return data


def job_environment(spec: JobSpec, job_dir: str = "") -> dict[str, str]:
    """The variables every process of the job sees, besides the ones the launcher sets per rank.

    The launcher contract (launchers.contract_env) first, then the user's own variables, which win.
    """
    env = launchers.contract_env(spec, job_dir) if job_dir else {}
    env.update(spec.env)
    env.update(
        {
            "GPUFLEET_JOB": spec.job,
            "GPUFLEET_RANK_STARTS": launchers.rank_starts(spec),
            "NODE_RANK": str(spec.node_rank),
            "NNODES": str(spec.nnodes),
        }
    )
    return env


def render_env_file(env: dict[str, str]) -> str:
    """``export NAME='value'`` lines, sorted, each value shell-quoted."""
    lines = ["# Environment of this gpufleet job; sourced by launch.sh."]
    for name in sorted(env):
        if not ENV_NAME_RE.match(name):
            raise ValueError("%r is not a valid environment variable name" % name)
        lines.append("export %s=%s" % (name, shlex.quote(env[name])))
    return "\n".join(lines) + "\n"


def secret_env_sha256(secret_env: dict[str, str]) -> str:
    """A digest that changes with the secrets, for comparing launches without keeping the values."""
    return hashlib.sha256(render_env_file(secret_env).encode()).hexdigest() if secret_env else ""


def iface_lines(iface: str) -> str:
    """Shell lines that name the cluster address's interface for NCCL and Gloo, unless already named above."""
    if not iface:
        return ""
    if not IFACE_RE.match(iface):
        raise ValueError("%r is not a network interface name" % iface)
    quoted = iface
    return ("# The interface of this node's cluster address, unless an environment file or the job named one:\n"
            "# Gloo and NCCL would otherwise use the address the hostname resolves to (127.0.1.1 on many servers).\n"
            'export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-%s}" GLOO_SOCKET_IFNAME="${GLOO_SOCKET_IFNAME:-%s}"\n'
            % (quoted, quoted))


def render_launch_script(spec: JobSpec, env_path: str, secret_env_path: str | None = None) -> str:
    """The bash script the supervisor runs; it can also be run by hand to repeat this node's launch."""
    job_dir = os.path.dirname(env_path)
    command = launchers.command(spec, job_dir, launchers.exported_names(job_environment(spec, job_dir)))
    if command is None:
        body = ('echo "gpufleet: node_rank %d takes part through node 0\'s %s; nothing to start here"\n'
                % (spec.node_rank, spec.launcher))
    else:
        body = "%sexec %s\n" % (launchers.iface_prelude(spec.launcher), launchers.render_command(command))
    return (
        "#!/bin/bash\n"
        "# gpufleet job %(job)s (%(launcher)s): node_rank %(rank)d of %(nnodes)d nodes, world size %(world)d.\n"
        "# Generated by gpufleet.cluster.launch; it is rewritten at every launch.\n"
        "set -eu\n"
        "cd %(workdir)s\n"
        "%(env_files)s"
        ". %(env)s\n"
        "%(secret_env)s"
        "%(iface)s"
        "# The supervisor gives each attempt its master port (a restart takes the next of restart_ports).\n"
        "GPUFLEET_MASTER_PORT=${GPUFLEET_MASTER_PORT:-%(port)d}\n"
        "export MASTER_PORT=$GPUFLEET_MASTER_PORT MLP_WORKER_0_PORT=$GPUFLEET_MASTER_PORT\n"
        "%(body)s"
    ) % {
        "job": spec.job,
        "launcher": spec.launcher,
        "rank": spec.node_rank,
        "nnodes": spec.nnodes,
        "world": spec.world_size,
        "workdir": shlex.quote(spec.workdir),
        "env": shlex.quote(env_path),
        "secret_env": ". %s\n" % shlex.quote(secret_env_path) if spec.secret_env_sha256 and secret_env_path else "",
        "env_files": "".join("if [ -r %s ]; then . %s; fi\n" % (shlex.quote(f), shlex.quote(f)) for f in spec.env_files),
        "port": spec.master_port,
        "iface": iface_lines(spec.iface),
        "body": body,
    }
