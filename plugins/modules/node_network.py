#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_network
short_description: Find the interface that holds the node's cluster address, and its InfiniBand HCAs
version_added: 0.1.0
description:
  - Reads C(ip -j addr show) (or, on a node without iproute2, the kernel, which gives each interface's primary IPv4
    address and /proc/net/if_inet6) to find the interface that holds O(address) (what NCCL_SOCKET_IFNAME and
    GLOO_SOCKET_IFNAME must name), and C(/sys/class/infiniband) for the HCAs, their ports' state and their
    net devices (what NCCL_IB_HCA names). Changes nothing.
  - Fails when no interface holds O(address), naming the address and the interfaces found, since a job would
    then bind to the wrong network.
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.cluster.attributes.read_only
options:
  address:
    description: The node's cluster address, an IP literal.
    type: str
    required: true
  sys_root:
    description: Where sysfs is mounted.
    type: path
    default: /sys
"""

EXAMPLES = r"""
- name: Find the cluster interface
  gpufleet.cluster.node_network:
    address: 192.0.2.11
  register: __nccl_env_network
"""

RETURN = r"""
interface:
  description: The interface that holds O(address).
  returned: success
  type: str
  sample: ens1f0
interfaces:
  description: Every interface with its addresses.
  returned: always
  type: dict
  sample: {"lo": ["127.0.0.1"], "ens1f0": ["192.0.2.11"]}
infiniband:
  description: The HCAs with C(name), C(ports) (C(port), C(state), C(link_layer)) and C(netdevs).
  returned: always
  type: list
  elements: dict
ib_hca:
  description: NCCL_IB_HCA entries (C(hca:port)) for the ports that are active.
  returned: always
  type: list
  elements: str
  sample: ["mlx5_0:1", "mlx5_1:1"]
hostname:
  description: The short host name.
  returned: always
  type: str
  sample: gpu01
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils._node import netinfo, nvidia_node


def main() -> None:
    module = AnsibleModule(
        argument_spec={"address": {"type": "str", "required": True}, "sys_root": {"type": "path", "default": "/sys"}},
        supports_check_mode=True,
    )
    try:
        found = netinfo.interfaces()
        interface = netinfo.interface_of(module.params["address"], found)
    except (OSError, ValueError) as exc:
        module.fail_json(msg="cannot read the node's addresses: %s" % exc)
    hcas = netinfo.infiniband(module.params["sys_root"])
    # NVLink5 systems' switch management ports are InfiniBand devices too; NCCL must not send its traffic there.
    switch_ports = nvidia_node.nvlink5_switch_devices(module.params["sys_root"])
    result = dict(changed=False, interfaces=found, infiniband=hcas, ib_hca=netinfo.active_hcas(hcas, switch_ports),
                  **netinfo.hostname())
    if interface is None:
        module.fail_json(msg="no interface of this node holds its cluster address %s (interfaces: %s); set "
                         "gpufleet_cluster_address to one of its addresses" % (module.params["address"], found), **result)
    module.exit_json(interface=interface, **result)


if __name__ == "__main__":
    main()
