#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: job_status
short_description: Report the state of gpufleet jobs on a node
version_added: 0.1.0
description:
  - Reads a job's state as its supervisor recorded it and checks it against the live processes, so a
    supervisor that vanished is reported as C(lost) rather than C(running).
  - Without O(job), reports every job found in O(jobs_dir).
  - For a failed torchrun job, the first failed worker (global rank, local rank, exit code) is read from
    torchrun's failure summary in the log.
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.cluster.attributes.read_only
  - gpufleet.cluster.job_folder
options:
  job:
    description: Name of the job; all jobs of O(jobs_dir) when omitted.
    type: str
  tail:
    description: Number of log lines to return in RV(jobs[].log_tail).
    type: int
    default: 0
  slurm_wait_s:
    description:
      - For a job run by Slurm whose part on this node has ended, how many seconds to wait for Slurm to record
        the job as ended (its batch script exits, and the epilog runs, a moment after the last node's part), so that
        RV(jobs[].slurm)'s C(state) is Slurm's final state rather than C(RUNNING) or C(COMPLETING).
      - train.yml's report asks for 15 seconds; 0 (the default) answers with Slurm's state as it is now.
    type: float
    default: 0.0
seealso:
  - module: gpufleet.cluster.launch
  - module: gpufleet.cluster.job_stop
"""

EXAMPLES = r"""
- name: State of job llama-ft with the last 30 log lines
  gpufleet.cluster.job_status:
    job: llama-ft
    tail: 30
  register: __llama_status
"""

RETURN = r"""
jobs:
  description: One entry per job.
  returned: always
  type: list
  elements: dict
  contains:
    job:
      description: Job name.
      type: str
      returned: always
    state:
      description: One of C(absent), C(starting), C(running), C(stopping), C(succeeded), C(failed), C(stopped), C(lost).
      type: str
      returned: always
    exit_code:
      description: Exit code of the node's launcher (128 + signal number when it was killed by a signal).
      type: int
      returned: when the job has ended
    root_cause:
      description: torchrun's first failed worker, with C(rank), C(local_rank), C(exit_code) and C(signal) when a signal ended it.
      type: dict
      returned: when a failed job's log has torchrun's failure summary
    duration_s:
      description: Seconds from start to end (or to now while running).
      type: float
      returned: when the job has started
    log_path:
      description: The node's training log.
      type: str
      returned: always
    last_line:
      description: The last line of the log.
      type: str
      returned: when the job exists
    log_tail:
      description: The last O(tail) lines of the log.
      type: list
      elements: str
      returned: when the job exists
    slurm:
      description:
        - For a job run by Slurm (train.yml C(-e scheduler=slurm)), Slurm's state of its job
          (C(job_id), C(state) such as C(PENDING) or C(RUNNING), C(reason) such as C(Resources), C(nodes),
          C(exit_code)), next to gpufleet's own C(state). C(state) is C(GONE) when Slurm no longer knows the job.
      type: dict
      returned: when the job is Slurm's
    stacks:
      description:
        - Every rank's Python stack, taken before a hang's stop or a stop that asked for them (C(file), the job
          folder's C(stacks.txt), or C(error), why none was taken; C(ranks), each rank's main-thread frames).
      type: dict
      returned: when the supervisor took stacks
    flight_recorder:
      description:
        - The dumps of PyTorch's flight recorder the job's ranks on this node wrote (a collective timed out);
          C(dir), the job folder's C(flight_recorder), and C(dumps), the files' names (C(rank_<global rank>)).
          A relaunch of the job keeps the previous run's as C(flight_recorder.<run id>).
      type: dict
      returned: when the ranks wrote dumps
      sample: {"dir": "/home/alice/.gpufleet/jobs/llama-ft/flight_recorder", "dumps": ["rank_0", "rank_1"]}
    earlier_attempts:
      description:
        - What the attempts of this run before a restart left, oldest first, kept aside so that the next attempt
          did not write over them (C(stacks) and C(flight_recorder) above are the last attempt's). For each,
          C(attempt), C(dir) (the job folder's C(attempts/<N>)) and C(files) (C(stacks.txt),
          C(flight_recorder/rank_<global rank>)). Fetched with the logs to C(<logs>/<job>/attempt<N>/).
          A relaunch of the job keeps the previous run's as C(attempts.<run id>).
      type: list
      elements: dict
      returned: when an earlier attempt left stacks or dumps
      sample: [{"attempt": 1, "dir": "/home/alice/.gpufleet/jobs/llama-ft/attempts/1",
                "files": ["stacks.txt", "flight_recorder/rank_0"]}]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import job_read


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "job": {"type": "str"},
            **job_read.jobs_dir_spec(),
            "tail": {"type": "int", "default": 0},
            "slurm_wait_s": {"type": "float", "default": 0.0},
        },
        supports_check_mode=True,
    )
    params = module.params
    if params["job"] and not job_read.JOB_NAME_RE.match(params["job"]):
        module.fail_json(msg="job: %r is not a valid job name" % params["job"])
    names = [params["job"]] if params["job"] else job_read.list_jobs(params["jobs_dir"])
    found = []
    for name in names:
        entry = job_read.status(job_read.job_dir(params["jobs_dir"], name), tail=params["tail"],
                                slurm_wait_s=params["slurm_wait_s"])
        entry["job"] = name
        found.append(entry)
    module.exit_json(changed=False, jobs=found)


if __name__ == "__main__":
    main()
