#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: launch
short_description: Launch one node's part of a multi-node torchrun job, detached and supervised
version_added: 0.1.0
description:
  - Renders the node's launch script (torchrun with a static rendezvous and this node's rank) and the job's
    environment file into C(<jobs_dir>/<job>/), then starts a supervisor in its own session that runs the
    script, appends its output to C(job.log) and records the state, exit code and timestamps when it ends.
  - Every process of the node's part of the run carries a token unique to it, C(GPUFLEET_RUN_TOKEN) (the run id
    and the node rank); stopping the job signals only processes that carry it, never processes found by name.
    C(GPUFLEET_RUN_ID), the same on every node, tells the training which launch it belongs to.
  - The same job already running with the same settings is left alone (C(changed=false)). The same job name
    running with other settings is an error. A job that has ended is launched again; its earlier log is kept
    as C(job.<run_id>.log).
  - Usually called by C(gpufleet.cluster.train) (playbook C(train.yml)), which computes ranks and ports for
    all nodes; it can also be used on its own.
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.cluster.job_folder
attributes:
  check_mode:
    support: full
    details: Renders the launch script and reports the difference; starts nothing.
  diff_mode:
    support: full
    details: The difference of the launch script.
  platform:
    support: full
    platforms: posix
options:
  job:
    description: Name of the job; one folder name (letters, digits, C(.), C(_), C(-)).
    type: str
    required: true
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
  run_id:
    description: Token that identifies this launch; generated when not given.
    type: str
  grace_s:
    description: Seconds between SIGTERM and SIGKILL when the job is stopped (by a user, the gang or the watchdog).
    type: float
    default: 5
  nodes:
    description:
      - The job's nodes in rank order, each a list of two items, inventory name and address. When given, this
        node's supervisor joins the gang - it sends a heartbeat to every other node's supervisor (UDP, on the port
        number of the job's first O(master_port), at each address) and stops this node's part as soon as another node's part fails or another
        node misses O(heartbeat_misses) heartbeats, whether or not a controller is still connected.
      - Leave it out for a job whose nodes are not to watch each other.
    type: list
    elements: list
  gang_key:
    description:
      - Key (the same on every node of the job) that authenticates the heartbeats with HMAC-SHA256. Required with
        O(nodes). Written to an owner-only file; never in an argument list or this module's output.
    type: str
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
  hang_timeout_s:
    description:
      - Progress watchdog. When no node's log has grown for this many seconds, the job counts as hung and is
        stopped on every node, with the state C(hung). 0 turns the watchdog off.
    type: int
    default: 0
  hang_startup_s:
    description:
      - Allowance for an attempt's silent start (imports, data loading, rendezvous). Before a node's first output
        of an attempt, its silence counts towards O(hang_timeout_s) only past this many seconds.
    type: float
    default: 0
  iface:
    description:
      - The network interface that carries this node's cluster address (as M(gpufleet.cluster.node_probe) finds it).
        C(NCCL_SOCKET_IFNAME) and C(GLOO_SOCKET_IFNAME) are set to it in the launch script unless an environment file
        or O(env) already sets them, so that Gloo and NCCL never use the address the hostname resolves to
        (C(127.0.1.1) on a Debian or Ubuntu server gpufleet did not provision).
    type: str
    default: ""
  max_restarts:
    description:
      - After a failure, launch the whole gang again, up to this many times, on the next port of
        O(restart_ports) each time. Not after a stop, a hang or a lost node.
    type: int
    default: 0
  restart_ports:
    description: Master ports of the relaunches, in order; as many as O(max_restarts).
    type: list
    elements: int
    default: []
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
  slots:
    description: Ranks on each node of O(nodes), in rank order, for the hostfile and the rank manifest; O(nproc_per_node) on every node when empty.
    type: list
    elements: int
    default: []
  start_timeout_s:
    description: Seconds to wait for the supervisor to report the job running.
    type: float
    default: 15
  scheduler:
    description:
      - C(ssh) starts the supervisor now, detached. C(slurm) prepares the job folder only, with the state C(queued)
        and C(slurm_task.sh), which the Slurm job O(slurm_job_id)'s step runs on the node (srun), starting the
        supervisor in the foreground when Slurm starts the job; the master port is then chosen on node 0 at
        that moment, unless O(master_port) is given.
    type: str
    default: ssh
    choices: [ssh, slurm]
  slurm_node:
    description: With O(scheduler=slurm), Slurm's name of this node (C(SLURMD_NODENAME)); the task refuses to run on another.
    type: str
    default: ""
  slurm_job_id:
    description: With O(scheduler=slurm), the id of the (held) Slurm job that will run the job.
    type: str
    default: ""
  container_engine:
    description:
      - Run this node's part inside one container of O(container_image_id) with this engine (C(docker) or
        C(podman), or a path to one); empty runs it on the host.
      - The container gets the host network and IPC namespace, the O(container_ulimits), the GPUs with
        O(container_gpus), the InfiniBand devices where C(/dev/infiniband) exists, the job folder, the working
        directory and the environment files mounted at the same paths, and a label with the run token. Only the run's
        own variables are passed, by name; the job's environment and secrets are sourced from the job folder inside
        the container, so none of their values is in the container's configuration.
      - The supervisor ends the container through the engine (C(stop), then C(rm --force)), never by process name.
    type: str
    default: ""
  container_image:
    description: The image as the user named it (shown by status); the container runs O(container_image_id).
    type: str
    default: ""
  container_image_id:
    description: The ID of the image every node holds (C(docker image inspect --format '{{.Id}}')).
    type: str
    default: ""
  container_gpus:
    description: Give the container every GPU of the node (CDI C(nvidia.com/gpu=all) with Podman, C(--gpus all) with Docker).
    type: bool
    default: false
  container_volumes:
    description: More C(--volume) arguments, C(host:container[:options]).
    type: list
    elements: str
    default: []
  container_ulimits:
    description: The container's C(--ulimit) arguments; empty is unlimited locked memory and a 64 MiB stack.
    type: list
    elements: str
    default: []
  container_run_args:
    description: More arguments of the engine's C(run), before the image; never secrets, which would show in the container's configuration.
    type: list
    elements: str
    default: []
seealso:
  - module: gpufleet.cluster.job_status
  - module: gpufleet.cluster.job_stop
"""

EXAMPLES = r"""
- name: Launch node 1 of a 2-node job, 8 ranks per node
  gpufleet.cluster.launch:
    job: llama-ft
    node_rank: 1
    nnodes: 2
    nproc_per_node: 8
    master_addr: 192.0.2.10
    master_port: 29500
    python: /opt/venvs/train/bin/python
    script: /shared/code/train.py
    script_args: ["--epochs", "3", "--run-name", "first try"]
    env:
      NCCL_DEBUG: WARN
"""

RETURN = r"""
node_rank:
  description: The node's rank.
  returned: always
  type: int
  sample: 1
world_size:
  description: Total number of ranks of the job.
  returned: always
  type: int
  sample: 16
pid:
  description: PID of the node's torchrun agent (the leader of the job's process group); null in check mode.
  returned: always
  type: int
  sample: 41822
run_id:
  description: Id of this launch, the same on every node; in every process's environment as C(GPUFLEET_RUN_ID).
  returned: always
  type: str
  sample: 3f2c0a6e9b2d4d8e8a52c5b1d0f3e7aa
job_dir:
  description: The job's folder on the node.
  returned: always
  type: str
  sample: /home/ml/.gpufleet/jobs/llama-ft
log_path:
  description: The node's training log.
  returned: always
  type: str
  sample: /home/ml/.gpufleet/jobs/llama-ft/job.log
script_path:
  description: The rendered launch script.
  returned: always
  type: str
  sample: /home/ml/.gpufleet/jobs/llama-ft/launch.sh
cmd:
  description: The full command the launch script runs.
  returned: always
  type: list
  elements: str
  sample: ["/opt/venvs/train/bin/python", "-m", "torch.distributed.run", "--nnodes=2", "--node-rank=1"]
state:
  description: The job's state on this node after the call (C(running); C(queued) with O(scheduler=slurm); C(absent) in check mode).
  returned: always
  type: str
  sample: running
"""

import hashlib
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils import (
    containers,
    job_processes,
    jobs,
    launchers,
    nvidia_node,
    slurm_jobs,
    supervisor_bundle,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.job_states import SINGLE_ENTRY, Defaults
from ansible_collections.gpufleet.cluster.plugins.module_utils.job_spec import JobSpec
from ansible_collections.gpufleet.cluster.plugins.module_utils.launch_script import (
    ENV_NAME_RE,
    IFACE_RE,
    secret_env_sha256,
)


def supervisor_source() -> str:
    return supervisor_bundle.shipped_source()


def build_spec(params: dict) -> JobSpec:
    nproc = params["nproc_per_node"]
    if nproc is None:
        nproc = nvidia_node.nvidia_smi_gpus()["count"] or 1
    script = params["script"]
    workdir = params["workdir"] or (os.path.dirname(script) if os.path.isabs(script) else None)
    path = jobs.job_dir(params["jobs_dir"], params["job"])
    return JobSpec(
        job=params["job"],
        node_rank=params["node_rank"],
        nnodes=params["nnodes"],
        nproc_per_node=nproc,
        world_size=params["world_size"] or params["nnodes"] * nproc,
        master_addr=params["master_addr"],
        master_port=params["master_port"],
        python=params["python"],
        script=script,
        workdir=workdir or path,
        script_args=tuple(params["script_args"]),
        script_sha256=hashlib.sha256(params["script_content"].encode()).hexdigest() if params["script_content"] else "",
        env=tuple(sorted((str(k), str(v)) for k, v in params["env"].items())),
        grace_s=params["grace_s"],
        env_files=tuple(params["env_files"]),
        secret_env_sha256=secret_env_sha256(_as_strings(params["secret_env"])),
        nodes=tuple((str(node[0]), str(node[1])) for node in params["nodes"] or []),
        heartbeat_s=params["heartbeat_s"],
        heartbeat_misses=params["heartbeat_misses"],
        join_timeout_s=params["join_timeout_s"],
        hang_timeout_s=params["hang_timeout_s"],
        hang_startup_s=params["hang_startup_s"],
        iface=params["iface"],
        max_restarts=params["max_restarts"],
        restart_ports=tuple(params["restart_ports"]),
        launcher=params["launcher"],
        slots=tuple(params["slots"]),
        scheduler=params["scheduler"],
        slurm_node=params["slurm_node"],
        slurm_job_id=params["slurm_job_id"],
        container_engine=params["container_engine"],
        container_image=params["container_image"],
        container_image_id=params["container_image_id"],
        container_gpus=params["container_gpus"],
        container_volumes=tuple(params["container_volumes"]),
        container_ulimits=tuple(params["container_ulimits"]),
        container_run_args=tuple(params["container_run_args"]),
    )


def _as_strings(env: dict) -> dict[str, str]:
    return {str(key): str(value) for key, value in env.items()}


def validate(module: AnsibleModule, params: dict) -> None:
    if not jobs.JOB_NAME_RE.match(params["job"]):
        module.fail_json(msg="job: %r is not a valid job name (letters, digits, '.', '_', '-'; no '/', no spaces)" % params["job"])
    if not 0 <= params["node_rank"] < params["nnodes"]:
        module.fail_json(msg="node_rank: %d is outside 0..nnodes-1 (nnodes=%d)" % (params["node_rank"], params["nnodes"]))
    if params["nproc_per_node"] is not None and params["nproc_per_node"] < 1:
        module.fail_json(msg="nproc_per_node: must be at least 1, got %d" % params["nproc_per_node"])
    if params["script_content"] is not None and os.path.isabs(params["script"]):
        module.fail_json(msg="script: must be relative to workdir when script_content is given, got %s" % params["script"])
    if not 1 <= params["master_port"] <= 65535 and not (params["scheduler"] == "slurm" and params["master_port"] == 0):
        module.fail_json(msg="master_port: %d is not a TCP port" % params["master_port"])
    if params["scheduler"] == "slurm":
        if not params["slurm_node"] or not params["slurm_job_id"].isdigit():
            module.fail_json(msg="scheduler: slurm needs slurm_node (got %r) and a numeric slurm_job_id (got %r)"
                             % (params["slurm_node"], params["slurm_job_id"]))
        problem = slurm_jobs.launcher_problem(params["launcher"])
        if problem:
            module.fail_json(msg=problem)
    problem = containers.launch_problem(params)
    if problem:
        module.fail_json(msg=problem)
    if params["iface"] and not IFACE_RE.match(params["iface"]):
        module.fail_json(msg="iface: %r is not a network interface name" % params["iface"])
    nodes = params["nodes"] or []
    if nodes:
        if len(nodes) != params["nnodes"] or any(len(node) != 2 for node in nodes):
            module.fail_json(msg="nodes: must list all %d nodes as [name, address] pairs" % params["nnodes"])
    # Under Slurm the relaunch ports are chosen with the master port, when Slurm starts the job.
    if params["max_restarts"] < 0 or (len(params["restart_ports"]) < params["max_restarts"]
                                      and params["scheduler"] != "slurm"):
        module.fail_json(msg="max_restarts: %d needs as many restart_ports, got %d"
                         % (params["max_restarts"], len(params["restart_ports"])))
    if params["slots"] and len(params["slots"]) != len(nodes):
        module.fail_json(msg="slots: must give the ranks of each of the %d nodes, got %d" % (len(nodes), len(params["slots"])))
    if params["launcher"] in SINGLE_ENTRY and params["nnodes"] > 1 and not nodes:
        module.fail_json(msg="launcher: %s needs nodes, the job's nodes in rank order" % params["launcher"])
    if params["hang_timeout_s"] < 0:
        module.fail_json(msg="hang_timeout_s: must be 0 (off) or a number of seconds, got %d" % params["hang_timeout_s"])
    for option in ("env", "secret_env"):
        bad = [key for key in params[option] if not ENV_NAME_RE.match(str(key))]
        if bad:
            module.fail_json(msg="%s: %s not a valid environment variable name" % (option, ", ".join(repr(k) for k in bad)))


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "job": {"type": "str", "required": True},
            **jobs.jobs_dir_spec(),
            "node_rank": {"type": "int", "required": True},
            "nnodes": {"type": "int", "required": True},
            "nproc_per_node": {"type": "int"},
            "world_size": {"type": "int"},
            "master_addr": {"type": "str", "required": True},
            "master_port": {"type": "int", "default": 29500},
            "python": {"type": "str", "default": "python3"},
            "script": {"type": "str", "required": True},
            "script_content": {"type": "str"},
            "script_args": {"type": "list", "elements": "str", "default": []},
            "workdir": {"type": "path"},
            "env": {"type": "dict", "default": {}},
            "env_files": {"type": "list", "elements": "path", "default": []},
            "secret_env": {"type": "dict", "default": {}, "no_log": True},
            "run_id": {"type": "str"},
            "grace_s": {"type": "float", "default": Defaults.GRACE_S},
            "nodes": {"type": "list", "elements": "list"},
            "gang_key": {"type": "str", "no_log": True},
            "heartbeat_s": {"type": "float", "default": Defaults.HEARTBEAT_S},
            "heartbeat_misses": {"type": "int", "default": Defaults.HEARTBEAT_MISSES},
            "join_timeout_s": {"type": "float", "default": Defaults.JOIN_TIMEOUT_S},
            "hang_timeout_s": {"type": "int", "default": 0},
            "hang_startup_s": {"type": "float", "default": 0},
            "iface": {"type": "str", "default": ""},
            "max_restarts": {"type": "int", "default": 0},
            "restart_ports": {"type": "list", "elements": "int", "default": []},
            "launcher": {"type": "str", "default": "torchrun",
                         "choices": list(launchers.LAUNCHERS)},
            "slots": {"type": "list", "elements": "int", "default": []},
            "start_timeout_s": {"type": "float", "default": 15},
            "scheduler": {"type": "str", "default": "ssh", "choices": list(slurm_jobs.SCHEDULERS)},
            "slurm_node": {"type": "str", "default": ""},
            "slurm_job_id": {"type": "str", "default": ""},
            "container_engine": {"type": "str", "default": ""},
            "container_image": {"type": "str", "default": ""},
            "container_image_id": {"type": "str", "default": ""},
            "container_gpus": {"type": "bool", "default": False},
            "container_volumes": {"type": "list", "elements": "str", "default": []},
            "container_ulimits": {"type": "list", "elements": "str", "default": []},
            "container_run_args": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    params = module.params
    validate(module, params)
    spec = build_spec(params)
    run_id = params["run_id"] or job_processes.new_run_id()
    try:
        result = jobs.start(
            jobs.job_dir(params["jobs_dir"], params["job"]),
            spec,
            run_id,
            supervisor_source(),
            module.check_mode,
            start_timeout_s=params["start_timeout_s"],
            script_content=params["script_content"],
            secret_env=_as_strings(params["secret_env"]),
            gang_key=params["gang_key"],
        )
    except (jobs.JobError, OSError) as exc:
        module.fail_json(msg=str(exc))
    if not module._diff:  # pylint: disable=protected-access
        result.pop("diff", None)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
