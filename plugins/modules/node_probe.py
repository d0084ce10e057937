#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_probe
short_description: Read what a launch on this node depends on, changing nothing
version_added: 0.1.0
description:
  - Counts the node's GPUs (C(nvidia-smi --query-gpu); 0 without a driver), checks that the training Python exists and
    whether it can import torch, reports whether a job of the given name is running, and on request picks a
    free rendezvous port or checks that a given one is free.
  - Run by C(train.yml) on every node before anything is changed, so that a bad input fails first.
  - Runs without a module run, as M(gpufleet.cluster.launch) does, from the collection's node-side code kept
    compiled on the node under C($XDG_CACHE_HOME/gpufleet/runtime/); the node's Python is found as for a module
    (interpreter discovery) and returned as the same fact.
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - gpufleet.cluster.attributes.read_only
  - gpufleet.cluster.job_folder
attributes:
  action:
    support: full
    details: The options are checked on the controller; the probe is one shell command on the node where it can.
  async:
    support: none
  bypass_host_loop:
    support: none
options:
  python:
    description: The training Python to look for.
    type: str
    default: python3
  job:
    description: Job name whose state to report.
    type: str
  pick_port:
    description: Pick a free TCP port in 29500-29999 and return it as RV(free_port).
    type: bool
    default: false
  port_nodes:
    description:
      - With O(pick_port), every node of the job as C([host, address]) pairs in rank order (the gang, then its
        spares). A free port that the port check remembers a pass on for these nodes, younger than
        O(port_check_ttl_s), is picked first (RV(port_memory)).
    type: list
    elements: list
    default: []
  port_check_ttl_s:
    description: How old a remembered pass of the port check may be for O(port_nodes) to prefer its port; 0 prefers none.
    type: float
    default: 0
  record_ib_counters:
    description:
      - Remember the InfiniBand/RoCE ports' error counters of this reading in the jobs folder (C(.ib-counters.json)),
        for the next probe to compare (C(before) of RV(ib_ports)). The role sets it except in check mode.
    type: bool
    default: false
  check_port:
    description: Report in RV(port_in_use) whether this TCP port is taken.
    type: int
  launcher:
    description: Report in RV(launcher_missing) what the node lacks for this launcher (C(deepspeed), C(mpirun), C(horovodrun)).
    type: str
    default: torchrun
  address:
    description:
      - This node's cluster address (an IP literal). The interface that holds it is returned as RV(iface), for
        C(NCCL_SOCKET_IFNAME) and C(GLOO_SOCKET_IFNAME) on nodes where nothing sets them.
    type: str
  env_files:
    description: Environment files of the node (the nccl_env role's); the names they set are returned as RV(env_file_names).
    type: list
    elements: path
    default: []
  container_engine:
    description: The container engine (C(docker) or C(podman), or a path to one) that O(container_image) is looked up with.
    type: str
    default: docker
  container_image:
    description:
      - The job's container image (a reference or an ID). Given, the probe looks for O(container_engine) and the
        image ID it holds for the image; empty, the job runs on the host and the probe looks at no engine.
    type: str
    default: ""
  gpu_health:
    description:
      - Read the GPUs' health (nvidia-smi's per-GPU state, the compute processes, NVLink, the kernel log's XIDs)
        into RV(gpu_health), for the launch's health gate. Off, nothing of it is read.
    type: bool
    default: true
  kernel_log:
    description:
      - Where the kernel's messages are read from for XIDs, in C(/dev/kmsg)'s record format. A file here replaces
        the device (tests use one); where C(/dev/kmsg) cannot be read, C(journalctl -k) is.
    type: path
    default: /dev/kmsg
  sys_root:
    description: Where sysfs is (the GPUs on the PCI bus are counted there); tests point it at a fake tree.
    type: path
    default: /sys
  extra_ports:
    description: Pick this many more free TCP ports, different from each other and from RV(free_port) (the relaunch ports of O(job)).
    type: int
    default: 0
seealso:
  - module: gpufleet.cluster.launch
"""

EXAMPLES = r"""
- name: Probe the nodes before a launch
  gpufleet.cluster.node_probe:
    python: /opt/venvs/train/bin/python
    job: llama-ft
    pick_port: "{{ inventory_hostname == groups['gpu_nodes'][0] }}"
  register: __probe
"""

RETURN = r"""
gpu_count:
  description: GPUs listed by C(nvidia-smi --query-gpu); 0 when there is no driver.
  returned: always
  type: int
  sample: 8
gpu_health:
  description:
    - With O(gpu_health), what the gate reads (module_utils/_runtime/gpu_health.py) - C(nvidia_smi) (whether it is installed),
      C(gpus) (one dict per GPU that answers), C(lost) (GPUs it cannot reach), C(processes), C(nvlink), C(xids)
      (the kernel log's since boot, each with its C(time) and C(class)), C(kernel_log) (where they were read) and
      C(pci_gpus) (NVIDIA GPUs on the PCI bus). Without, empty.
  returned: always
  type: dict
python:
  description: The training Python, with C(found), C(path), C(version) and C(torch) (whether torch can be imported).
  returned: always
  type: dict
  sample: {"found": true, "path": "/usr/bin/python3", "version": "3.11.2", "torch": true}
job:
  description: State of the job named by O(job) (see M(gpufleet.cluster.job_status)).
  returned: when O(job) is given
  type: dict
jobs_dir:
  description: O(jobs_dir) as an absolute path on the node (C(~) expanded with the module's C(HOME)).
  returned: always
  type: str
  sample: /home/ml/.gpufleet/jobs
port_memory:
  description:
    - What the port check remembers on this node (C(.port-checks.json) in the jobs folder), by C(host:port); each
      record's C(host), C(port), C(nodes) ([host, address] in rank order), C(master), C(tcp) (the master's TCP port
      was tried) and C(age_s) by the node's own clock. C(module_utils/_job/port_memory.py).
  returned: always
  type: dict
free_port:
  description: A free port.
  returned: when O(pick_port=true)
  type: int
  sample: 29731
launcher_missing:
  description: What the node lacks for O(launcher), or an empty string.
  returned: always
  type: str
  sample: needs Open MPI's mpirun on the node's PATH (the mpi role installs it)
free_ports:
  description: The O(extra_ports) more free ports.
  returned: when O(extra_ports) is more than 0
  type: list
  elements: int
  sample: [29617, 29544]
iface:
  description: The interface that holds O(address), or an empty string (no O(address), or no interface holds it).
  returned: always
  type: str
  sample: eth0
hostname_address:
  description: The address this node's hostname resolves to (C(127.0.1.1) on a Debian or Ubuntu server as installed).
  returned: always
  type: str
  sample: 127.0.1.1
env_file_names:
  description: The variable names that the readable ones of O(env_files) set.
  returned: always
  type: list
  elements: str
  sample: [GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME]
container:
  description:
    - With O(container_image), the engine's C(path) on the node (empty when it is not there), the C(image_id) it
      holds for the image (empty when none) and an C(error) when the engine did not answer; without, empty.
  returned: always
  type: dict
  sample: {"engine": "podman", "path": "/usr/bin/podman", "image": "localhost/train:1", "image_id": "4c0f...", "error": ""}
ib_ports:
  description:
    - The node's InfiniBand/RoCE ports for the gate (plugin_utils/_control/port_health.py) - C(hcas) (each HCA's C(name),
      C(netdevs) and C(ports), each port's C(state), C(phys_state), C(link_layer), C(rate) as the kernel writes them,
      C(link) (the rate parsed - C(rate_gbps), C(width), C(speed)) and C(errors) (the error counters; null where the
      device answers no performance query)), C(ib_hca) (NCCL_IB_HCA as O(env_files) set it; null where none does) and
      C(before) (the counters the last probe remembered, with their time C(at); null where none).
  returned: always
  type: dict
  sample:
    hcas:
      - name: mlx5_0
        netdevs: [ib0]
        ports:
          - {port: 1, state: "4: ACTIVE", phys_state: "5: LinkUp", link_layer: InfiniBand, rate: 200 Gb/sec (4X HDR),
             link: {rate_gbps: 200.0, width: 4, speed: HDR}, errors: {symbol_error: 0, link_downed: 0}}
    ib_hca: "=mlx5_0:1"
    before: null
port_in_use:
  description: Whether O(check_port) is taken.
  returned: when O(check_port) is given
  type: bool
  sample: false
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import probe_run


def main() -> None:
    module = AnsibleModule(argument_spec=probe_run.argument_spec(), supports_check_mode=True)
    result = probe_run.run(module.params)
    if result.get("failed"):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
