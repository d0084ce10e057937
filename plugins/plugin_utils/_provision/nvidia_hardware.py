# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a node's NVIDIA hardware asks of the roles, decided from its PCI device IDs.

- the compute capability of each GPU (for nvcc's -gencode list, and the open kernel modules' Turing floor);
- whether Fabric Manager needs the NVLink subnet manager too (an NVLink5 system, or Blackwell data-center GPUs);
- the -gencode flags that build native code for the GPUs found, within what the toolkit can build.

Device IDs are read by gpufleet.cluster.nvidia_facts from sysfs; nothing here touches a node.
"""

from __future__ import annotations

from collections.abc import Iterable

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._provision.nvidia import StackError, cuda_major_minor

# Compute capability by PCI device ID. NVIDIA gives each product's device ID in the driver README, Appendix A
# "Supported NVIDIA GPU Products", and each product's compute capability at developer.nvidia.com/cuda-gpus;
# a chip's products take device IDs from one block, so the blocks below map an ID to its chip's capability.
# IDs outside every block are unknown: no rule is applied to them.
COMPUTE_CAPABILITY_BY_DEVICE_ID: tuple[tuple[int, int, tuple[int, int], str], ...] = (
    (0x15F0, 0x15FF, (6, 0), "Pascal GP100 (Tesla P100)"),
    (0x1B00, 0x1D7F, (6, 1), "Pascal GP102-GP108 (Tesla P40, P4)"),
    (0x1D80, 0x1DFF, (7, 0), "Volta GV100 (Tesla V100, TITAN V)"),
    (0x1E00, 0x1FFF, (7, 5), "Turing TU102-TU117 (Tesla T4)"),
    (0x20B0, 0x20FF, (8, 0), "Ampere GA100 (A100, A30)"),
    (0x2180, 0x21FF, (7, 5), "Turing TU116"),
    (0x2200, 0x22FF, (8, 6), "Ampere GA102 (A10, A40)"),
    (0x2300, 0x23FF, (9, 0), "Hopper GH100 (H100, H200, GH200)"),
    (0x2400, 0x25FF, (8, 6), "Ampere GA103-GA107 (A16, A2)"),
    (0x2600, 0x28FF, (8, 9), "Ada AD102-AD107 (L4, L40, L40S)"),
    (0x2900, 0x29FF, (10, 0), "Blackwell GB100 (B200, GB200)"),
    (0x2B00, 0x2FFF, (12, 0), "Blackwell GB202-GB207 (RTX PRO 6000 Blackwell)"),
    # B300 is 10de:3182 and GB300 10de:31c2 (driver README, Appendix A); compute capability 10.3 (sm_103, added in
    # CUDA 12.9).
    (0x3180, 0x31FF, (10, 3), "Blackwell Ultra (B300, GB300)"),
)
# The open kernel modules support Turing and later GPUs only (NVIDIA driver README, chapter "Open Linux Kernel
# Modules"): compute capability 7.5 and up. Every GPU chip before Turing has a device ID below Turing's block.
OPEN_MODULES_MIN_CAPABILITY = (7, 5)
FIRST_TURING_DEVICE_ID = 0x1E00
# Blackwell data-center systems (NVLink5, 4th-generation NVSwitch) need the NVLink subnet manager (nvlsm) and ib_umad
# before Fabric Manager starts (NVIDIA Fabric Manager User Guide, "NVLink Subnet Manager"; gpu-driver-container's
# nvidia-driver starts Fabric Manager with nvlsm on an NVLink5 system).
NVLSM_MIN_CAPABILITY = (10, 0)
NVLSM_MAX_CAPABILITY = (10, 9)
# The compute capabilities each CUDA release can build native code for: CUDA 13.0 dropped Maxwell, Pascal and
# Volta (CUDA 13.0 release notes, "Deprecated and Dropped Features"); 12.8 added Blackwell (CUDA 12.8 notes).
# nccl-tests' src/common.mk (v2.19.6) builds the same defaults per toolkit.
TOOLKIT_CAPABILITIES: tuple[tuple[tuple[int, int], tuple[int, int], tuple[int, int]], ...] = (
    # (first CUDA version, lowest capability, highest capability)
    ((13, 0), (7, 5), (12, 1)),
    ((12, 9), (5, 0), (12, 1)),
    ((12, 8), (5, 0), (12, 0)),
    ((12, 0), (5, 0), (9, 0)),
)
# Capabilities inside a release's range that arrived later than the range's first release: CUDA 12.9 "adds compiler
# target support for SM architecture 10.3 (sm_103 ...) and 12.1 (sm_121)" (CUDA Features Archive 12.9.1, "CUDA 12.9
# Features"), so CUDA 12.8, whose range reaches 12.0, builds nothing for a B300 (10.3).
CAPABILITY_FIRST_TOOLKIT: dict[tuple[int, int], tuple[int, int]] = {(10, 3): (12, 9), (12, 1): (12, 9)}
# Built when no GPU's capability is known (a build host, or IDs outside the table): nccl-tests' own defaults.
DEFAULT_CAPABILITIES: tuple[tuple[tuple[int, int], tuple[tuple[int, int], ...]], ...] = (
    ((13, 0), ((7, 5), (8, 0), (9, 0), (10, 0), (12, 0))),
    ((12, 8), ((6, 0), (6, 1), (7, 0), (8, 0), (9, 0), (10, 0), (12, 0))),
    ((12, 0), ((6, 0), (6, 1), (7, 0), (8, 0), (9, 0))),
)


def device_id(value: object) -> int:
    """A PCI device ID from sysfs ("0x2330") or a number."""
    try:
        return value if isinstance(value, int) and not isinstance(value, bool) else int(str(value), 16)
    except ValueError as exc:
        raise StackError("%r is not a PCI device ID" % (value,)) from exc


def gpu_model(device: object) -> dict:
    """{'device': '0x2330', 'capability': (9, 0) or None, 'chip': '...' or 'unknown'}."""
    number = device_id(device)
    for first, last, capability, chip in COMPUTE_CAPABILITY_BY_DEVICE_ID:
        if first <= number <= last:
            return {"device": "0x%04x" % number, "capability": capability, "chip": chip}
    return {"device": "0x%04x" % number, "capability": None, "chip": "unknown"}


def open_modules_refusal(host: str, devices: Iterable[object], flavor: str) -> str | None:
    """Why nvidia_driver_flavor=open cannot drive this node's GPUs (a GPU older than Turing), or None."""
    if flavor != "open":
        return None
    for device in devices:
        model = gpu_model(device)
        older = (model["capability"] < OPEN_MODULES_MIN_CAPABILITY if model["capability"]
                 else device_id(device) < FIRST_TURING_DEVICE_ID)
        if older:
            return ("%s: nvidia_driver_flavor=open needs Turing or newer GPUs, but the GPU %s (%s) is older; set "
                    "nvidia_driver_flavor: proprietary for this node" % (host, model["device"], model["chip"]))
    return None


# 580 is the last driver branch for Maxwell, Pascal and Volta GPUs (NVIDIA's Unix driver deprecation schedule,
# "Support timeframes for Unix legacy GPU releases"): every chip before Turing's block.
LAST_BRANCH_BEFORE_TURING = 580
# Blackwell and Grace Hopper are supported by the open kernel modules only (NVIDIA driver README, "Open Linux Kernel
# Modules": "Blackwell and later GPUs and Grace Hopper require the open kernel modules"). GH200's device ID is 0x2342
# (NVIDIA/open-gpu-kernel-modules README, "Compatible GPUs": GH200 120GB and 480GB); it sits in Hopper's block.
OPEN_ONLY_FROM_CAPABILITY = (10, 0)
GRACE_HOPPER_DEVICE_IDS = (0x2342,)


def branch_flavor_refusal(host: str, devices: Iterable[object], branch: object, flavor: str) -> str | None:
    """Why the driver branch or flavor cannot drive one of this node's GPUs, naming host, GPU and variable: a branch
    above 580 on a GPU older than Turing; the proprietary modules on Blackwell or Grace Hopper. None when it can."""
    try:
        number = int(str(branch))
    except ValueError:
        return None  # the branch's own check names a branch that is not one
    for device in devices:
        model = gpu_model(device)
        older = (model["capability"] < OPEN_MODULES_MIN_CAPABILITY if model["capability"]
                 else device_id(device) < FIRST_TURING_DEVICE_ID)
        if older and number > LAST_BRANCH_BEFORE_TURING:
            return ("%s: nvidia_driver_branch=%d does not support the GPU %s (%s): %d is the last driver branch for "
                    "Maxwell, Pascal and Volta GPUs; set nvidia_driver_branch: %d for this node"
                    % (host, number, model["device"], model["chip"], LAST_BRANCH_BEFORE_TURING,
                       LAST_BRANCH_BEFORE_TURING))
        open_only = ((model["capability"] is not None and model["capability"] >= OPEN_ONLY_FROM_CAPABILITY)
                     or device_id(device) in GRACE_HOPPER_DEVICE_IDS)
        if open_only and flavor == "proprietary":
            chip = "Grace Hopper GH200" if device_id(device) in GRACE_HOPPER_DEVICE_IDS else model["chip"]
            return ("%s: nvidia_driver_flavor=proprietary cannot drive the GPU %s (%s): Blackwell and Grace Hopper "
                    "GPUs need NVIDIA's open kernel modules; set nvidia_driver_flavor: open for this node"
                    % (host, model["device"], chip))
    return None


def needs_nvlsm(gpu_devices: Iterable[object], nvlink5_count: int) -> bool:
    """Whether Fabric Manager here needs the NVLink subnet manager: an NVLink5 system (its switch management ports
    found, nvidia_node.nvlink5_switch_devices), or Blackwell data-center GPUs where Fabric Manager is installed
    (nvidia_fabricmanager_enabled=true on a node whose switch ports were not found still needs it)."""
    if nvlink5_count > 0:
        return True
    capabilities = [gpu_model(device)["capability"] for device in gpu_devices]
    return any(c is not None and NVLSM_MIN_CAPABILITY <= c <= NVLSM_MAX_CAPABILITY for c in capabilities)


def _for_toolkit(table: tuple, cuda: tuple[int, int]):
    for first, *rest in table:
        if cuda >= first:
            return rest
    raise StackError("cuda_toolkit_version: CUDA %d.%d is older than 12.0, which gpufleet builds for" % cuda)


def nvcc_gencode(cuda: object, gpu_devices: Iterable[object], host: str = "this node") -> str:
    """NVCC_GENCODE for nccl-tests: native code for each GPU generation found (and PTX for the newest), else the
    toolkit's defaults. A GPU the toolkit cannot build for is an error naming it."""
    version = cuda_major_minor(cuda)
    lowest, highest = _for_toolkit(TOOLKIT_CAPABILITIES, version)
    found = sorted({m["capability"] for m in map(gpu_model, gpu_devices) if m["capability"]})
    for capability in found:
        first = CAPABILITY_FIRST_TOOLKIT.get(capability, (0, 0))
        if version < first:
            raise StackError(
                "%s: CUDA %d.%d builds no code for compute capability %d.%d (the node's GPUs), which CUDA %d.%d added; "
                "set cuda_toolkit_version to %d.%d or later" % ((host,) + version + capability + first + first))
        if not lowest <= capability <= highest:
            raise StackError(
                "%s: CUDA %d.%d builds no code for compute capability %d.%d (the node's GPUs); set "
                "cuda_toolkit_version to a release that does (CUDA 12.x for Pascal and Volta)"
                % ((host,) + version + capability))
    wanted = found or list(_for_toolkit(DEFAULT_CAPABILITIES, version)[0])
    flags = ["-gencode=arch=compute_%d%d,code=sm_%d%d" % (c + c) for c in wanted]
    newest = wanted[-1]
    flags.append("-gencode=arch=compute_%d%d,code=compute_%d%d" % (newest + newest))
    return " ".join(flags)
