#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stack_facts
short_description: Report a node's GPU stack versions (GPUs, driver, CUDA, NCCL, torch) in one call
version_added: 0.1.0
description:
  - Reads the GPUs and driver with C(nvidia-smi), the CUDA toolkit's version with C(nvcc --version), NCCL's package
    version with dpkg or rpm, and torch's version with the training Python. Changes nothing.
  - Used by C(verify.yml), which compares the nodes.
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.cluster.attributes.read_only
options:
  python:
    description: The training Python whose torch is reported.
    type: str
    default: python3
  cuda_home:
    description: The CUDA toolkit folder.
    type: path
    default: /usr/local/cuda
  sys_root:
    description: Where sysfs is read for NVSwitches (whether Fabric Manager is needed) and GPUs on the PCI bus.
    type: path
    default: /sys
  kernel_log:
    description: Where the kernel's messages are read for XIDs (C(/dev/kmsg), or a file in its format).
    type: path
    default: /dev/kmsg
  env_files:
    description: The environment files the launch sources, where NCCL_IB_HCA (the network ports NCCL takes) is read.
    type: list
    elements: path
    default: [/etc/gpufleet/nccl.env]
  driver_packages:
    description: The driver packages whose installed version Fabric Manager's must equal (the first found).
    type: list
    elements: str
    default: []
  fabricmanager_packages:
    description: Fabric Manager's package names (the first found is reported).
    type: list
    elements: str
    default: [nvidia-fabricmanager, nvidia-fabric-manager]
"""

EXAMPLES = r"""
- name: Read the stack
  gpufleet.cluster.stack_facts:
    python: /opt/gpufleet/venv/bin/python
  register: __verify_stack
"""

RETURN = r"""
gpu_health:
  description:
    - The node's GPU health as train.yml's gate reads it (module_utils/_runtime/gpu_health.py; the same keys as
      M(gpufleet.cluster.node_probe)'s C(gpu_health)).
  returned: always
  type: dict
gpu_count:
  description: GPUs nvidia-smi lists (0 without a working driver).
  returned: always
  type: int
gpu_models:
  description: The GPU models.
  returned: always
  type: list
  elements: str
driver:
  description: The driver version nvidia-smi reports, or null.
  returned: always
  type: str
cuda:
  description: The toolkit's version (major.minor), or null.
  returned: always
  type: str
nccl:
  description: The NCCL package version, or null.
  returned: always
  type: str
torch:
  description: torch's version in the training Python, or null.
  returned: always
  type: str
driver_package:
  description: The installed version of the first of O(driver_packages) found, or null.
  returned: always
  type: str
fabricmanager:
  description: Fabric Manager's installed package version, or null.
  returned: always
  type: str
fabricmanager_state:
  description: C(systemctl is-active nvidia-fabricmanager), or C(no systemd) where systemd is not the init.
  returned: always
  type: str
fabricmanager_needed:
  description: Whether the node has NVSwitches (under O(sys_root)), so that CUDA needs Fabric Manager running.
  returned: always
  type: bool
persistence_mode:
  description: Persistence mode as nvidia-smi reports it (C(Enabled), C(Disabled)), or null without a driver.
  returned: always
  type: str
peermem:
  description: Whether the nvidia-peermem module (GPUDirect RDMA) is loaded.
  returned: always
  type: bool
gpudirect_rdma:
  description:
    - Through which path GPUDirect RDMA works on the node, C(peermem) (nvidia-peermem loaded, with MLNX_OFED or
      DOCA-OFED) or C(DMA-BUF) (the open kernel modules on Linux 5.12 or later, the path NVIDIA recommends), else
      why neither does (C(no HCA), C(no driver loaded), C(none (...))).
  returned: always
  type: str
  sample: DMA-BUF
ib_ports:
  description:
    - The InfiniBand/RoCE ports for the health gate's network half, as M(gpufleet.cluster.node_probe) returns them
      (C(hcas), C(ib_hca)); C(before) is null (verify.yml keeps no reading).
  returned: always
  type: dict
"""

import platform

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils._node import netinfo, node, nvidia_node
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import gpu_health


def main() -> None:
    module = AnsibleModule(
        argument_spec={"python": {"type": "str", "default": "python3"},
                       "cuda_home": {"type": "path", "default": "/usr/local/cuda"},
                       "sys_root": {"type": "path", "default": "/sys"},
                       "driver_packages": {"type": "list", "elements": "str", "default": []},
                       "fabricmanager_packages": {"type": "list", "elements": "str",
                                                  "default": ["nvidia-fabricmanager", "nvidia-fabric-manager"]},
                       "kernel_log": {"type": "path", "default": gpu_health.KMSG},
                       "env_files": {"type": "list", "elements": "path", "default": ["/etc/gpufleet/nccl.env"]}},
        supports_check_mode=True,
    )
    sys_root = module.params["sys_root"]
    hcas = netinfo.infiniband(sys_root)
    peermem = nvidia_node.module_loaded("nvidia-peermem", sys_root)
    health = nvidia_node.gpu_health_with_pci(module.params["kernel_log"], sys_root)
    gpus = nvidia_node.gpu_summary(health)  # the same nvidia-smi read, not a second one
    versions = nvidia_node.package_versions({  # one package query for the three
        "nccl": ("libnccl2", "libnccl"), "driver_package": tuple(module.params["driver_packages"]),
        "fabricmanager": tuple(module.params["fabricmanager_packages"])})
    module.exit_json(
        changed=False,
        gpu_health=health,
        gpu_count=gpus["count"],
        gpu_models=gpus["models"],
        driver=gpus["driver"],
        cuda=nvidia_node.cuda_version(module.params["cuda_home"]),
        nccl=versions["nccl"],
        torch=node.python_info(module.params["python"]).get("torch_version"),
        driver_package=versions["driver_package"],
        fabricmanager=versions["fabricmanager"],
        fabricmanager_state=nvidia_node.service_state("nvidia-fabricmanager"),
        fabricmanager_needed=health["fabric_switches"] > 0,
        persistence_mode=nvidia_node.persistence_mode(),
        peermem=peermem,
        gpudirect_rdma=nvidia_node.gpudirect_rdma(bool(hcas), peermem,
                                                  nvidia_node.open_modules_loaded(sys_root), platform.release()),
        ib_ports={"hcas": hcas, "ib_hca": node.env_file_value(module.params["env_files"], "NCCL_IB_HCA"), "before": None},
    )


if __name__ == "__main__":
    main()
