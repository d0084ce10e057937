# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller-side job planning: validate the launch inputs and give each node its rank.

Everything here runs on the controller before any node is touched, so a bad
input fails with a message that names the variable or host at fault and
leaves nothing half-done. Pure functions; no Ansible imports.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible_collections.gpufleet.cluster.plugins.module_utils._job.job_read import JOB_NAME_RE
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import job_processes
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import RESIZABLE, SPARE_LAUNCHERS
from ansible_collections.gpufleet.cluster.plugins.module_utils._job.launch_script import ENV_NAME_RE

NODE_GROUP = "gpu_nodes"


class PlanError(ValueError):
    """A launch input is wrong; the message names the variable or host at fault."""


def validate_job_name(job: Any) -> str:
    """Return the job name, or raise when it cannot be a single folder name."""
    if not isinstance(job, str) or not JOB_NAME_RE.match(job):
        raise PlanError(
            "job: %r is not a valid job name; use 1-63 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (no '/' and no spaces)" % (job,)
        )
    return job


def validate_env(env: Any, variable: str = "gpufleet_env") -> dict[str, str]:
    """Return env as a dict of str to str, or raise naming the bad key."""
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise PlanError("%s: must be a dict of environment variables, got %s" % (variable, type(env).__name__))
    clean: dict[str, str] = {}
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME_RE.match(key):
            raise PlanError("%s: %r is not a valid environment variable name" % (variable, key))
        if value is None or isinstance(value, (dict, list)):
            raise PlanError("%s.%s: value must be a string or a number, got %s" % (variable, key, type(value).__name__))
        if isinstance(value, bool):
            value = "1" if value else "0"
        clean[key] = str(value)
    return clean


def split_script_args(script_args: Any) -> list[str]:
    """Split script_args the way a shell would; it must be a string."""
    if script_args is None or script_args == "":
        return []
    if not isinstance(script_args, str):
        raise PlanError(
            "script_args: must be a string such as '--epochs 5 --name \"a b\"', got %s"
            % type(script_args).__name__
        )
    try:
        return shlex.split(script_args)
    except ValueError as exc:
        raise PlanError("script_args: cannot be split like a shell command line (%s): %r" % (exc, script_args))


def parse_positive_int(
    value: Any, variable: str, allow_none: bool = True, minimum: int = 1, maximum: int | None = None
) -> int | None:
    """Parse an integer given on the command line (a string) or in YAML (an int)."""
    if value is None or value == "":
        if allow_none:
            return None
        raise PlanError("%s: is required" % variable)
    if isinstance(value, bool):
        raise PlanError("%s: must be a whole number, got a boolean" % variable)
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and re.match(r"^\s*-?\d+\s*$", value):
        number = int(value)
    else:
        raise PlanError("%s: must be a whole number, got %r" % (variable, value))
    if number < minimum or (maximum is not None and number > maximum):
        bounds = ">= %d" % minimum if maximum is None else "between %d and %d" % (minimum, maximum)
        raise PlanError("%s: must be %s, got %d" % (variable, bounds, number))
    return number


def parse_min_nodes(value: Any, nnodes: int, launcher: str, scheduler: str) -> int:
    """The fewest nodes the job may go on with (min_nodes), 0 for all of them (unset, or the node count): between 1
    and the node count, and below it only where the launcher can change size (RESIZABLE) and the gang restarts
    itself (scheduler ssh: under Slurm, a node's failure ends the job step)."""
    number = parse_positive_int(value, "min_nodes", maximum=max(nnodes, 1))
    if number is None or number >= nnodes:
        return 0
    if launcher not in RESIZABLE:
        raise PlanError("min_nodes: %d is below the job's %d nodes, but launcher=%s cannot go on with fewer nodes (its "
                        "world is fixed at the launch); min_nodes works with %s, or leave it unset"
                        % (number, nnodes, launcher, " and ".join(RESIZABLE)))
    if scheduler != "ssh":
        raise PlanError("min_nodes: %d is below the job's %d nodes, but under scheduler=%s the scheduler ends the job "
                        "when one of its nodes fails; min_nodes works with scheduler=ssh" % (number, nnodes, scheduler))
    return number


def parse_seconds(value: Any, variable: str, default: float, maximum: float) -> float:
    """A number of seconds from 0 to maximum, given on the command line (a string) or in YAML; unset is default."""
    if value is None or value == "":
        return default
    text = "" if isinstance(value, bool) else str(value).strip()
    if not re.match(r"^\d+(\.\d+)?$", text) or float(text) > maximum:
        raise PlanError("%s: must be a number of seconds from 0 to %g, got %r" % (variable, maximum, value))
    return float(text)


def parse_bool(value: Any, variable: str) -> bool:
    """Parse a boolean given as YAML or as an -e string."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "yes", "1", "on"):
        return True
    if isinstance(value, str) and value.lower() in ("false", "no", "0", "off"):
        return False
    raise PlanError("%s: must be true or false, got %r" % (variable, value))


# dcgmi diag's run levels (-r 1 to 4): 1 takes seconds and does not load the GPUs, 2 minutes, 3 and 4 longer.
DCGM_LEVELS = (1, 2, 3, 4)


def parse_health_diag(value: Any) -> int:
    """health_diag: the DCGM diagnostic level the health gate runs (0 or false: none; true: 1)."""
    if value is None or value == "" or value is False or str(value).strip().lower() in ("false", "no", "off", "0"):
        return 0
    if value is True or str(value).strip().lower() in ("true", "yes", "on"):
        return 1
    text = str(value).strip()
    if text.isdigit() and int(text) in DCGM_LEVELS:
        return int(text)
    raise PlanError("health_diag: %r is not a DCGM diagnostic level (0 or false for none, 1 to 4 for dcgmi diag -r "
                    "1 to 4; 1 takes seconds and does not load the GPUs)" % (value,))


def order_nodes(group_hosts: Sequence[str], play_hosts: Sequence[str]) -> list[str]:
    """The nodes in rank order: the group's inventory order, kept to the play's hosts (--limit)."""
    if not group_hosts:
        raise PlanError("inventory: group '%s' is empty or missing; it must list the nodes in rank order" % NODE_GROUP)
    selected = set(play_hosts)
    nodes = [host for host in group_hosts if host in selected]
    if not nodes:
        raise PlanError("inventory: --limit leaves no host of group '%s'" % NODE_GROUP)
    return nodes


def cluster_address(host: str, hostvars: Mapping[str, Any]) -> tuple[str, str]:
    """(address, variable it came from): gpufleet_cluster_address, else ansible_host, else the name."""
    for variable in ("gpufleet_cluster_address", "ansible_host"):
        value = hostvars.get(variable)
        if value:
            return str(value), variable
    return host, "inventory_hostname"


def resolve_ip(name: str, resolver: Callable[[str], str] | None = None) -> str:
    """Resolve name to one IP literal (IPv4 preferred); an IP literal is returned as it is."""
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        pass
    if resolver is not None:
        return resolver(name)
    infos = socket.getaddrinfo(name, None, 0, socket.SOCK_STREAM)
    if not infos:
        raise socket.gaierror("no address")
    infos.sort(key=lambda info: 0 if info[0] == socket.AF_INET else 1)
    return str(infos[0][4][0])


def plan_nodes(
    nodes: Sequence[str],
    hostvars_of: Callable[[str], Mapping[str, Any]],
    resolver: Callable[[str], str] | None = None,
) -> list[dict[str, Any]]:
    """Give each node its node_rank and cluster IP; refuse unresolvable or duplicate addresses."""
    planned: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    for rank, host in enumerate(nodes):
        address, variable = cluster_address(host, hostvars_of(host))
        try:
            ip = resolve_ip(address, resolver)
        except (OSError, UnicodeError, ValueError) as exc:
            raise PlanError(
                "%s: %s=%r does not resolve to an IP address on the controller (%s)" % (host, variable, address, exc)
            )
        if ip in seen:
            raise PlanError(
                "%s: cluster address %s (from %s=%r) is also the address of %s; every node needs its own address"
                % (host, ip, variable, address, seen[ip])
            )
        seen[ip] = host
        planned.append({"host": host, "node_rank": rank, "address": address, "ip": ip, "address_variable": variable})
    return planned


def spares_note(spare_hosts: Sequence[str], launcher: str, scheduler: str, nnodes: int, group: str,
                max_restarts: int) -> str:
    """Why the spare group's hosts are not used by this job, or '' (none, or used): a spare takes a node's rank only in
    a restart (max_restarts of one or more) of a torchrun job of two nodes or more launched over SSH (spares.py)."""
    if not spare_hosts:
        return ""
    why = ""
    if scheduler != "ssh":
        why = "under scheduler=%s, a restart runs on the nodes the scheduler gives" % scheduler
    elif launcher not in SPARE_LAUNCHERS:
        why = "launcher=%s starts the ranks from one place; spares stand in for %s jobs" % (
            launcher, " and ".join(SPARE_LAUNCHERS))
    elif nnodes < 2:
        why = "a job on one node has no other node to notice it lost"
    elif max_restarts < 1:
        why = "max_restarts=0: the job is not restarted, and a spare takes a node's place only in a restart"
    return "spare nodes of group '%s' (%s) are not used: %s" % (group, ", ".join(spare_hosts), why) if why else ""


def new_run_id() -> str:
    """A token unique to one launch (job_processes.new_run_id, the one place it is made)."""
    return job_processes.new_run_id()
