# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""JobSpec: everything that defines one node's part of a job (written to job.json; two equal specs are the same
launch). Made by the launch module, rendered by launch_script, read back by the supervisor as a dict."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import Defaults
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.restart_policy import DEFAULT_RESTART_ON


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
    # The spare nodes (inventory host, address), in inventory order: each stands by to take a lost node's rank
    # (spares.py). On a spare's own spec, node_rank is len(nodes) + its index.
    spares: tuple[tuple[str, str], ...] = ()
    # Seconds between heartbeats (UDP, on master_port's number).
    heartbeat_s: float = Defaults.HEARTBEAT_S
    # Heartbeats a node may miss before the others count it lost and stop.
    heartbeat_misses: int = Defaults.HEARTBEAT_MISSES
    # Seconds a node waits for another node's first heartbeat.
    join_timeout_s: float = Defaults.JOIN_TIMEOUT_S
    # Seconds of silence in every node's log after which the job counts as hung and is stopped; 0 is off.
    hang_timeout_s: int = 0
    # Before a node's first output of an attempt, its silence counts towards hang_timeout_s only past this.
    hang_startup_s: float = Defaults.HANG_STARTUP_S
    # The interface of this node's cluster address: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME where nothing sets them.
    iface: str = ""
    # Launches of the whole gang again after a failure, each on the next of restart_ports.
    max_restarts: int = 0
    restart_ports: tuple[int, ...] = ()
    # A restart that fails the same way within this many seconds of its start stops the restarts (gang_rules.py); an
    # attempt that ran this long gives the restart budget back.
    min_progress_s: float = Defaults.MIN_PROGRESS_S
    # The causes a failed attempt is restarted on: restart_policy.CAUSES and exit codes (as words).
    restart_on: tuple[str, ...] = DEFAULT_RESTART_ON
    # The fewest nodes the job goes on with when a node is lost or faulted and no spare is left, below the node count
    # (0: all of them, the job ends); launchers.RESIZABLE may change size between attempts (spares.reshape).
    min_nodes: int = 0
    # torchrun, deepspeed, mpirun, horovodrun or none (see launchers.py).
    launcher: str = "torchrun"
    # Ranks on each node, in rank order (the hostfile's slots and the rank manifest's ranges).
    slots: tuple[int, ...] = ()
    # ssh: the launch starts the supervisor, detached; slurm: a Slurm job step starts it (slurm_jobs.py), on the
    # Slurm node slurm_node (the one this folder is for), as part of Slurm job slurm_job_id.
    scheduler: str = "ssh"
    slurm_node: str = ""
    slurm_job_id: str = ""
    # With a container image (module_utils/_runtime/containers.py): the engine (docker, podman), the image as the user named
    # it and its ID (which every node holds; the container runs the ID, so a tag moved meanwhile changes nothing),
    # whether it gets the node's GPUs, and the user's volumes, ulimits and engine arguments. The container's name
    # comes from the run (containers.container_name).
    # The node's GPUs while the job runs (gpu_watch.py): seconds between samples into gpus.csv (0: none), and where the
    # kernel's messages are followed for new XIDs.
    health_sample_s: float = Defaults.GPU_SAMPLE_S
    health_kernel_log: str = "/dev/kmsg"
    # Where the supervisor writes the part's state as Prometheus metrics for the node exporter (job_metrics.py); empty:
    # nowhere.
    health_metrics_dir: str = ""
    container_engine: str = ""
    container_image: str = ""
    container_image_id: str = ""
    container_gpus: bool = False
    container_volumes: tuple[str, ...] = ()
    container_ulimits: tuple[str, ...] = ()
    container_run_args: tuple[str, ...] = ()

    @property
    def elastic(self) -> bool:
        """Whether an attempt's place may differ from the launch's: a spare may take a node's rank, or the gang may
        go on without a node (min_nodes); launch.sh then takes it from the supervisor (launchers.place_prelude)."""
        return bool(self.spares) or self.min_nodes > 0

    def as_dict(self) -> dict:
        data = asdict(self)
        data["script_args"] = list(self.script_args)
        data["env"] = dict(self.env)
        data["env_files"] = list(self.env_files)
        data["nodes"] = [list(node) for node in self.nodes]
        data["spares"] = [list(node) for node in self.spares]
        data["restart_ports"] = list(self.restart_ports)
        data["restart_on"] = list(self.restart_on)
        data["slots"] = list(self.slots)
        for name in ("container_volumes", "container_ulimits", "container_run_args"):
            data[name] = list(getattr(self, name))
        return data
