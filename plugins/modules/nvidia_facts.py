#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_facts
short_description: Report a node's NVIDIA GPUs and its loaded and installed driver versions
version_added: 0.1.0
description:
  - Lists NVIDIA GPUs on the PCI bus from sysfs (vendor 0x10de, display classes), which works before any driver
    is installed; reads the loaded kernel module's version from C(/sys/module/nvidia/version) and the installed
    module's version with C(modinfo). Changes nothing.
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.cluster.attributes.read_only
options:
  sys_root:
    description: Where sysfs is mounted.
    type: path
    default: /sys
  driver_packages:
    description: Driver packages whose installed version to return as RV(driver_package_version) (the first found).
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Read the node's NVIDIA state
  gpufleet.cluster.nvidia_facts:
  register: __nvidia_driver_facts
"""

RETURN = r"""
gpus:
  description: NVIDIA GPUs on the PCI bus, with C(address) and C(device) id.
  returned: always
  type: list
  elements: dict
gpu_present:
  description: Whether the node has at least one NVIDIA GPU.
  returned: always
  type: bool
nvswitches:
  description: NVIDIA NVSwitches on the PCI bus (class C(0x0680)), with C(address) and C(device) id; Fabric Manager
    must run where there are any.
  returned: always
  type: list
  elements: dict
nvlink5:
  description:
    - The InfiniBand devices whose VPD carries C(SW_MNG) (NVLink5 switch management ports), by name, as NVIDIA's
      driver container detects an NVLink5 system (HGX B200/B300, GB200/GB300 NVL), whose NVSwitches are not on the
      PCI bus as NVIDIA bridges. Fabric Manager, the NVLink subnet manager and C(ib_umad) are needed where there are
      any.
  returned: always
  type: list
  elements: str
infiniband:
  description: InfiniBand HCAs under O(sys_root) (C(class/infiniband)), each with its ports; GPUDirect RDMA (peermem)
    is wanted where there are any.
  returned: always
  type: list
  elements: dict
ofed:
  description:
    - MLNX_OFED's or DOCA-OFED's release (C(ofed_info -s)), or null where neither is installed (the distribution's
      inbox RDMA stack). The legacy nvidia-peermem module loads only with them; otherwise GPUDirect RDMA goes through
      DMA-BUF.
  returned: always
  type: str
  sample: MLNX_OFED_LINUX-24.10-1.1.4.0
container:
  description: Whether the node is a container (C(/.dockerenv), C(/run/.containerenv), or C(container=) in PID 1's
    environment); a driver belongs on the host, not in a container.
  returned: always
  type: bool
container_evidence:
  description: What made RV(container) true (C(/.dockerenv exists), say), or null.
  returned: always
  type: str
driver_origin:
  description: Where the loaded or installed driver came from, or null without one. V(package) when a package
    carries its kernel module, V(runfile) when NVIDIA's .run installer left C(/usr/bin/nvidia-uninstall), else
    V(unmanaged) (the machine's image or provider put it there). NVIDIA's packages must not be installed over a
    driver that did not come from packages.
  returned: always
  type: str
  sample: package
secure_boot:
  description: Whether UEFI Secure Boot is on (unsigned DKMS modules will not load); null when it cannot be read.
  returned: always
  type: bool
driver_package_version:
  description: The installed version (dpkg or rpm) of the first of O(driver_packages) found, or null.
  returned: always
  type: str
  sample: 570.124.06-1
loaded_driver:
  description: Version of the loaded nvidia kernel module, or null.
  returned: always
  type: str
  sample: 570.124.06
installed_driver:
  description: Version of the nvidia kernel module installed for the running kernel, or null.
  returned: always
  type: str
  sample: 570.124.06
read_of:
  description:
    - What this read covered, O(sys_root) and O(driver_packages) as given; the NVIDIA roles use a read of the driver
      role's preflight instead of their own only where it covered theirs (filter C(gpufleet.cluster.driver_read)).
  returned: always
  type: dict
  sample: {"sys_root": "/sys", "driver_packages": ["nvidia-driver-580-open", "nvidia-open"]}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils._node import netinfo, nvidia_node


def main() -> None:
    module = AnsibleModule(argument_spec={"sys_root": {"type": "path", "default": "/sys"},
                                          "driver_packages": {"type": "list", "elements": "str", "default": []}},
                           supports_check_mode=True)
    sys_root = module.params["sys_root"]
    gpus = nvidia_node.pci_gpus(sys_root)
    evidence = nvidia_node.container_evidence()
    loaded = nvidia_node.loaded_driver(sys_root)
    installed = nvidia_node.installed_driver()
    module.exit_json(changed=False, gpus=gpus, gpu_present=bool(gpus),
                     nvswitches=nvidia_node.pci_nvswitches(sys_root),
                     nvlink5=nvidia_node.nvlink5_switch_devices(sys_root),
                     infiniband=netinfo.infiniband(sys_root),
                     ofed=nvidia_node.ofed_release(),
                     container=evidence is not None, container_evidence=evidence,
                     secure_boot=nvidia_node.secure_boot(sys_root),
                     loaded_driver=loaded,
                     installed_driver=installed,
                     driver_origin=nvidia_node.driver_origin(loaded or installed, nvidia_node.installed_packages()
                                                             if loaded or installed else None),
                     driver_package_version=nvidia_node.package_version(tuple(module.params["driver_packages"]))
                     if module.params["driver_packages"] else None,
                     read_of={"sys_root": sys_root, "driver_packages": module.params["driver_packages"]})


if __name__ == "__main__":
    main()
