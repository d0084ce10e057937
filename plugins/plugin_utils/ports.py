# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The port decision of a launch: the rendezvous port (master_port) and the relaunch ports (max_restarts).

Decided on the controller from the plan and the master's probe (gpufleet.cluster.node_probe on node_rank 0), which
runs after the plan: a port the user gave is used; the same job still running keeps its ports (the launch is then
a no-op), unless a forced relaunch stops it first; otherwise the free ports the master found.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def job_ports(given: Any, master_probe: Mapping[str, Any], force: bool) -> dict[str, Any]:
    """{'master_port': int, 'restart_ports': [int, ...]} for this launch."""
    running = dict(master_probe.get("job") or {})
    keep = bool(running.get("running")) and not force
    master_port = given or (running.get("master_port") if keep else None) or master_probe.get("free_port")
    restart_ports = (running.get("restart_ports") if keep and running.get("restart_ports")
                     else master_probe.get("free_ports") or [])
    return {"master_port": master_port, "restart_ports": list(restart_ports)}
