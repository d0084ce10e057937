# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters for the NVIDIA roles' preflight: each returns the problem as a sentence, or '' when there is none."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.module_utils._node import nvidia_node
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._provision import (
    dcgm,
    driver_read,
    imex,
    nvidia,
    nvidia_hardware,
    nvidia_packaging,
)

DOCUMENTATION = r"""
name: nvidia
short_description: Version checks of the NVIDIA stack
version_added: 0.1.0
description:
  - C(driver_branch_error), C(cuda_driver_error), C(nccl_cuda_error) return why the inputs do not fit together
    (naming the variable), or an empty string; C(reboot_decision) says whether a node must reboot to load its driver.
  - C(open_modules_error(devices, flavor, host)) says why the open kernel modules cannot drive a node's GPUs (PCI
    device IDs older than Turing), or an empty string; C(branch_flavor_error(devices, branch, flavor, host)) why the
    branch or flavor cannot drive them (a branch above 580 before Turing; the proprietary modules on Blackwell or
    Grace Hopper).
  - C(cuda | nvcc_gencode(devices, host)) is the C(NVCC_GENCODE) for the GPUs found within what that CUDA builds (the
    toolkit's defaults without known GPUs); it fails naming the host when the toolkit cannot build for a GPU.
  - C(devices | needs_nvlsm(nvlink5_count)) says whether Fabric Manager there also needs the NVLink subnet manager
    (an NVLink5 system, or Blackwell data-center GPUs).
  - C(devices | needs_imex) says whether a node's GPUs (PCI device IDs) are a multi-node NVLink system's (GB200 NVL
    0x2941, GB300 NVL 0x31c2), whose trays need NVIDIA IMEX; C(branch | imex_packages) names IMEX's package for a
    driver branch (none before 550); C(listed | imex_error(host, branch, inventory, domains, play_hosts)) says why a
    node's C(nvidia_imex_nodes) cannot make its IMEX domain (hosts outside the inventory, the node left out, lists
    that differ between the domain's nodes), or an empty string.
  - C(listing | versionlock_missing(names)) and C(listing | versionlock_stale(versions)) (a dict of package name to version) read
    C(dnf versionlock list) by exact package name; C(arch | el_openmpi_paths) is where EL's Open MPI lives;
    C(repolist | enabled_repo_ids) the repository ids of C(dnf repolist --enabled -q);
    C(grep_output | grep_files | apt_sources_for(url, own_file)) finds other apt sources of NVIDIA's repository;
    C(names | kernel_packages_missing(installed, kernel)) names those of the kernel's packages (kernel-devel) not
    installed at the running kernel's version;
    C(dpkg_listing | branch_packages(branch)) lists the installed packages of a driver branch, and
    C(dpkg_listing | other_branch_packages(branch)) those of the other branches installed (Fabric Manager's too).
  - C(version | upstream_version) is a package version without epoch and revision (C(1:560.35.03-0ubuntu1) is
    C(560.35.03)); C(branch | fabricmanager_packages(kind)) names Fabric Manager's and libnvidia-nscq's packages
    for a driver branch and C(apt) or C(dnf); C(branch | driver_version_packages) names the driver packages whose
    installed version is the driver's (the branch's metapackages, then the unversioned ones);
    C(names | at_upstream_version(version, kind)) makes package specifications at an upstream version, whatever
    the revision.
  - C(apt_cache_policy | podman_cdi_problem(host)) says why the node's Podman (installed, else apt's candidate) cannot
    give containers GPUs through CDI (older than 4.1), or an empty string.
  - C(dkms_status | dkms_versions(kernel)) lists the versions of the nvidia DKMS module built for a kernel (dkms 2's
    and 3's C(dkms status) lines).
  - C(display_output | alternative_state) reads C(update-alternatives --display NAME) (Debian's and EL's) into
    C(value) (where the link points) and C(manual); C(record | alternative_set_by_hand) says whether the
    alternatives system's own record of a link (C(/var/lib/dpkg/alternatives/NAME), null where missing) is set by
    hand.
  - DCGM (the dcgm role, plugin_utils/_provision/dcgm.py) C(version | dcgm_preflight_error(cuda_major, branch)) says why
    C(dcgm_version) or C(dcgm_cuda_major) cannot be installed, or an empty string;
    C(wanted | dcgm_cuda_major(branch, node_driver, devices)) is the CUDA major whose DCGM build a node gets (when
    empty, that of the node's own driver version where given, else of the branch, so 13 on 580 and 12 on 525 to 575;
    12 where a GPU among the PCI device IDs is older than Turing, which CUDA 13 does not build for);
    C(major | dcgm_package_names(proprietary)) and C(major | dcgm_packages(version, kind, proprietary)) name DCGM's
    core and CUDA packages, with C(proprietary) (true by default) its proprietary modules' two packages, and their
    specifications at a version (apt with NVIDIA's epoch 1, any revision);
    C(dcgm_exporter_version | dcgm_exporter_package(dcgm_version, kind)) is the DCGM exporter's package at its
    version (empty for the release built against C(dcgm_version)); C(dcgm_preflight_error) takes that version as a
    third argument where the exporter is installed.
  - C(driver_facts | driver_read(sys_root, packages=[], moved=false)) says whether the driver role's read of the node
    (C(__nvidia_driver_facts), or none) stands for a role's own read of C(sys_root) and of the installed version of
    C(packages), that is whether it read the same sysfs and the same packages and, where a version is asked, the
    driver was not installed since (C(moved)) (plugin_utils/_provision/driver_read.py).
  - Versions are compared numerically.
options:
  _input:
    description: The first value checked.
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Refuse a CUDA version the driver cannot run
  ansible.builtin.assert:
    that: (cuda_toolkit_version | gpufleet.cluster.cuda_driver_error(nvidia_driver_branch, table)) == ''
"""

RETURN = r"""
_value:
  description: The problem, or an empty string.
  type: raw
"""


def _error(check, *args: Any) -> str:
    try:
        check(*args)
    except nvidia.StackError as exc:
        return str(exc)
    return ""


def driver_branch_error(branch: Any) -> str:
    return _error(nvidia.driver_branch, branch)


def cuda_driver_error(cuda: Any, branch: Any, table: Any) -> str:
    return _error(nvidia.check_cuda_driver, cuda, branch, dict(table))


def nccl_cuda_error(nccl: Any, cuda: Any, branch: Any = None) -> str:
    return _error(nvidia.check_nccl_for_cuda, nccl, cuda, branch)


def open_modules_error(devices: Any, flavor: Any, host: Any) -> str:
    return nvidia_hardware.open_modules_refusal(str(host), list(devices or []), str(flavor)) or ""


def branch_flavor_error(devices: Any, branch: Any, flavor: Any, host: Any) -> str:
    return nvidia_hardware.branch_flavor_refusal(str(host), list(devices or []), branch, str(flavor)) or ""


def nvcc_gencode(cuda: Any, devices: Any, host: Any) -> str:
    try:
        return nvidia_hardware.nvcc_gencode(cuda, list(devices or []), str(host))
    except nvidia.StackError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def needs_nvlsm(devices: Any, nvlink5_count: Any) -> bool:
    return nvidia_hardware.needs_nvlsm(list(devices or []), int(nvlink5_count or 0))


def needs_imex(devices: Any) -> bool:
    return nvidia_node.multi_node_nvlink([str(device) for device in devices or []])


def imex_error(listed: Any, host: Any, branch: Any, inventory: Any, domains: Any, play_hosts: Any) -> str:
    return imex.refusal(str(host), branch, listed, list(inventory or []), dict(domains or {}), list(play_hosts or []))


def dcgm_cuda_major(wanted: Any, branch: Any, node_driver: Any = None, devices: Any = ()) -> int:
    try:
        return dcgm.node_cuda_major(wanted, branch, node_driver, devices)
    except nvidia.StackError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def dcgm_packages(major: Any, version: Any, kind: Any, proprietary: Any = True) -> list[str]:
    try:
        return dcgm.package_specs(major, version, str(kind), proprietary)
    except nvidia.StackError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def dcgm_exporter_package(wanted: Any, dcgm_version: Any, kind: Any) -> str:
    try:
        return dcgm.exporter_spec(wanted, dcgm_version, str(kind))
    except nvidia.StackError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def driver_read_covers(read: Any, sys_root: Any, packages: Any = (), moved: Any = False) -> bool:
    return driver_read.covers(read, sys_root, list(packages or ()), bool(moved))


def reboot_decision(facts: Any, allowed: Any) -> dict:
    return nvidia.reboot_decision(facts.get("installed_driver"), facts.get("loaded_driver"),
                                  bool(facts.get("gpu_present")), bool(allowed))


class FilterModule:
    """gpufleet.cluster NVIDIA filters."""

    def filters(self) -> dict:
        return {"driver_branch_error": driver_branch_error, "cuda_driver_error": cuda_driver_error,
                "nccl_cuda_error": nccl_cuda_error, "reboot_decision": reboot_decision,
                "driver_read": driver_read_covers,
                "open_modules_error": open_modules_error, "branch_flavor_error": branch_flavor_error,
                "nvcc_gencode": nvcc_gencode, "needs_nvlsm": needs_nvlsm, "needs_imex": needs_imex,
                "imex_error": imex_error, "imex_packages": nvidia_packaging.imex_packages,
                "versionlock_missing": nvidia_packaging.versionlock_missing,
                "versionlock_stale": nvidia_packaging.versionlock_stale,
                "el_openmpi_paths": nvidia_packaging.el_openmpi_paths,
                "enabled_repo_ids": nvidia_packaging.enabled_repo_ids,
                "grep_files": nvidia_packaging.grep_files,
                "branch_packages": nvidia_packaging.branch_packages,
                "other_branch_packages": nvidia_packaging.other_branch_packages,
                "apt_sources_for": nvidia_packaging.apt_sources_for,
                "upstream_version": nvidia_packaging.upstream_version,
                "fabricmanager_packages": nvidia_packaging.fabricmanager_packages,
                "driver_version_packages": nvidia_packaging.driver_version_packages,
                "at_upstream_version": nvidia_packaging.at_upstream_version,
                "podman_cdi_problem": nvidia_packaging.podman_cdi_problem,
                "alternative_state": nvidia_packaging.alternative_state,
                "alternative_set_by_hand": nvidia_packaging.alternative_set_by_hand,
                "dkms_versions": nvidia_packaging.dkms_versions,
                "kernel_packages_missing": nvidia_packaging.kernel_packages_missing,
                "dcgm_preflight_error": dcgm.preflight_error, "dcgm_cuda_major": dcgm_cuda_major,
                "dcgm_package_names": dcgm.package_names, "dcgm_packages": dcgm_packages,
                "dcgm_exporter_package": dcgm_exporter_package}
