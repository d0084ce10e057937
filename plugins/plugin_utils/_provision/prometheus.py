# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The monitoring roles' decisions (playbooks/monitor.yml): the Prometheus server's settings, checked as Prometheus
reads them before anything is changed, and its configuration, scrape targets from the inventory.

Prometheus reads a duration (scrape_interval, --storage.tsdb.retention.time) with common/model's ParseDuration:
units y, w, d, h, m, s, ms, each at most once and in that order, integers only ("1.5m" and "15" are refused); and a
size (--storage.tsdb.retention.size) with alecthomas/units' base-2 byte units (B, KB ... EB, KiB ... EiB, a
number before each, "0" alone). tests/unit/plugins/plugin_utils/test_prometheus_settings.py holds these readings against
the distribution's own promtool and prometheus binaries.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

# Where the prometheus role puts gpufleet's alert rules (roles/prometheus/files/gpufleet.rules.yml) on the server.
RULES_PATH = "/etc/prometheus/gpufleet.rules.yml"
NODE_JOB = "node"  # the node exporters' scrape job; the alert rules read up{job="node"}
DCGM_JOB = "dcgm"  # the DCGM exporters' (the dcgm role's, port 9400); the alert rules read up{job="dcgm"}
_DURATION = re.compile(r"^(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?$")
_SIZE = re.compile(r"^(0|(\d+(\.\d+)?([KMGTPE]i?)?B)+)$")


def duration_error(variable: str, value: Any) -> str:
    """Why Prometheus would refuse value as a duration, naming the variable; '' when it reads it. Zero, which
    Prometheus reads as "its default", is refused too: a scrape every 0 s or a retention of 0 says nothing."""
    text = str(value if value is not None else "").strip()
    example = "e.g. 15s, 1m30s, 15d"
    if text != "0" and (not text or not _DURATION.match(text)):
        return "%s: %r is not a Prometheus duration (%s: whole numbers with y, w, d, h, m, s or ms)" % (
            variable, text, example)
    if not re.search(r"[1-9]", text):
        return "%s: %r is zero, which Prometheus reads as its default; give the duration you want (%s)" % (
            variable, text, example)
    return ""


def size_error(variable: str, value: Any) -> str:
    """Why Prometheus would refuse value as --storage.tsdb.retention.size, naming the variable; '' when it reads it
    or when value is empty (no size limit). A negative size, which Prometheus takes, is refused too."""
    text = str(value if value is not None else "").strip()
    if text.startswith("-") and _SIZE.match(text[1:]):  # Prometheus takes it, as no limit; say what is meant
        return "%s: %r is negative; give a size (e.g. 512MB or 2TB), or leave it empty for no size limit" % (
            variable, text)
    if text and not _SIZE.match(text):
        return ("%s: %r is not a size Prometheus reads (a number with B, KB, MB, GB, TB, PB or EB, e.g. 512MB or 2TB; "
                "upper case)" % (variable, text))
    return ""


def port_error(variable: str, value: Any) -> str:
    """Why value is not a TCP port a server may listen on, naming the variable; '' when it is one."""
    text = str(value if value is not None else "").strip()
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        return "%s: %s is not a port (1-65535)" % (variable, text)
    return ""


def settings_error(monitor_host: str, inventory_hosts: list[str], nodes: list[str], durations: dict[str, Any],
                   sizes: dict[str, Any]) -> str:
    """The first thing wrong with monitor.yml's settings, naming the variable; '' when there is none. durations and
    sizes hold the settings of each kind by the name the message gives them."""
    if not monitor_host:
        return ("no host for the Prometheus server: add a gpu_monitor group to the inventory, or give "
                "-e monitor_host=<an inventory host>")
    if monitor_host not in inventory_hosts:
        return ("monitor_host: %s is not a host of the inventory (its hosts: %s); add it, or name one of them"
                % (monitor_host, ", ".join(inventory_hosts)))
    if not nodes:
        return "the inventory's node group has no hosts: there is nothing to watch"
    problems = [duration_error(name, value) for name, value in durations.items()]
    problems += [size_error(name, value) for name, value in sizes.items()]
    return next((problem for problem in problems if problem), "")


def server_args(retention_time: str, retention_size: str, listen_port: int) -> str:
    """The ARGS line of the distribution's /etc/default/prometheus (its service passes them to prometheus)."""
    args = ["--storage.tsdb.retention.time=%s" % retention_time, "--web.listen-address=:%d" % int(listen_port)]
    if str(retention_size or "").strip():
        args.append("--storage.tsdb.retention.size=%s" % str(retention_size).strip())
    return " ".join(args)


def server_config(nodes: list[dict[str, Any]], node_exporter_port: int, scrape_interval: str,
                  listen_port: int = 9090, dcgm_hosts: Sequence[str] = (), dcgm_port: int = 9400) -> dict[str, Any]:
    """prometheus.yml: gpufleet's alert rules, Prometheus itself, one scrape job for the node exporters and one
    (DCGM_JOB) for the DCGM exporters of the nodes named in dcgm_hosts, each target labelled with its node's inventory
    name (`node`, which every alert names). nodes: the cluster_nodes filter's dicts (host, ip)."""
    def targets(port: int, hosts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"targets": ["%s:%d" % (_bracketed(node["ip"]), port)], "labels": {"node": node["host"]}}
                for node in hosts]

    jobs = [{"job_name": "prometheus", "static_configs": [{"targets": ["localhost:%d" % int(listen_port)]}]},
            {"job_name": NODE_JOB, "static_configs": targets(int(node_exporter_port), nodes)}]
    with_dcgm = [node for node in nodes if node["host"] in set(dcgm_hosts)]
    if with_dcgm:
        jobs.append({"job_name": DCGM_JOB, "static_configs": targets(int(dcgm_port), with_dcgm)})
    return {"global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
            "rule_files": [RULES_PATH], "scrape_configs": jobs}


def _bracketed(ip: str) -> str:
    return "[%s]" % ip if ":" in ip else ip
