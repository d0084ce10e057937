# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One node's launch from its validated options: the one body of the launch module (plugins/modules/launch.py,
under AnsibleModule) and of its light path (cached_runner.py, from the tree cached on the node; the action
plugins/action/launch.py validates the options on the controller first)."""

from __future__ import annotations

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import job_read, jobs, launch_options, light_args
from ansible_collections.gpufleet.cluster.plugins.module_utils._job.job_spec import JobSpec
from ansible_collections.gpufleet.cluster.plugins.module_utils._node import nvidia_node
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import job_processes, supervisor_bundle


def build_spec(values: dict) -> JobSpec:
    """The JobSpec of the flattened options; without nproc_per_node, the node's GPUs as nvidia-smi lists them."""
    gpus = 0 if values["nproc_per_node"] else nvidia_node.nvidia_smi_gpus()["count"]
    return launch_options.job_spec(values, gpus)


def run(params: dict, check_mode: bool, diff: bool) -> dict:
    """The module's result for these validated options: the launch's, or {'failed': True, 'msg': ...}."""
    values = launch_options.flat(params)
    problem = launch_options.problem(values)
    if problem:
        return {"failed": True, "msg": problem}
    spec = build_spec(values)
    run_id = values["run_id"] or job_processes.new_run_id()
    try:
        result = jobs.start(
            job_read.job_dir(values["jobs_dir"], values["job"]),
            spec,
            run_id,
            supervisor_bundle.shipped_source(),
            check_mode,
            start_timeout_s=values["start_timeout_s"],
            script_content=values["script_content"],
            secret_env=launch_options.as_strings(values["secret_env"]),
            gang_key=values["gang_key"] or None,
        )
    except (jobs.JobError, OSError) as exc:
        return {"failed": True, "msg": str(exc)}
    if not diff:
        result.pop("diff", None)
    return result


def light_main(args: dict, check_mode: bool, diff: bool) -> dict:
    """cached_runner.py's entry: the options as the controller validated them (paths not yet expanded)."""
    return run(light_args.expand_paths(args, launch_options.argument_spec()), check_mode, diff)
