# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The launch module's options (their argument spec: module_utils/_job/launch_options.py; a unit test holds the two
to each other and to JobSpec)."""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """gpufleet.cluster.launch_options."""

    DOCUMENTATION = r"""
options:
  job:
    description: Name of the job; one folder name (letters, digits, C(.), C(_), C(-)).
    type: str
    required: true
  run_id:
    description: Token that identifies this launch; generated when not given.
    type: str
  node_rank:
    description: This node's rank, 0 for the master.
    type: int
    required: true
  nnodes:
    description: Number of nodes in the job.
    type: int
    required: true
  nproc_per_node:
    description: Processes (ranks) on this node. Defaults to the number of GPUs C(nvidia-smi) lists, or 1 without GPUs.
    type: int
  world_size:
    description: Total number of ranks of the job; defaults to O(nnodes) times O(nproc_per_node).
    type: int
  master_addr:
    description: IP address of the master node (node_rank 0), reachable from every node.
    type: str
    required: true
  master_port:
    description: TCP port of the rendezvous on the master node.
    type: int
    default: 29500
  python:
    description: The Python interpreter (a path, possibly inside a virtual environment, or a command name) that has torch.
    type: str
    default: python3
  script:
    description: The training script on the node; relative to O(workdir) when not absolute.
    type: str
    required: true
  script_content:
    description:
      - The training script's text. When given, it is written (owner-only) to O(script) under O(workdir) before the
        launch, so one call both stages and starts a single-file script.
      - Part of the job's settings, so a different script for a running job of the same name is an error.
    type: str
  script_args:
    description: Arguments of the training script, one list item per argument; each is quoted for the shell.
    type: list
    elements: str
    default: []
  workdir:
    description: Working directory of the training. Defaults to the script's folder when the script path is absolute, else the job folder.
    type: path
  env:
    description: Extra environment variables for every rank. Written to the job's C(env) file, readable by its owner only.
    type: dict
    default: {}
  secret_env:
    description:
      - Secret environment variables for every rank (tokens, keys). Written to the job's C(secret_env) file, readable
        by its owner only, and sourced by the launch script; never put in an argument list, the launch script,
        the job's spec or this module's output, and masked in Ansible's logs.
    type: dict
    default: {}
  env_files:
    description:
      - Environment files on the node sourced before O(env), when they exist (the C(nccl_env) role writes
        C(/etc/gpufleet/nccl.env)). O(env) wins over them.
    type: list
    elements: path
    default: []
  iface:
    description:
      - The network interface that carries this node's cluster address (as M(gpufleet.cluster.node_probe) finds it).
        C(NCCL_SOCKET_IFNAME) and C(GLOO_SOCKET_IFNAME) are set to it in the launch script unless an environment file
        or O(env) already sets them, so that Gloo and NCCL never use the address the hostname resolves to
        (C(127.0.1.1) on a Debian or Ubuntu server gpufleet did not provision).
    type: str
    default: ""
  launcher:
    description:
      - What starts the ranks. C(torchrun) and C(deepspeed) (with C(--no_ssh)) run on every node with this node's
        rank. C(mpirun) and C(horovodrun) run on node 0 only, over the job's hostfile; on the other nodes the
        supervisor starts nothing and ends this node's ranks when node 0's part ends. C(none) runs the script itself
        once per node (a script written for a training platform, which starts its own launcher).
      - Whatever the launcher, the processes see MASTER_ADDR, MASTER_PORT, WORLD_SIZE, NODE_RANK, RANK and
        LOCAL_RANK, and the MLP_* variables of training platforms.
    type: str
    default: torchrun
    choices: [torchrun, deepspeed, mpirun, horovodrun, none]
  gang:
    description:
      - The job's nodes and how their supervisors watch each other.
    type: dict
    suboptions:
      nodes:
        description:
          - The job's nodes in rank order, each a list of two items, inventory name and address. When given, this
            node's supervisor joins the gang - it sends a heartbeat to every other node's supervisor (UDP, on the port
            number of the job's first O(master_port), at each address) and stops this node's part as soon as another
            node's part fails or another node misses O(gang.heartbeat_misses) heartbeats, whether or not a controller
            is still connected.
          - Leave it out for a job whose nodes are not to watch each other.
        type: list
        elements: list
      spares:
        description:
          - The job's spare nodes, in inventory order, each a list of two items, inventory name and address (torchrun
            jobs of two nodes or more). A spare's supervisor (O(node_rank) is then O(nnodes) plus the spare's index)
            runs no rank; it hears the gang's heartbeats, and when a node is lost or its GPU fails with a restart
            left, the first ready spare takes that node's rank from the next attempt on.
          - Every node of the job is given the same list, so that each hears the spares and can tell them apart.
        type: list
        elements: list
        default: []
      key:
        description:
          - Key (the same on every node of the job) that authenticates the heartbeats with HMAC-SHA256. Required with
            O(gang.nodes). Written to an owner-only file; never in an argument list or this module's output.
        type: str
      slots:
        description: Ranks on each node of O(gang.nodes), in rank order, for the hostfile and the rank manifest; O(nproc_per_node) on every node when empty.
        type: list
        elements: int
        default: []
      heartbeat_s:
        description: Seconds between two heartbeats.
        type: float
        default: 1
      heartbeat_misses:
        description: Heartbeats in a row a node may miss before the others count it lost and stop.
        type: int
        default: 5
      join_timeout_s:
        description: Seconds to wait for another node's first heartbeat before counting it lost.
        type: float
        default: 120
  supervision:
    description:
      - How the node's supervisor starts, stops, watches and restarts the job.
    type: dict
    suboptions:
      grace_s:
        description:
          - Seconds a rank has from its stop notice (the file C(GPUFLEET_STOP_FILE) names, written before SIGTERM) to
            SIGKILL when the job is stopped (by a user, the gang, the watchdog or a maintenance).
        type: float
        default: 5
      start_timeout_s:
        description: Seconds to wait for the supervisor to report the job running.
        type: float
        default: 15
      hang_timeout_s:
        description:
          - Progress watchdog. When no node's log has grown for this many seconds, the job counts as hung and is
            stopped on every node, with the state C(hung). 0 turns the watchdog off.
        type: int
        default: 0
      hang_startup_s:
        description:
          - Allowance for an attempt's silent start (imports, data loading, rendezvous). Before a node's first output
            of an attempt, its silence counts towards O(supervision.hang_timeout_s) only past this many seconds.
          - Under torchrun, DeepSpeed and mpirun, the first output is a rank's first line; the launcher's own lines
            before it (torchrun's OMP_NUM_THREADS banner) do not end the allowance.
        type: float
        default: 120
      max_restarts:
        description:
          - After a failure or a hang, launch the whole gang again, up to this many times in a row, on the next port
            of O(supervision.restart_ports) each time, with C(GPUFLEET_ATTEMPT) and C(GPUFLEET_RESTART_REASON) (why)
            in the ranks' environment. Not after a stop, nor for a cause O(supervision.restart_on) does not name, nor
            for a lost node or a hardware fault of a GPU without a spare to take its place (unless
            O(supervision.min_nodes) lets the gang go on without it).
          - An attempt that ran O(supervision.min_progress_s) gives the budget back, so that this counts failures
            close together, not over a week; the ports are then used again from the first.
        type: int
        default: 0
      min_nodes:
        description:
          - The fewest nodes the job goes on with. When a node is lost or its GPU faults and no spare is ready to
            take its place, the next attempt runs on the nodes that remain, renumbered in their order, with the node
            count, the world size and the MLP_* names of them changed to match and the hostfile rewritten, as long as
            at least this many remain. A node left out is not taken back into the running job; the next launch uses
            it again.
          - V(0) (or the node count) is all of them, the job ends instead. Below the node count only with launcher
            C(torchrun) or C(none); C(deepspeed), C(mpirun) and C(horovodrun) fix the world at the launch.
        type: int
        default: 0
      min_progress_s:
        description:
          - A restart that fails the same way as the attempt before it (the same nodes failing with the same exit
            code or signal, the same hardware fault, or a hang again) within this many seconds of its start made
            no progress, and the restarts stop there, restarts remaining or not. 0 turns this off.
          - An attempt that ran this many seconds before it failed gives the restart budget back
            (O(supervision.max_restarts) restarts again).
        type: float
        default: 300
      restart_on:
        description:
          - The causes a failed attempt is restarted on. C(node_lost) (a node stopped answering, with a spare to take
            its place), C(hang), C(hardware_fault) (an XID, with a spare), C(rank_exit) (a rank's failure), or an exit
            code from 1 to 255 (a rank's failure with that code; a rank killed by a signal exits with 128 plus its
            number, 137 for SIGKILL).
          - Whatever restart_on says, a rank that fails twice in a row at the same place (the innermost frame of
            the script's own in its traceback) with the same exit code is the script's own failure and is not
            restarted again.
        type: list
        elements: str
        default: [node_lost, hang, hardware_fault, rank_exit]
      restart_ports:
        description: Master ports of the relaunches, in order; as many as O(supervision.max_restarts).
        type: list
        elements: int
        default: []
  health:
    description:
      - How the node's supervisor watches the node's GPUs while the job runs (module_utils/_runtime/gpu_watch.py), and
        where it reports the job's state for Prometheus.
    type: dict
    suboptions:
      sample_s:
        description:
          - Seconds between two samples of the GPUs (utilisation, memory, power, temperature, SM clock, clock event
            reasons) into C(gpus.csv) in the job folder; 0 samples nothing. Nothing is sampled on a node without
            nvidia-smi.
        type: float
        default: 10
      kernel_log:
        description:
          - Where the kernel's messages are followed for new XIDs (C(/dev/kmsg), or a file in its format). A new
            hardware or driver XID while the job runs fails this node's part at once, naming the GPU and the XID,
            and the other nodes stop theirs.
        type: str
        default: /dev/kmsg
      metrics_dir:
        description:
          - Where the supervisor writes this node's part of the job as Prometheus metrics (C(gpufleet_job_<user>_<job>.prom))
            each time its state changes (module_utils/_runtime/job_metrics.py), the node exporter's textfile
            directory. Empty writes none, nor does a folder the node lacks; one that cannot be written is said once
            in the job's events, and the job goes on.
        type: str
        default: ""
  scheduler:
    description:
      - C(ssh) starts the supervisor now, detached. C(slurm) prepares the job folder only, with the state C(queued)
        and C(slurm_task.sh), which the Slurm job O(slurm.job_id)'s step runs on the node (srun), starting the
        supervisor in the foreground when Slurm starts the job; the master port is then chosen on node 0 at
        that moment, unless O(master_port) is given.
    type: str
    default: ssh
    choices: [ssh, slurm]
  slurm:
    description:
      - Where this node's part runs in Slurm, with O(scheduler=slurm).
    type: dict
    suboptions:
      node:
        description: Slurm's name of this node (C(SLURMD_NODENAME)); the task refuses to run on another.
        type: str
        required: true
      job_id:
        description: The id of the (held) Slurm job that will run the job.
        type: str
        required: true
  container:
    description:
      - Run this node's part inside one container of O(container.image_id); left out, it runs on the host.
      - The container gets the host network and IPC namespace, the O(container.ulimits), the GPUs with
        O(container.gpus), the InfiniBand devices where C(/dev/infiniband) exists, the job folder, the working
        directory and the environment files mounted at the same paths, and a label with the run token. Only the run's
        own variables are passed, by name; the job's environment and secrets are sourced from the job folder inside
        the container, so none of their values is in the container's configuration.
      - The supervisor ends the container through the engine (C(stop), then C(rm --force)), never by process name.
    type: dict
    suboptions:
      engine:
        description: The engine, C(docker) or C(podman), or a path to one.
        type: str
        required: true
      image:
        description: The image as the user named it (shown by status); the container runs O(container.image_id).
        type: str
        default: ""
      image_id:
        description: The ID of the image every node holds (C(docker image inspect --format '{{.Id}}')).
        type: str
        required: true
      gpus:
        description: Give the container every GPU of the node (CDI C(nvidia.com/gpu=all) with Podman, C(--gpus all) with Docker).
        type: bool
        default: false
      volumes:
        description: More C(--volume) arguments, C(host:container[:options]).
        type: list
        elements: str
        default: []
      ulimits:
        description: The container's C(--ulimit) arguments; empty is unlimited locked memory and a 64 MiB stack.
        type: list
        elements: str
        default: []
      run_args:
        description: More arguments of the engine's C(run), before the image; never secrets, which would show in the container's configuration.
        type: list
        elements: str
        default: []
"""
