# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action gpufleet.cluster.job_plan: validate a launch and assign ranks, on the controller only."""

from __future__ import annotations

import os
from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import launchers
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import schedulers
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import Defaults
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.restart_policy import DEFAULT_RESTART_ON, parse_restart_on
from ansible_collections.gpufleet.cluster.plugins.modules import job_plan as documentation
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import action_args
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import container_images, history, plan, ports


INLINE_SCRIPT_MAX_BYTES = 1 << 20


def _inline_text(path: str) -> str | None:
    """The script's text when it is small UTF-8 text: the launch module then writes it, saving two round trips."""
    if os.path.getsize(path) > INLINE_SCRIPT_MAX_BYTES:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (UnicodeDecodeError, OSError):
        return None


def _controller_path(value: str, variable: str) -> str:
    path = os.path.abspath(os.path.expanduser(value))
    if not os.path.exists(path):
        raise plan.PlanError("%s: %s does not exist on the controller" % (variable, path))
    return path


def script_layout(script: Any, script_dir: Any, on_nodes: bool) -> dict[str, Any]:
    """Where the script comes from on the controller and where it runs on the nodes."""
    if not isinstance(script, str) or not script:
        raise plan.PlanError("script: is required, e.g. -e script=examples/train.py")
    if on_nodes:
        if not os.path.isabs(script):
            raise plan.PlanError("script: with script_on_nodes=true it must be an absolute path on the nodes, got %r" % script)
        return {"copy_src": None, "script_content": None, "remote_script": script,
                "remote_workdir": os.path.dirname(script)}
    if script_dir:
        source_dir = _controller_path(str(script_dir), "script_dir")
        if not os.path.isdir(source_dir):
            raise plan.PlanError("script_dir: %s is not a directory" % source_dir)
        candidate = script if os.path.isabs(script) else os.path.join(source_dir, script)
        if not os.path.exists(candidate) and not os.path.isabs(script):
            candidate = os.path.abspath(script)
        source = _controller_path(candidate, "script")
        relative = os.path.relpath(source, source_dir)
        if relative.startswith(".."):
            raise plan.PlanError("script: %s is not inside script_dir %s" % (source, source_dir))
        return {"copy_src": source_dir + "/", "script_content": None, "remote_script": relative,
                "remote_workdir": None}
    source = _controller_path(script, "script")
    if not os.path.isfile(source):
        raise plan.PlanError("script: %s is not a file" % source)
    content = _inline_text(source)
    return {"copy_src": None if content is not None else source, "script_content": content,
            "remote_script": os.path.basename(source), "remote_workdir": None}


def launcher(value: Any) -> str:
    """The launcher, or an error listing the ones there are."""
    chosen = value or "torchrun"
    if chosen not in launchers.LAUNCHERS:
        raise plan.PlanError("launcher: %r is not one of %s" % (chosen, ", ".join(launchers.LAUNCHERS)))
    return str(chosen)


def scheduler(value: Any, chosen_launcher: str) -> str:
    """The scheduler, or an error listing the ones there are (and the launchers Slurm cannot run)."""
    chosen = value or "ssh"
    if chosen not in schedulers.SCHEDULERS:
        raise plan.PlanError("scheduler: %r is not one of %s" % (chosen, ", ".join(schedulers.SCHEDULERS)))
    problem = schedulers.scheduler_of(chosen).launcher_problem(chosen_launcher)
    if problem:
        raise plan.PlanError(problem)
    return str(chosen)


def master_probe(master_port: int | None, max_restarts: int, scheduler_name: str) -> dict:
    """What the master node's probe does about the ports: pick a free master port and the relaunch ports, or
    check the one given. Nothing where the scheduler's node 0 picks them when it starts the job (Slurm)."""
    if schedulers.scheduler_of(scheduler_name).picks_ports_at_start:
        return {"pick_port": False, "extra_ports": 0, "check_port": None}
    return {"pick_port": master_port is None, "extra_ports": max_restarts, "check_port": master_port}


def port_check(mode: Any, ttl_s: Any) -> dict:
    """How the ports are checked before launch (plugin_utils/_control/ports.py): the mode, and how long a pass is
    trusted."""
    chosen = "remembered" if mode is None else mode
    if chosen not in ports.PORT_CHECKS:
        raise plan.PlanError("port_check: %r is not one of %s" % (chosen, ", ".join(ports.PORT_CHECKS)))
    ttl = plan.parse_positive_int(3600 if ttl_s is None else ttl_s, "port_check_ttl_s", allow_none=False, minimum=0,
                                  maximum=7 * 24 * 3600)
    return {"mode": chosen, "ttl_s": ttl}


def ports_plan(args: dict, master_port: int | None, max_restarts: int, scheduler_name: str,
               port_nodes: list[dict]) -> dict:
    """What the plan says of the ports: the master's probe, the port check, and the nodes it covers (the gang, then
    the spares)."""
    return {"master_probe": master_probe(master_port, max_restarts, scheduler_name),
            "port_check": port_check(args.get("port_check"), args.get("port_check_ttl_s")),
            "port_nodes": [[node["host"], node["ip"]] for node in port_nodes]}


def hang_timeout(value: Any) -> int | None:
    """The watchdog's seconds (unset is off; 0 is refused rather than read as off)."""
    try:
        return plan.parse_positive_int(value, "hang_timeout", maximum=7 * 24 * 3600)
    except plan.PlanError as exc:
        raise plan.PlanError("%s (seconds without output on every node; leave it unset to turn the watchdog off)"
                             % exc)


def supervision_plan(given: dict, nnodes: int = 1, launcher: str = "torchrun", scheduler: str = "ssh") -> dict:
    """The supervision settings the plan checks: the hang watchdog's seconds, the stop's grace period, the causes a
    failed attempt is restarted on, and the fewest nodes the job goes on with (for nnodes nodes under launcher and
    scheduler)."""
    try:
        restart_on = list(parse_restart_on(DEFAULT_RESTART_ON if given.get("restart_on") is None
                                           else given["restart_on"]))
    except ValueError as exc:
        raise plan.PlanError(str(exc)) from exc
    return {"hang_timeout": hang_timeout(given.get("hang_timeout")),
            "grace_s": plan.parse_seconds(given.get("stop_grace_s"), "stop_grace_s", Defaults.GRACE_S, maximum=3600.0),
            "restart_on": restart_on,
            "min_nodes": plan.parse_min_nodes(given.get("min_nodes"), nnodes, launcher, scheduler)}


def _nodes(group: str, groups: dict, task_vars: dict) -> list[str]:
    """The node group's hosts of the play, in rank order."""
    if group not in groups or not groups[group]:
        raise plan.PlanError("inventory: group '%s' is empty or missing; it must list the nodes in rank order" % group)
    return plan.order_nodes(groups[group], task_vars.get("ansible_play_hosts_all", []))


def _spares(group: str, groups: dict, task_vars: dict, nodes: list[str], hostvars_of: Any,
            runs: tuple[str, str], max_restarts: int) -> dict[str, Any]:
    """The spare group's hosts of the play that are not nodes, planned as nodes past the nodes' ranks (every address
    distinct among nodes and spares), unless the job cannot use them (launcher, scheduler, size, no restart:
    spares_note)."""
    hosts = [host for host in groups.get(group) or [] if host not in nodes
             and host in task_vars.get("ansible_play_hosts_all", [])]
    note = plan.spares_note(hosts, runs[0], runs[1], len(nodes), group, max_restarts)
    spares = [] if note else plan.plan_nodes(nodes + hosts, hostvars_of)[len(nodes):]
    return {"spares": spares, "spare_hosts": [spare["host"] for spare in spares], "spares_note": note}


class ActionModule(ActionBase):
    """Checks every launch input before any node is touched and returns the job's plan."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = action_args.validated(self, documentation.DOCUMENTATION)
        try:
            result["plan"] = self._plan(args, task_vars)
        except plan.PlanError as exc:
            result.update(failed=True, msg=str(exc))
            return result
        result["changed"] = False
        return result

    def _node_history(self, args: dict, groups: dict, logs_dir: str, task_vars: dict
                      ) -> tuple[list[str], str, list[str], list[str]]:
        """The job's nodes in rank order with a spare in the place of each quarantined node, the spare group and its
        hosts left, and what to say (the substitutions, the warnings of nodes with faults short of quarantine); a
        quarantined node no spare can take the place of is refused, naming its faults (history.stand_in)."""
        nodes = _nodes(args.get("group") or plan.NODE_GROUP, groups, task_vars)
        spare_group = str(args.get("spare_group") or "gpu_spares")
        spares = [host for host in groups.get(spare_group) or []
                  if host not in nodes and host in task_vars.get("ansible_play_hosts_all", [])]
        settings = {name: self._templar.template(task_vars.get(variable, default)) for name, variable, default in (
            ("after", "gpufleet_quarantine_after", history.DEFAULT_AFTER),
            ("window", "gpufleet_quarantine_window", history.DEFAULT_WINDOW))}
        path = history.path_of(logs_dir)
        window = str(settings["window"])
        try:
            records, after, window_s = history.load(path, settings["after"], window)
            found = history.standing(records, nodes + spares, after, window_s)
            placed, left, said = history.stand_in(nodes, spares, found, window, path)
        except history.HistoryError as exc:
            raise plan.PlanError(str(exc)) from exc
        return placed, spare_group, left, said + history.warnings({node: found[node] for node in placed + left},
                                                                  after, window)

    def _plan(self, args: dict, task_vars: dict) -> dict:
        groups = task_vars.get("groups", {})
        logs_dir = os.path.abspath(os.path.expanduser(str(args.get("logs_dir") or "logs")))
        nodes, spare_group, left, said = self._node_history(args, groups, logs_dir, task_vars)  # quarantine
        hostvars = task_vars["hostvars"]

        def hostvars_of(host: str) -> dict:
            found = hostvars[host]
            return {key: self._templar.template(found.get(key)) for key in ("gpufleet_cluster_address", "ansible_host")}

        script = args.get("script")
        layout = script_layout(script, args.get("script_dir"), plan.parse_bool(args.get("script_on_nodes", False), "script_on_nodes"))
        job = plan.validate_job_name(args.get("job") or os.path.splitext(os.path.basename(str(script)))[0])
        planned = plan.plan_nodes(nodes, hostvars_of)
        wait = plan.parse_bool(args.get("wait", True), "wait")
        # Only the names of the secret variables come here: their values never pass through a registered result.
        plan.validate_env({str(name): "" for name in args.get("secret_env_names") or []}, "gpufleet_secret_env")
        chosen_launcher = launcher(args.get("launcher"))
        chosen_scheduler = scheduler(args.get("scheduler"), chosen_launcher)
        container = container_images.job_container(
            args, chosen_launcher, chosen_scheduler, nodes,
            lambda host, variable: self._templar.template(hostvars[host].get(variable)))
        master_port = plan.parse_positive_int(args.get("master_port"), "master_port", maximum=65535)
        max_restarts = plan.parse_positive_int(args.get("max_restarts") or 0, "max_restarts", allow_none=False,
                                               minimum=0, maximum=100)
        spares = _spares(spare_group, dict(groups, **{spare_group: left}), task_vars, nodes, hostvars_of,
                         (chosen_launcher, chosen_scheduler), max_restarts)
        return {
            "job": job,
            "run_id": plan.new_run_id(),
            "nodes": planned,
            "hosts": [node["host"] for node in planned],
            "nnodes": len(planned),
            "master_host": planned[0]["host"],
            "master_addr": planned[0]["ip"],
            "master_port": master_port,
            **ports_plan(args, master_port, max_restarts, chosen_scheduler, planned + spares["spares"]),
            "nproc_per_node": plan.parse_positive_int(args.get("nproc_per_node"), "nproc_per_node"),
            "script_args": plan.split_script_args(args.get("script_args")),
            "env": plan.validate_env(args.get("env")),
            **supervision_plan(args.get("supervision") or {}, len(planned), chosen_launcher, chosen_scheduler),
            "health_diag": plan.parse_health_diag(args.get("health_diag")),
            "max_restarts": max_restarts,
            "launcher": chosen_launcher,
            "scheduler": chosen_scheduler,
            "container": container,
            "image_lookup": container_images.image_lookup(container),
            "gpus_per_node": plan.parse_positive_int(args.get("gpus_per_node"), "gpus_per_node", minimum=0,
                                                     maximum=64),
            # The gang: every node's supervisor sends heartbeats to the others' addresses.
            "gang_nodes": [[node["host"], node["ip"]] for node in planned],
            **spares,
            # The spares that took a quarantined node's place, and the job's nodes' hardware faults in the fleet's
            # history short of quarantine (plugin_utils/_control/history.py).
            "node_history": said,
            "wait": wait,
            "logs_dir": logs_dir,
            "job_logs_dir": os.path.join(logs_dir, job),
            **layout,
        }
