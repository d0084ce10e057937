# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action gpufleet.cluster.job_export: write a job as one file (sbatch, TrainJob, PyTorchJob, MPIJob), on the
controller only."""

from __future__ import annotations

import json
import os
from typing import Any

import yaml
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpufleet.cluster.plugins.modules import job_export as documentation
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import action_args
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import plan
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._export import export

display = Display()

# The nccl_env role's settings, as the variables a rank sees (GLOO follows NCCL's interface).
_NCCL_VARS = (("nccl_env_socket_ifname", ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")),
              ("nccl_env_ib_hca", ("NCCL_IB_HCA",)))


def job_environment(env: dict[str, Any], first_host_vars: dict[str, Any]) -> dict[str, str]:
    """The job's environment with the NCCL and Gloo settings of the inventory (the job's own win)."""
    found: dict[str, str] = {}
    for variable, names in _NCCL_VARS:
        value = first_host_vars.get(variable)
        if value:
            found.update({name: str(value) for name in names})
    found.update({str(k): str(v) for k, v in (first_host_vars.get("nccl_env_extra") or {}).items()})
    found.update(plan.validate_env(env))
    return found


class ActionModule(ActionBase):
    """Renders the file on the controller and writes it when it differs."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = action_args.validated(self, documentation.DOCUMENTATION)
        try:
            job, fmt = self._job(args, task_vars), str(args["format"])
            # Through JSON first: Ansible's own str types (unsafe text) become plain ones that safe_dump writes.
            content = export.render(job, fmt, lambda data: yaml.safe_dump(json.loads(json.dumps(data)),
                                                                          sort_keys=False, width=120))
        except (export.ExportError, plan.PlanError) as exc:
            result.update(failed=True, msg=str(exc))
            return result
        try:
            dest = export.resolve_dest(args.get("dest"), job.job, fmt, os.getcwd())
        except export.ExportError as exc:
            result.update(failed=True, msg=str(exc))
            return result
        for warning in export.warnings(job, fmt):
            display.warning(warning)
        before = ""
        if os.path.exists(dest):
            with open(dest) as handle:
                before = handle.read()
        changed = before != content
        if changed and not self._task.check_mode:
            with open(dest, "w") as handle:
                handle.write(content)
            if fmt == "sbatch":
                os.chmod(dest, 0o755)
        result.update(changed=changed, dest=dest, format=fmt, content=content)
        if self._task.diff:
            result["diff"] = {"before_header": dest, "after_header": dest, "before": before, "after": content}
        return result

    def _job(self, args: dict, task_vars: dict) -> export.ExportJob:
        group = str(args["group"])
        hosts = (task_vars.get("groups") or {}).get(group) or []
        if not hosts:
            raise plan.PlanError("inventory: group '%s' is empty or missing; it must list the job's nodes" % group)
        first = task_vars["hostvars"][hosts[0]]
        first_vars = {key: self._templar.template(first.get(key)) for key in (
            "gpufleet_gpus", "gpufleet_python", "nccl_env_socket_ifname", "nccl_env_ib_hca", "nccl_env_extra")}
        script = str(args["script"])
        if not script:
            raise plan.PlanError("script: is required, e.g. -e script=train.py (as the cluster's nodes see it)")
        name = plan.validate_job_name(args.get("job") or os.path.splitext(os.path.basename(script))[0])
        gpus = args.get("gpus_per_node")
        if gpus is None:
            gpus = int(first_vars.get("gpufleet_gpus") or 0)
        nproc = args.get("nproc_per_node") or gpus or 1
        if nproc < 1 or gpus < 0 or (gpus and nproc > gpus):
            raise plan.PlanError("nproc_per_node: %d ranks per node on %d GPUs per node" % (nproc, gpus))
        return export.ExportJob(
            job=name, script=script, nnodes=len(hosts), nproc_per_node=nproc, gpus_per_node=gpus,
            script_args=tuple(plan.split_script_args(args.get("script_args"))),
            env=tuple(sorted(job_environment(args.get("env") or {}, first_vars).items())),
            secret_names=tuple(plan.validate_env({str(n): "" for n in args.get("secret_env_names") or []},
                                                 "gpufleet_secret_env")),
            max_restarts=int(args["max_restarts"]), launcher=str(args["launcher"]),
            python=str(args.get("python") or first_vars.get("gpufleet_python") or "python3"),
            container_image=str(args.get("container_image") or ""), master_port=args.get("master_port"))
