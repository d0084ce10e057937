# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a node remembers of its InfiniBand/RoCE ports between launches: each port's error counters as the last
launch's probe read them (netinfo.infiniband), and when, so that the next launch's gate can tell a counter that rose
since (plugin_utils/_control/port_health.py). One file in the user's jobs folder, as the port check's memory
(port_memory.py); the probe writes it, except in check mode."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ansible_collections.gpufleet.cluster.plugins.module_utils._node import netinfo, node
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_processes import write_json_atomic

MEMORY_FILE = ".ib-counters.json"


def memory_path(jobs_dir: str) -> str:
    return os.path.join(os.path.abspath(os.path.expanduser(jobs_dir)), MEMORY_FILE)


def errors_by_port(hcas: list[dict]) -> dict[str, dict[str, int | None]]:
    """Each port's error counters ("mlx5_0:1" -> {"symbol_error": 0, ...}) from a reading of netinfo.infiniband."""
    return {"%s:%d" % (hca["name"], port["port"]): dict(port.get("errors") or {})
            for hca in hcas for port in hca["ports"]}


def read(jobs_dir: str) -> dict[str, Any] | None:
    """The last reading remembered here ({"at": seconds since the epoch, "errors": {port: counters}}), or None."""
    try:
        with open(memory_path(jobs_dir)) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("errors"), dict) or not isinstance(data.get("at"), (int, float)):
        return None
    return data


def write(jobs_dir: str, hcas: list[dict], now: float | None = None) -> None:
    """Remember this reading (written whole, owner-only); a node without a port writes nothing."""
    errors = errors_by_port(hcas)
    if not errors:
        return
    path = memory_path(jobs_dir)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    write_json_atomic(path, {"at": round(time.time() if now is None else now, 3), "errors": errors})


def ports(sys_root: str, env_files: list[str], memory_dir: str, remember: bool) -> dict[str, Any]:
    """The InfiniBand/RoCE ports as the gate reads them (plugin_utils/_control/port_health.py): every HCA port,
    NCCL_IB_HCA as the environment files set it, and the error counters remembered in memory_dir from the last
    reading, which this one's replace where ``remember`` (not in check mode). A node without InfiniBand gives an
    empty list. Read by a launch's probe (node_probe) and by Slurm's health check (slurm_health.py) alike."""
    hcas = netinfo.infiniband(sys_root)
    found = {"hcas": hcas, "ib_hca": node.env_file_value(env_files, "NCCL_IB_HCA"),
             "before": read(memory_dir) if hcas else None}
    if hcas and remember:
        write(memory_dir, hcas)
    return found
