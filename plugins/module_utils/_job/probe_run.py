# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a launch on a node depends on, read without changing anything: the one body of the node_probe module
(plugins/modules/node_probe.py, under AnsibleModule) and of its light path (cached_runner.py, from the tree cached
on the node; the action plugins/action/node_probe.py validates the options on the controller first)."""

from __future__ import annotations

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import ib_counters, job_read, light_args, port_memory
from ansible_collections.gpufleet.cluster.plugins.module_utils._node import netinfo, node, nvidia_node
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import free_ports, gpu_health, runtimes


def argument_spec() -> dict:
    """The node_probe module's argument spec (a new copy each call)."""
    return {
        "python": {"type": "str", "default": "python3"},
        "job": {"type": "str"},
        **job_read.jobs_dir_spec(),
        "pick_port": {"type": "bool", "default": False},
        "check_port": {"type": "int"},
        "extra_ports": {"type": "int", "default": 0},
        "launcher": {"type": "str", "default": "torchrun"},
        "address": {"type": "str"},
        "env_files": {"type": "list", "elements": "path", "default": []},
        "container_engine": {"type": "str", "default": "docker"},
        "container_image": {"type": "str", "default": ""},
        "gpu_health": {"type": "bool", "default": True},
        "kernel_log": {"type": "path", "default": gpu_health.KMSG},
        "sys_root": {"type": "path", "default": "/sys"},
        "port_nodes": {"type": "list", "elements": "list", "default": []},
        "port_check_ttl_s": {"type": "float", "default": 0.0},
        "record_ib_counters": {"type": "bool", "default": False},
    }


def pick_ports(params: dict, memory: dict) -> dict:
    """free_port (the master port; one the port check remembers a pass on for port_nodes first) and free_ports (the
    relaunch ports), as asked."""
    picked: dict = {}
    if params["pick_port"]:
        nodes = [[str(host), str(address)] for host, address in params["port_nodes"]]
        prefer = port_memory.fresh_ports(memory, nodes, params["port_check_ttl_s"]) \
            if params["port_check_ttl_s"] > 0 else []
        picked["free_port"] = free_ports.pick_free_port(prefer=prefer)
    if params["extra_ports"] > 0:
        taken = {picked.get("free_port"), params["check_port"]}
        picked["free_ports"] = free_ports.pick_free_ports(params["extra_ports"], exclude=taken)
    return picked


def run(params: dict) -> dict:
    """The module's result for these validated options (changed is always false)."""
    health: dict = {}
    if params["gpu_health"]:
        # The same nvidia-smi query counts the GPUs: one pass over them, not two.
        health = nvidia_node.gpu_health_with_pci(params["kernel_log"], params["sys_root"])
    result = {
        "changed": False,
        "gpu_count": len(health["gpus"]) if health else nvidia_node.nvidia_smi_gpus()["count"],
        "gpu_health": health,
        "python": node.python_info(params["python"]),
        # Resolved here, once: later tasks use this absolute path, so '~' means the same thing to all of them.
        "jobs_dir": job_read.job_dir(params["jobs_dir"], ""),
    }
    result["iface"] = netinfo.interface_holding(params["address"]) if params["address"] else ""
    result["hostname_address"] = netinfo.hostname_address()
    result["env_file_names"] = node.env_file_names(params["env_files"])
    result["launcher_missing"] = node.launcher_missing(params["launcher"], result["python"])
    # The runtime says what there is to probe of it: an image's engine and ID, nothing on the host.
    runtime = runtimes.runtime_for(params["container_image"])
    result["container"] = runtime.probe(params["container_engine"], params["container_image"])
    if params["job"]:
        result["job"] = job_read.status(job_read.job_dir(params["jobs_dir"], params["job"]))
    # The InfiniBand/RoCE ports for the gate, their counters remembered for the next probe (record_ib_counters).
    result["ib_ports"] = ib_counters.ports(params["sys_root"], params["env_files"], params["jobs_dir"],
                                           params["record_ib_counters"])
    # What the port check remembers here (port_memory.py): the controller trusts a pass that every node remembers.
    result["port_memory"] = port_memory.read(params["jobs_dir"])
    try:
        result.update(pick_ports(params, result["port_memory"]))
    except RuntimeError as exc:
        result.update(failed=True, msg=str(exc))
        return result
    if params["check_port"] is not None:
        result["port_in_use"] = free_ports.port_in_use(params["check_port"])
    return result


def light_main(args: dict, check_mode: bool, diff: bool) -> dict:  # pylint: disable=unused-argument
    """cached_runner.py's entry: the options as the controller validated them (paths not yet expanded). It changes
    nothing, in check mode or not (the task runs it with check_mode: false)."""
    return run(light_args.expand_paths(args, argument_spec()))
