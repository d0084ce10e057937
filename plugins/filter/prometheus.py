# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters gpufleet.cluster.prometheus_settings_error, prometheus_config, prometheus_args: the prometheus role's
decisions (plugin_utils/_provision/prometheus.py)."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._provision import prometheus

DOCUMENTATION = r"""
name: prometheus
short_description: The Prometheus server's settings checked (prometheus_settings_error), its prometheus.yml and ARGS
version_added: 0.1.0
description:
  - C(prometheus_settings_error) returns the first problem of playbooks/monitor.yml's settings, naming the variable,
    or an empty string. A missing or unknown monitoring host; a
    node group without hosts; a scrape interval or retention time that Prometheus would not read as a duration
    (C(1.5m), C(15)) or that is zero; a retention size Prometheus would not read (C(10gb)) or that is negative.
  - The filters C(prometheus_config) (the server's prometheus.yml, as a dict; C(nodes | prometheus_config(node_port,
    interval, port, extra, dcgm_hosts, dcgm_port)) scrapes the DCGM exporter of the nodes named in C(dcgm_hosts) as
    the job C(dcgm)), C(prometheus_args) (the ARGS of the
    distribution's /etc/default/prometheus) and C(port_error) (why a variable is not a port, named as
    C(value | gpufleet.cluster.port_error('node_exporter_port'))) come from the same file.
options:
  _input:
    description: The monitoring host's inventory name; empty when none is named.
    type: str
    required: true
  inventory_hosts:
    description: Every host of the inventory (C(groups['all'])).
    type: list
    elements: str
    required: true
  nodes:
    description: The hosts to watch.
    type: list
    elements: str
    required: true
  durations:
    description: The settings that are Prometheus durations, by the name the message gives each.
    type: dict
    required: true
  sizes:
    description: The settings that are sizes, by the name the message gives each.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Refuse a scrape interval Prometheus would not read
  ansible.builtin.assert:
    that: _problem == ''
    fail_msg: "{{ _problem }}"
  vars:
    _problem: >-
      {{ 'mon1' | gpufleet.cluster.prometheus_settings_error(groups['all'], groups['gpu_nodes'],
         {'gpufleet_prometheus_scrape_interval': '15s'}, {'gpufleet_prometheus_retention_size': '2TB'}) }}
"""

RETURN = r"""
_value:
  description: The first problem, naming its variable; empty when there is none.
  type: str
"""


def prometheus_settings_error(monitor_host: Any, inventory_hosts: Any, nodes: Any, durations: Any,
                              sizes: Any = None) -> str:
    return prometheus.settings_error(str(monitor_host or ""), [str(host) for host in inventory_hosts or []],
                                     [str(node) for node in nodes or []], dict(durations or {}), dict(sizes or {}))


def port_error(value: Any, variable: str) -> str:
    return prometheus.port_error(str(variable), value)


def prometheus_config(nodes: Any, node_exporter_port: Any, scrape_interval: Any, listen_port: Any = 9090,
                      extra_scrape_configs: Any = None, dcgm_hosts: Any = None, dcgm_port: Any = 9400) -> dict[str, Any]:
    config = prometheus.server_config(list(nodes or []), int(node_exporter_port), str(scrape_interval),
                                      int(listen_port), [str(host) for host in dcgm_hosts or []], int(dcgm_port))
    config["scrape_configs"] += list(extra_scrape_configs or [])
    return config


def prometheus_args(retention: Any, retention_size: Any, listen_port: Any) -> str:
    return prometheus.server_args(str(retention), str(retention_size or ""), int(listen_port))


class FilterModule:
    """gpufleet.cluster filters."""

    def filters(self) -> dict:
        return {"prometheus_settings_error": prometheus_settings_error, "prometheus_config": prometheus_config,
                "prometheus_args": prometheus_args, "port_error": port_error}
