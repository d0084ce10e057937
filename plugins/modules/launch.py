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
  - Where the play already knows the node's Python (set, or found by an earlier module run such as
    M(gpufleet.cluster.node_probe)), the launch runs without a module run, from the collection's node-side code
    kept compiled on the node under C($XDG_CACHE_HOME/gpufleet/runtime/) (C(~/.cache) by default), one folder per
    version of that code, the four newest kept; same options, same result. Otherwise, and for a delegated or
    async task, the module runs as any module does.
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - gpufleet.cluster.job_folder
  - gpufleet.cluster.launch_options
attributes:
  action:
    support: full
    details: The options are checked on the controller; the launch is one shell command on the node where it can.
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    details: Renders the launch script and reports the difference; starts nothing.
  diff_mode:
    support: full
    details: The difference of the launch script.
  platform:
    support: full
    platforms: posix
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

- name: The same node in a gang that restarts twice after a failure, inside a container image
  gpufleet.cluster.launch:
    job: llama-ft
    node_rank: 1
    nnodes: 2
    master_addr: 192.0.2.10
    master_port: 29500
    python: python3
    script: /shared/code/train.py
    gang:
      nodes: [[gpu-a, 192.0.2.10], [gpu-b, 192.0.2.11]]
      key: "{{ gang_key }}"
    supervision:
      hang_timeout_s: 600
      max_restarts: 2
      restart_ports: [29501, 29502]
    container:
      engine: podman
      image: nvcr.io/nvidia/pytorch:25.10-py3
      image_id: "{{ image_id }}"
      gpus: true
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
  sample: ["/opt/venvs/train/bin/python", "/home/ml/.gpufleet/jobs/llama-ft/launcher_entry.py", "torch.distributed.run", "--nnodes=2", "--node-rank=1"]
state:
  description: The job's state on this node after the call (C(running); C(queued) with O(scheduler=slurm); C(absent) in check mode).
  returned: always
  type: str
  sample: running
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import launch_options, launch_run


def main() -> None:
    module = AnsibleModule(argument_spec=launch_options.argument_spec(), supports_check_mode=True)
    result = launch_run.run(module.params, module.check_mode, module._diff)  # pylint: disable=protected-access
    if result.get("failed"):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
