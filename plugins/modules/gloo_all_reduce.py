#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gloo_all_reduce
short_description: Measure the network across the nodes with a Gloo all_reduce from the training Python
version_added: 0.1.0
description:
  - How C(verify.yml) measures the network where NCCL cannot run (nodes without an NVIDIA GPU). One rank per node,
    torch's Gloo backend, over the interface that holds each node's cluster address (C(GLOO_SOCKET_IFNAME), unless
    the node's environment sets it), meeting at O(master) on O(port).
  - O(mode=pick_port) picks a free TCP port on the master for the rendezvous (in 29500-29999, as train.yml does)
    and returns it as RV(port). O(mode=measure) runs this node's rank; every node must run it at once (C(async)
    with C(poll=0), then C(async_status)), since each waits for all the others.
  - Per message size, the slowest rank's mean time of one all_reduce over O(iterations), the algorithm and bus
    bandwidth as nccl-tests defines them, and a check of the first all_reduce's sums (RV(rows), on rank 0).
  - A failed measurement (no rendezvous within O(timeout_s), no torch, a wrong interface) does not fail the task;
    it is returned in RV(error) instead, so that the controller's M(gpufleet.cluster.nccl_report) names every node's.
    Only a cluster address that no interface holds fails here.
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.cluster.attributes.read_only
options:
  mode:
    description: Pick the rendezvous port (on the master), or run this node's rank.
    type: str
    choices: [pick_port, measure]
    default: measure
  python:
    description: The training Python, with torch.
    type: str
    default: python3
  address:
    description: This node's cluster address (an IP literal); Gloo binds to the interface that holds it.
    type: str
  master:
    description: The master's cluster address (an IP literal), where rank 0 holds the rendezvous.
    type: str
  port:
    description: The rendezvous port (RV(port) of O(mode=pick_port) on the master).
    type: int
  rank:
    description: This node's rank, its place in the inventory's order.
    type: int
  world_size:
    description: How many nodes take part.
    type: int
  sizes:
    description: Message sizes in bytes (each rounded down to whole float32 elements).
    type: list
    elements: int
    default: [1048576, 4194304, 16777216, 67108864]
  iterations:
    description: How many timed all_reduces per size, after one checked warm-up.
    type: int
    default: 5
  timeout_s:
    description: Seconds the rendezvous and each all_reduce may take (torch.distributed's timeout).
    type: float
    default: 120
seealso:
  - module: gpufleet.cluster.nccl_report
"""

EXAMPLES = r"""
- name: Pick the rendezvous port on the master
  gpufleet.cluster.gloo_all_reduce:
    mode: pick_port
  run_once: true
  register: __gloo_port

- name: Run every node's rank at once
  gpufleet.cluster.gloo_all_reduce:
    python: /opt/gpufleet/venv/bin/python
    address: 192.0.2.11
    master: 192.0.2.10
    port: "{{ __gloo_port.port }}"
    rank: 1
    world_size: 3
  async: 300
  poll: 0
"""

RETURN = r"""
port:
  description: With O(mode=pick_port), the free port picked.
  returned: with mode=pick_port
  type: int
  sample: 29731
rank:
  description: This node's rank.
  returned: with mode=measure
  type: int
interface:
  description: The interface Gloo used on this node.
  returned: with mode=measure
  type: str
  sample: ens1f0
rows:
  description:
    - On rank 0, one entry per message size (C(size_bytes), C(count), C(time_us), C(algbw_gbps), C(busbw_gbps),
      C(wrong)); empty on the other ranks.
  returned: with mode=measure
  type: list
  elements: dict
  sample: [{size_bytes: 1048576, count: 262144, type: float, redop: sum, time_us: 1520.3, algbw_gbps: 0.69,
            busbw_gbps: 0.92, wrong: 0}]
error:
  description: Why this node's rank gave no result, or null.
  returned: with mode=measure
  type: str
"""

import inspect

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils._node import gloo_all_reduce, netinfo
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import free_ports


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "mode": {"type": "str", "choices": ["pick_port", "measure"], "default": "measure"},
            "python": {"type": "str", "default": "python3"},
            "address": {"type": "str"},
            "master": {"type": "str"},
            "port": {"type": "int"},
            "rank": {"type": "int"},
            "world_size": {"type": "int"},
            "sizes": {"type": "list", "elements": "int", "default": list(gloo_all_reduce.DEFAULT_SIZES)},
            "iterations": {"type": "int", "default": 5},
            "timeout_s": {"type": "float", "default": 120.0},
        },
        required_if=[("mode", "measure", ("address", "master", "port", "rank", "world_size"))],
        supports_check_mode=True,
    )
    params = module.params
    if params["mode"] == "pick_port":
        module.exit_json(changed=False, port=free_ports.pick_free_port())
    if not params["sizes"] or min(params["sizes"]) < 4 or params["iterations"] < 1:
        module.fail_json(msg="sizes must be 4 bytes or more (one float32) and iterations 1 or more; got sizes %s, "
                         "iterations %s" % (params["sizes"], params["iterations"]))
    interface = netinfo.interface_holding(params["address"])
    if not interface:
        module.fail_json(msg="no interface of this node holds its cluster address %s; set gpufleet_cluster_address to "
                         "one of its addresses" % params["address"])
    found = gloo_all_reduce.run(params["python"], inspect.getsource(gloo_all_reduce), params["master"], params["port"],
                                params["rank"], params["world_size"], params["sizes"], params["iterations"],
                                params["timeout_s"], interface)
    module.exit_json(changed=False, rank=params["rank"], interface=found.get("interface") or interface,
                     rows=found.get("rows") or [], error=found.get("error"))


if __name__ == "__main__":
    main()
