#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: job_stop
short_description: Stop one gpufleet job on a node, and only that job
version_added: 0.1.0
description:
  - Asks the job's supervisor to stop (SIGTERM to the run's processes, a grace period, then SIGKILL) and waits
    until it has recorded the end. When the supervisor is gone, ends the run's processes itself.
  - Only processes that carry the job's run token on this node (C(GPUFLEET_RUN_TOKEN)) are signalled. Nothing is ever killed by
    name or pattern, so other jobs and other users' processes are never touched.
  - The job folder, its log and any checkpoints are kept.
  - For a job run in a container image, the supervisor ends the container through the engine; when the supervisor
    is gone, this removes every container labelled with the job's folder (C(engine rm --force)), by its ID.
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.cluster.job_folder
attributes:
  check_mode:
    support: full
    details: Reports whether the job would be stopped; signals nothing.
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
options:
  job:
    description: Name of the job to stop.
    type: str
    required: true
  reason:
    description: Why the job is stopped; recorded in the job's state.
    type: str
    default: stopped by request
  timeout_s:
    description:
      - Seconds to wait for the supervisor to finish stopping before ending the processes directly; never less than
        the job's own grace period (as launched) and 20 s.
    type: float
    default: 30
  cancel_scheduler:
    description:
      - For a job run by Slurm (train.yml C(-e scheduler=slurm)), C(scancel) its Slurm job first. A job still
        queued is always cancelled. The wait of train.yml sets it to false when it stops a node's part because
        another node's part failed, so that Slurm records the job as failed, not cancelled.
    type: bool
    default: true
  stopped_for:
    description:
      - The inventory name of the node whose part's failure this stop is for; train.yml's wait sets it when it stops
        a node's part because another node's part failed. The part is then recorded as stopped for that node
        (C(stopped (gang)) in the report), as when the supervisors heard of the failure themselves; a part whose own
        rank had already ended is recorded as failed, its launcher left its grace period to end on its own.
      - Unset (the default), the stop is a stop by request.
    type: str
  dump_stacks:
    description:
      - Take every rank's Python stack (py-spy) before the ranks are stopped, into the job folder's C(stacks.txt)
        and the job's state (C(stacks)), as on a hang. The job's other nodes, told by this node's supervisor, take
        theirs too, and every node stops its ranks only once all have (a rank stopped earlier would move the
        others' ranks out of the collective they wait in).
      - Where py-spy is not on the node, or cannot read the ranks, the state says why, and the stop goes on.
    type: bool
    default: false
seealso:
  - module: gpufleet.cluster.launch
  - module: gpufleet.cluster.job_status
"""

EXAMPLES = r"""
- name: Stop job llama-ft on every node
  gpufleet.cluster.job_stop:
    job: llama-ft
    reason: stopped from the stop playbook

- name: Stop it, with every rank's stack taken first (where is it stuck?)
  gpufleet.cluster.job_stop:
    job: llama-ft
    dump_stacks: true
"""

RETURN = r"""
state_before:
  description: The job's state before the call.
  returned: always
  type: str
  sample: running
state:
  description: The job's state after the call.
  returned: always
  type: str
  sample: stopped
remaining:
  description: PIDs of the run still alive after stopping; empty on success.
  returned: when the job was running
  type: list
  elements: int
  sample: []
scancel:
  description: For a job run by Slurm, what the cancel of its Slurm job did (or what scancel said when it failed).
  returned: when a Slurm job was cancelled
  type: str
  sample: cancelled Slurm job 42
containers_removed:
  description:
    - For a job run in a container image, the IDs of the job folder's containers this stop removed through the
      engine (what its supervisor had not ended, e.g. a container that outlived it).
  returned: when the job runs in a container image and was running
  type: list
  elements: str
  sample: ["3f1c2a9e8b7d"]
containers_remaining:
  description: The job folder's containers the engine still has after the stop; empty on success.
  returned: when the job was running
  type: list
  elements: str
  sample: []
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import job_read, jobs


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "job": {"type": "str", "required": True},
            **job_read.jobs_dir_spec(),
            "reason": {"type": "str", "default": "stopped by request"},
            "timeout_s": {"type": "float", "default": 30},
            "cancel_scheduler": {"type": "bool", "default": True},
            "stopped_for": {"type": "str"},
            "dump_stacks": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    params = module.params
    if not job_read.JOB_NAME_RE.match(params["job"]):
        module.fail_json(msg="job: %r is not a valid job name" % params["job"])
    result = jobs.stop(
        job_read.job_dir(params["jobs_dir"], params["job"]), params["reason"], module.check_mode, params["timeout_s"],
        cancel_scheduler=params["cancel_scheduler"], stopped_for=params["stopped_for"], stacks=params["dump_stacks"],
    )
    if result.get("remaining"):
        module.fail_json(msg="processes of job %s are still alive: %s" % (params["job"], result["remaining"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
