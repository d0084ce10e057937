#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: port_check
short_description: Check before launch that the job's ports reach every node (TCP rendezvous, UDP heartbeats)
version_added: 0.1.0
description:
  - One of three steps that C(train.yml)'s preflight runs on every node at once, on the master port's number.
  - O(mode=listen) binds the UDP port (and, with O(tcp), the TCP port), answers every probe, and accepts TCP
    connections until O(mode=quit) tells it to end or O(lifetime_s) passes. Run it with C(async) and C(poll=0).
  - O(mode=probe) sends a ping to every peer's UDP port until each acknowledges it, and connects to O(master)'s TCP
    port, for at most O(timeout_s) seconds, and reports who did not answer.
  - O(mode=quit) tells this node's listener to end (a quit file in the node's temporary folder, and a datagram),
    waits until it has, so that the launch finds the port free, and returns its report (O(results_file)).
  - The controller names the node, port and protocol at fault from the reports
    (C(plugin_utils/_control/ports.py) C(port_problems())). Nothing is changed on the node but, with O(jobs_dir),
    the small record of what this node's probe found, which a later launch reads to skip the check.
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.cluster.attributes.read_only
options:
  mode:
    description: Which step.
    type: str
    choices: [listen, probe, quit]
    required: true
  host:
    description: This node's inventory name, as the others know it.
    type: str
    required: true
  address:
    description: This node's cluster address, where the listener binds (on all addresses when it is not the node's own).
    type: str
    required: true
  port:
    description: The port number, the master port of the launch.
    type: int
    required: true
  token:
    description: A word of this launch that every datagram carries, so that no stray packet passes for an answer.
    type: str
    required: true
  tcp:
    description: With O(mode=listen), accept TCP connections on the port too (the master).
    type: bool
    default: false
  lifetime_s:
    description: With O(mode=listen), end after this many seconds even without O(mode=quit).
    type: float
    default: 60
  peers:
    description: With O(mode=probe), the other nodes, each a list of its inventory name and cluster address.
    type: list
    elements: list
    default: []
  master:
    description: With O(mode=probe), the master's inventory name and cluster address to connect to over TCP; none for no TCP check.
    type: list
    elements: str
  timeout_s:
    description: With O(mode=probe), how long to wait for every answer.
    type: float
    default: 3
  nodes:
    description:
      - With O(mode=probe) and O(jobs_dir), every node of the job as C([host, address]) pairs in rank order (the
        gang, then its spares; the first is the master), for the record the probe keeps.
    type: list
    elements: list
    default: []
  jobs_dir:
    description:
      - With O(mode=probe) and O(nodes), where this node keeps what the check found (C(.port-checks.json), the
        user's jobs folder). A pass is remembered for these nodes, this port and this master when every ping was
        acknowledged and the master's TCP port accepted, and forgotten otherwise
        (C(module_utils/_job/port_memory.py)); M(gpufleet.cluster.node_probe) reads it back, and the next launch
        skips the check where every node remembers a pass (C(port_check=remembered)).
    type: path
  results_file:
    description:
      - With O(mode=quit), the results file of the listener's async job (its
        C(results_file) return value). Once the listener has ended, its report is read from
        there and returned as RV(listener), and the file is removed, as C(async_status) with C(mode=cleanup) would.
    type: path
seealso:
  - module: gpufleet.cluster.node_probe
"""

EXAMPLES = r"""
- name: Listen on the master port while the others probe it
  gpufleet.cluster.port_check:
    mode: listen
    host: "{{ inventory_hostname }}"
    address: 192.0.2.11
    port: 29500
    token: "{{ run_id }}"
    tcp: "{{ inventory_hostname == groups['gpu_nodes'][0] }}"
  async: 120
  poll: 0
  register: __listener

- name: Probe every other node
  gpufleet.cluster.port_check:
    mode: probe
    host: "{{ inventory_hostname }}"
    address: 192.0.2.12
    port: 29500
    token: "{{ run_id }}"
    peers: [[gpu01, 192.0.2.11], [gpu03, 192.0.2.13]]
    master: [gpu01, 192.0.2.11]
"""

RETURN = r"""
udp_unanswered:
  description: With O(mode=probe), the peers whose UDP port never answered.
  returned: mode is probe
  type: list
  elements: str
tcp_error:
  description: With O(mode=probe), why the TCP connection to the master failed; with O(mode=listen), why the TCP port could not be bound. Empty when it worked.
  returned: mode is probe or listen
  type: str
tcp_checked:
  description: Whether a TCP connection was tried.
  returned: mode is probe
  type: bool
seconds:
  description: How long the probe took.
  returned: mode is probe
  type: float
udp_error:
  description: With O(mode=listen), why the UDP port could not be bound (in use on the node); empty when it was.
  returned: mode is listen
  type: str
listener_ended:
  description: With O(mode=quit), whether a listener took the quit within 2 seconds (false when none was running).
  returned: mode is quit
  type: bool
listener:
  description: With O(mode=quit) and O(results_file), the listener's report (RV(udp_error), RV(tcp_error), RV(heard)); empty when none was found.
  returned: mode is quit and results_file is given
  type: dict
remembered:
  description:
    - With O(mode=probe), O(jobs_dir) and O(nodes), whether a pass is now remembered on the node (false where
      something did not get through, and any earlier pass on the port is forgotten).
  returned: mode is probe and jobs_dir and nodes are given
  type: bool
memory_error:
  description: Why the record could not be written (the jobs folder not writable); the check itself is not failed.
  returned: when the record could not be written
  type: str
heard:
  description: With O(mode=listen), the peers whose pings arrived.
  returned: mode is listen
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import port_check, port_memory


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "mode": {"type": "str", "choices": ["listen", "probe", "quit"], "required": True},
            "host": {"type": "str", "required": True},
            "address": {"type": "str", "required": True},
            "port": {"type": "int", "required": True},
            "token": {"type": "str", "required": True, "no_log": False},
            "tcp": {"type": "bool", "default": False},
            "lifetime_s": {"type": "float", "default": 60.0},
            "peers": {"type": "list", "elements": "list", "default": []},
            "master": {"type": "list", "elements": "str"},
            "timeout_s": {"type": "float", "default": 3.0},
            "results_file": {"type": "path"},
            "nodes": {"type": "list", "elements": "list", "default": []},
            "jobs_dir": {"type": "path"},
        },
        supports_check_mode=True,
    )
    params = module.params
    if params["mode"] == "listen":
        result = port_check.listen(params["host"], params["address"], params["port"], params["tcp"],
                                   params["token"], params["lifetime_s"])
    elif params["mode"] == "probe":
        peers = [(str(peer[0]), str(peer[1])) for peer in params["peers"]]
        master = (str(params["master"][0]), str(params["master"][1])) if params["master"] else None
        result = port_check.probe(params["host"], peers, params["port"], params["token"], master, params["timeout_s"])
        if params["jobs_dir"] and params["nodes"] and not module.check_mode:
            passed = not result["udp_unanswered"] and not result["tcp_error"]
            nodes = [[str(name), str(address)] for name, address in params["nodes"]]
            try:
                port_memory.remember(params["jobs_dir"], params["host"], params["port"], nodes, nodes[0][0],
                                     master is not None, passed)
                result["remembered"] = passed
            except OSError as exc:  # the record only saves a later check: its failure fails nothing
                result.update(remembered=False, memory_error=str(exc))
    else:
        result = port_check.quit_listener(params["host"], params["address"], params["port"], params["token"],
                                          results_file=params["results_file"] or "")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
