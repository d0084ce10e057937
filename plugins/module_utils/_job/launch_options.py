# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The launch module's options: their one argument spec (documented by the gpufleet.cluster.launch_options
fragment), how they map onto JobSpec's fields, and every check of them made before anything is written.

The options are grouped as a reader of ansible-doc meets them: the job and its command at the top, then
``gang`` (the nodes and how they watch each other), ``supervision`` (stopping, hangs, restarts), ``slurm`` and
``container``. A grouped option's JobSpec field is its own name where JobSpec has it (``gang.heartbeat_s``) and
the group's name joined to it otherwise (``container.engine`` is ``container_engine``); a unit test holds every
JobSpec field to exactly one option or one derivation (the two sha256s)."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import os

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import job_read, launchers
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import containers
from ansible_collections.gpufleet.cluster.plugins.module_utils._job.job_spec import JobSpec
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import RESIZABLE, SINGLE_ENTRY, SPARE_LAUNCHERS, Defaults
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.restart_policy import DEFAULT_RESTART_ON, parse_restart_on
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.schedulers import SCHEDULERS, scheduler_of
from ansible_collections.gpufleet.cluster.plugins.module_utils._job.launch_script import (
    ENV_NAME_RE,
    IFACE_RE,
    secret_env_sha256,
)

GROUPS: dict[str, dict] = {
    "gang": {
        "nodes": {"type": "list", "elements": "list"},
        "spares": {"type": "list", "elements": "list", "default": []},
        "key": {"type": "str", "no_log": True},
        "slots": {"type": "list", "elements": "int", "default": []},
        "heartbeat_s": {"type": "float", "default": Defaults.HEARTBEAT_S},
        "heartbeat_misses": {"type": "int", "default": Defaults.HEARTBEAT_MISSES},
        "join_timeout_s": {"type": "float", "default": Defaults.JOIN_TIMEOUT_S},
    },
    "supervision": {
        "grace_s": {"type": "float", "default": Defaults.GRACE_S},
        "start_timeout_s": {"type": "float", "default": 15.0},
        "hang_timeout_s": {"type": "int", "default": 0},
        "hang_startup_s": {"type": "float", "default": Defaults.HANG_STARTUP_S},
        "max_restarts": {"type": "int", "default": 0},
        "min_progress_s": {"type": "float", "default": Defaults.MIN_PROGRESS_S},
        "restart_ports": {"type": "list", "elements": "int", "default": []},
        "restart_on": {"type": "list", "elements": "str", "default": list(DEFAULT_RESTART_ON)},
        "min_nodes": {"type": "int", "default": 0},
    },
    "health": {
        "sample_s": {"type": "float", "default": Defaults.GPU_SAMPLE_S},
        "kernel_log": {"type": "str", "default": "/dev/kmsg"},
        "metrics_dir": {"type": "str", "default": ""},
    },
    "slurm": {
        "node": {"type": "str", "required": True},
        "job_id": {"type": "str", "required": True},
    },
    "container": {
        "engine": {"type": "str", "required": True},
        "image": {"type": "str", "default": ""},
        "image_id": {"type": "str", "required": True},
        "gpus": {"type": "bool", "default": False},
        "volumes": {"type": "list", "elements": "str", "default": []},
        "ulimits": {"type": "list", "elements": "str", "default": []},
        "run_args": {"type": "list", "elements": "str", "default": []},
    },
}

# Options that are not JobSpec fields: where the job lives, the launch's token, a time to wait, and the two
# inputs that are kept out of the spec (the script's text and the secrets; their sha256s are in it).
NOT_IN_SPEC = ("jobs_dir", "run_id", "start_timeout_s", "script_content", "secret_env", "gang_key")

# Groups that are off when left out (the job runs on the host, without Slurm); the others' options take their
# defaults when their group is left out.
OPTIONAL_GROUPS = ("slurm", "container")


def argument_spec() -> dict:
    """The launch module's argument spec (a new copy each call)."""
    spec: dict = {
        "job": {"type": "str", "required": True},
        **job_read.jobs_dir_spec(),
        "run_id": {"type": "str"},
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
        "iface": {"type": "str", "default": ""},
        "launcher": {"type": "str", "default": "torchrun", "choices": list(launchers.LAUNCHERS)},
        "scheduler": {"type": "str", "default": "ssh", "choices": list(SCHEDULERS)},
    }
    for group, options in GROUPS.items():
        spec[group] = {"type": "dict", "options": copy.deepcopy(options)}
        if group not in OPTIONAL_GROUPS:
            spec[group]["apply_defaults"] = True
    return spec


def field_name(group: str, option: str) -> str:
    """The JobSpec field (or NOT_IN_SPEC name) a grouped option feeds."""
    if option in _SPEC_FIELDS or option in NOT_IN_SPEC:
        return option
    return "%s_%s" % (group, option)


_SPEC_FIELDS = frozenset(field.name for field in dataclasses.fields(JobSpec))


def flat(params: dict) -> dict:
    """The module's parameters with the groups spread out under their field names; an absent group gives its
    options' defaults (empty for slurm and container, which then are off)."""
    values = {name: value for name, value in params.items() if name not in GROUPS}
    for group, options in GROUPS.items():
        given = params.get(group) or {}
        for option, option_spec in options.items():
            default = option_spec.get("default", "" if option_spec["type"] == "str" else None)
            value = given.get(option, default)
            values[field_name(group, option)] = "" if value is None and option_spec["type"] == "str" else value
    return values


def problem(values: dict) -> str:
    """The first thing wrong with a launch's flattened options, named by option, or ''."""
    return (_basic_problem(values) or scheduler_of(values["scheduler"]).options_problem(values)
            or containers.launch_problem(values)
            or _gang_problem(values) or _env_problem(values))


def _basic_problem(values: dict) -> str:
    if not job_read.JOB_NAME_RE.match(values["job"]):
        return "job: %r is not a valid job name (letters, digits, '.', '_', '-'; no '/', no spaces)" % values["job"]
    spares = len(values["spares"] or [])
    if not 0 <= values["node_rank"] < values["nnodes"] + spares:
        return "node_rank: %d is outside 0..nnodes-1 (nnodes=%d)%s" % (
            values["node_rank"], values["nnodes"], ", or a spare's nnodes..nnodes+%d" % (spares - 1) if spares else "")
    if values["nproc_per_node"] is not None and values["nproc_per_node"] < 1:
        return "nproc_per_node: must be at least 1, got %d" % values["nproc_per_node"]
    if values["script_content"] is not None and os.path.isabs(values["script"]):
        return "script: must be relative to workdir when script_content is given, got %s" % values["script"]
    if values["iface"] and not IFACE_RE.match(values["iface"]):
        return "iface: %r is not a network interface name" % values["iface"]
    if values["max_restarts"] < 0:
        return "supervision.max_restarts: must be 0 or more, got %d" % values["max_restarts"]
    if values["min_progress_s"] < 0:
        return "supervision.min_progress_s: must be 0 or more seconds, got %g" % values["min_progress_s"]
    try:
        parse_restart_on(values["restart_on"])
    except ValueError as exc:
        return "supervision.%s" % exc
    if values["hang_timeout_s"] < 0:
        return "supervision.hang_timeout_s: must be 0 (off) or a number of seconds, got %d" % values["hang_timeout_s"]
    return ""


def _gang_problem(values: dict) -> str:
    nodes = values["nodes"] or []
    if nodes and (len(nodes) != values["nnodes"] or any(len(node) != 2 for node in nodes)):
        return "gang.nodes: must list all %d nodes as [name, address] pairs" % values["nnodes"]
    if values["slots"] and len(values["slots"]) != len(nodes):
        return "gang.slots: must give the ranks of each of the %d nodes, got %d" % (len(nodes), len(values["slots"]))
    if values["launcher"] in SINGLE_ENTRY and values["nnodes"] > 1 and not nodes:
        return "launcher: %s needs gang.nodes, the job's nodes in rank order" % values["launcher"]
    if not 0 <= values["min_nodes"] <= max(len(nodes), 1):
        return "supervision.min_nodes: must be from 1 to the %d nodes (0: all of them), got %d" % (
            max(len(nodes), 1), values["min_nodes"])
    if 0 < values["min_nodes"] < len(nodes) and values["launcher"] not in RESIZABLE:
        return "supervision.min_nodes: launcher %s cannot go on with fewer nodes; min_nodes works with %s" % (
            values["launcher"], " and ".join(RESIZABLE))
    spares = values["spares"] or []
    if spares and (len(nodes) < 2 or values["launcher"] not in SPARE_LAUNCHERS or any(len(s) != 2 for s in spares)):
        return ("gang.spares: spare nodes stand in for the nodes of a %s job of two nodes or more (gang.nodes), each "
                "given as [name, address]" % " or ".join(SPARE_LAUNCHERS))
    return ""


def _env_problem(values: dict) -> str:
    for option in ("env", "secret_env"):
        bad = [key for key in values[option] if not ENV_NAME_RE.match(str(key))]
        if bad:
            return "%s: %s not a valid environment variable name" % (option, ", ".join(repr(k) for k in bad))
    return ""


def as_strings(env: dict) -> dict[str, str]:
    return {str(key): str(value) for key, value in env.items()}


def job_spec(values: dict, gpus_found: int) -> JobSpec:
    """The JobSpec of checked, flattened options; nproc_per_node defaults to the GPUs found (or 1)."""
    nproc = values["nproc_per_node"] or gpus_found or 1
    script = values["script"]
    workdir = values["workdir"] or (os.path.dirname(script) if os.path.isabs(script) else None)
    content = values["script_content"]
    fields = {name: values[name] for name in _SPEC_FIELDS if name in values}
    fields.update(
        nproc_per_node=nproc,
        world_size=values["world_size"] or values["nnodes"] * nproc,
        workdir=workdir or job_read.job_dir(values["jobs_dir"], values["job"]),
        script_sha256=hashlib.sha256(content.encode()).hexdigest() if content else "",
        secret_env_sha256=secret_env_sha256(as_strings(values["secret_env"])),
        env=tuple(sorted((str(k), str(v)) for k, v in values["env"].items())),
        nodes=tuple((str(node[0]), str(node[1])) for node in values["nodes"] or []),
        spares=tuple((str(node[0]), str(node[1])) for node in values["spares"] or []),
        # All of the nodes is no shrink at all: the spec says so as 0 (JobSpec.elastic).
        min_nodes=values["min_nodes"] if values["min_nodes"] < len(values["nodes"] or []) else 0,
    )
    for name, value in fields.items():
        if isinstance(value, list):
            fields[name] = tuple(value)
    return JobSpec(**fields)
