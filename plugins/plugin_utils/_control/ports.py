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


def _firewall_hint(port: int, protocol: str) -> str:
    return ("open it in the node's firewall, e.g. firewall-cmd --permanent --add-port=%d/%s && firewall-cmd --reload, "
            "or iptables -I INPUT -p %s --dport %d -j ACCEPT" % (port, protocol, protocol, port))


def port_problems(listeners: Mapping[str, Any], probes: Mapping[str, Any], master_host: str,
                  port: int) -> dict[str, str]:
    """The first problem of each node from the port check's reports (module_utils/_job/port_check.py), by host.

    listeners and probes map each host to its listen and probe results. A node whose UDP port does not answer the
    others is named with the nodes it did not answer (heartbeats); the master is named when its TCP port (the
    rendezvous) refuses or drops the others' connections; a port that is taken on a node is named as such."""
    problems: dict[str, str] = {}
    for host, listened in listeners.items():
        if listened.get("udp_error"):
            problems[host] = ("%s: UDP port %d (the supervisors' heartbeats) cannot be used on the node: %s; omit "
                              "master_port to have a free port chosen, or name another" % (host, port, listened["udp_error"]))
    unanswered: dict[str, list[str]] = {}
    for sender, probed in sorted(probes.items()):
        for target in probed.get("udp_unanswered") or []:
            unanswered.setdefault(target, []).append(sender)
    for target, senders in sorted(unanswered.items()):
        if target not in problems:
            problems[target] = ("%s: UDP port %d (the supervisors' heartbeats) does not answer %s; %s"
                                % (target, port, ", ".join(senders), _firewall_hint(port, "udp")))
    refused = {sender: probed["tcp_error"] for sender, probed in sorted(probes.items()) if probed.get("tcp_error")}
    listened_master = listeners.get(master_host) or {}
    if listened_master.get("tcp_error") and master_host not in problems:
        problems[master_host] = ("%s: TCP port %d (the rendezvous) cannot be used on the master: %s"
                                 % (master_host, port, listened_master["tcp_error"]))
    elif refused and master_host not in problems:
        problems[master_host] = ("%s: TCP port %d (the rendezvous) on the master does not accept connections from %s; %s"
                                 % (master_host, port, ", ".join("%s (%s)" % item for item in refused.items()),
                                    _firewall_hint(port, "tcp")))
    return problems


PORT_CHECKS = ("remembered", "always")


def remembered_pass(memories: Mapping[str, Any], nodes: list[list[str]], master_host: str, port: int,
                    ttl_s: float, tcp: bool = True) -> str:
    """'' where the port check may be skipped: every node of the job (nodes: [host, address] of the gang and its
    spares) remembers a pass on port for exactly these nodes and this master, younger than ttl_s, the TCP
    connection to the master included where the launch needs it (tcp: not launcher=none)
    (module_utils/_job/port_memory.py); else why it runs, for the log. A pass remembered for other nodes (one
    added, removed, moved or readdressed), another port, another master, or older than ttl_s is never trusted."""
    wanted = [list(node) for node in nodes]
    for host, _address in wanted:
        record = (memories.get(host) or {}).get("%s:%d" % (host, port))  # port_memory.key
        if not record:
            return "%s remembers no pass on port %d" % (host, port)
        if record.get("nodes") != wanted or record.get("master") != master_host:
            return "%s remembers a pass on port %d for other nodes" % (host, port)
        if not 0 <= float(record.get("age_s", -1)) <= ttl_s:
            return "%s's pass on port %d is %s s old (port_check_ttl_s=%g)" % (host, port, record.get("age_s"), ttl_s)
        if tcp and host != master_host and not record.get("tcp"):
            return "%s's pass on port %d did not try the master's TCP port" % (host, port)
    return ""
