# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a node has of the NVIDIA stack: GPUs on the PCI bus, the loaded and the installed driver."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable

from ansible_collections.gpufleet.cluster.plugins.module_utils._node import node_state, packages, sysfs
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import gpu_health

NVIDIA_VENDOR = "0x10de"
DISPLAY_CLASSES = ("0x0300", "0x0302")  # VGA and 3D controllers; NVSwitches (0x0680) are not GPUs
NVSWITCH_CLASS = "0x0680"  # "other bridge": how an NVSwitch shows on the PCI bus (Fabric Manager User Guide)
# The UEFI global variable SecureBoot (EFI_GLOBAL_VARIABLE GUID); its data byte is 1 when Secure Boot is on.
SECURE_BOOT_VAR = "SecureBoot-8be4df61-93ca-11d2-aa0d-e35c4b7b6a7e"


def _pci_nvidia(sys_root: str, classes: tuple[str, ...]) -> list[dict[str, str]]:
    """NVIDIA devices of these PCI classes (the class's first 6 characters), with address and device id."""
    base = os.path.join(sys_root, "bus", "pci", "devices")
    found = []
    for name in sysfs.entries(base):
        device = os.path.join(base, name)
        if sysfs.value(os.path.join(device, "vendor")) != NVIDIA_VENDOR:
            continue
        if sysfs.value(os.path.join(device, "class"))[:6] in classes:
            found.append({"address": name, "device": sysfs.value(os.path.join(device, "device"))})
    return found


def pci_gpus(sys_root: str = "/sys") -> list[dict[str, str]]:
    """NVIDIA GPUs on the PCI bus, whether or not a driver is loaded."""
    return _pci_nvidia(sys_root, DISPLAY_CLASSES)


def pci_nvswitches(sys_root: str = "/sys") -> list[dict[str, str]]:
    """NVIDIA NVSwitches on the PCI bus (HGX and DGX boards): Fabric Manager must run where there are any."""
    return _pci_nvidia(sys_root, (NVSWITCH_CLASS,))


# An NVLink5 system (HGX B200/B300, GB200/GB300 NVL): its fourth-generation NVSwitches are not on the host's PCI bus
# as NVIDIA bridges; they are managed through ConnectX (Mellanox, PCI vendor 0x15b3) devices whose VPD carries SW_MNG.
# NVIDIA's driver container detects them so through /sys/class/infiniband/*/device/vpd (NVIDIA/gpu-driver-container,
# ubuntu22.04/nvidia-driver, _assert_nvlink5_system); that path is the PCI device's own VPD, which the PCI bus shows
# whether or not mlx5_ib is loaded (a fresh node's InfiniBand class can still be empty at preflight).
NVLINK5_VPD_MARK = b"SW_MNG"
MELLANOX_VENDOR = "0x15b3"


def _switch_vpd(device_dir: str) -> bool:
    try:
        with open(os.path.join(device_dir, "vpd"), "rb") as handle:
            return NVLINK5_VPD_MARK in handle.read()
    except OSError:
        return False  # no VPD (a virtual function, a device without one), or not readable


def nvlink5_switch_devices(sys_root: str = "/sys") -> list[str]:
    """The NVLink5 switch management ports: the InfiniBand devices (/sys/class/infiniband/NAME) whose VPD marks them
    so, then the Mellanox PCI devices (their PCI address) whose VPD does and that no InfiniBand device stands for yet.
    Fabric Manager, the NVLink subnet manager and ib_umad are needed where there are any."""
    base = os.path.join(sys_root, "class", "infiniband")
    found, covered = [], set()
    for name in sysfs.entries(base):
        device = os.path.join(base, name, "device")
        if _switch_vpd(device):
            found.append(name)
            covered.add(os.path.basename(os.path.realpath(device)))
    pci = os.path.join(sys_root, "bus", "pci", "devices")
    for address in sysfs.entries(pci):
        device = os.path.join(pci, address)
        if address not in covered and sysfs.value(os.path.join(device, "vendor")) == MELLANOX_VENDOR \
                and _switch_vpd(device):
            found.append(address)
    return found


def container_evidence(root: str = "/") -> str | None:
    """What says this node is a container (its GPUs' driver then belongs to the host), or None: the marker files
    Docker and podman leave, or the `container` variable systemd-nspawn, podman and LXC give PID 1. A virtual
    machine booted from a container image keeps its /.dockerenv: the message names the evidence for that reason."""
    for marker in (".dockerenv", "run/.containerenv"):
        if os.path.exists(os.path.join(root, marker)):
            return "/%s exists" % marker
    try:
        with open(os.path.join(root, "proc", "1", "environ"), "rb") as handle:
            for entry in handle.read().split(b"\0"):
                if entry.startswith(b"container="):
                    return "PID 1 runs with %s" % entry.decode(errors="replace")
    except OSError:
        pass
    return None


# Packages that carry the driver's kernel module, from NVIDIA's repositories (nvidia-open-<branch>,
# cuda-drivers-<branch>, nvidia-kernel-[open-]dkms, kmod-nvidia-*, nvidia-kmod-common) and the distributions'
# own (Debian's nvidia-driver and nvidia-kernel-dkms, Ubuntu's nvidia-dkms-<branch> and linux-modules-nvidia-*).
KERNEL_MODULE_PACKAGE_PREFIXES = ("nvidia-open", "cuda-drivers", "nvidia-kernel", "nvidia-dkms", "nvidia-driver",
                                  "kmod-nvidia", "nvidia-kmod", "linux-modules-nvidia")
# NVIDIA's .run installer leaves its uninstaller here (driver README, "Installing the NVIDIA Driver"); packages don't.
RUNFILE_UNINSTALLER = "usr/bin/nvidia-uninstall"


def installed_packages(run: node_state.Run = node_state.run_argv) -> list[str] | None:
    """The names of the installed packages (dpkg's, else rpm's: packages.query_packages), or None where neither
    answers."""
    found = packages.query_packages(None, run)
    return None if found is None else list(found)


def driver_origin(driver: str | None, packages: list[str] | None, root: str = "/") -> str | None:
    """Where the node's driver (loaded or installed version, or None) came from: None without one, 'package'
    when a package carries its kernel module, 'runfile' for NVIDIA's .run installer, else 'unmanaged' (the
    machine's image or provider put it there)."""
    if not driver:
        return None
    if any(name.startswith(KERNEL_MODULE_PACKAGE_PREFIXES) and not name.startswith("nvidia-driver-pinning")
           for name in packages or ()):
        return "package"
    if os.path.exists(os.path.join(root, RUNFILE_UNINSTALLER)):
        return "runfile"
    return "unmanaged"


def secure_boot(sys_root: str = "/sys") -> bool | None:
    """True when UEFI Secure Boot is on, False when off or the node boots without UEFI, None when unreadable."""
    if not os.path.isdir(os.path.join(sys_root, "firmware", "efi")):
        return False
    try:
        with open(os.path.join(sys_root, "firmware", "efi", "efivars", SECURE_BOOT_VAR), "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return False
    except OSError:
        return None
    # efivarfs: 4 bytes of attributes, then the variable's data (one byte).
    return len(data) >= 5 and data[4] == 1


def loaded_driver(sys_root: str = "/sys") -> str | None:
    """The version of the nvidia kernel module that is loaded, or None."""
    return sysfs.value(os.path.join(sys_root, "module", "nvidia", "version")) or None


def installed_driver(run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> str | None:
    """The version of the nvidia kernel module installed for the running kernel (modinfo), or None."""
    try:
        done = run(["modinfo", "-F", "version", "nvidia"], capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    version = done.stdout.strip()
    return version if done.returncode == 0 and version else None


def gpu_health_with_pci(kernel_log: str, sys_root: str = "/sys") -> dict:
    """The GPU health gate's read of the node (gpu_health.read) with ``pci_gpus``, the NVIDIA GPUs on its PCI bus
    (what nvidia-smi should answer for), ``fabric_switches``, the NVLink switches whose fabric the GPUs must join,
    and ``imex``, the IMEX service where the GPUs are a multi-node NVLink system's (imex_state): what node_probe and
    stack_facts return."""
    health = gpu_health.read(kernel_log)
    gpus = pci_gpus(sys_root)
    health["pci_gpus"] = len(gpus)
    health["imex"] = imex_state(gpus)
    # An NVLink fabric the GPUs must join: NVSwitches on the PCI bus, or NVLink5 switch management ports.
    health["fabric_switches"] = len(pci_nvswitches(sys_root)) + len(nvlink5_switch_devices(sys_root))
    return health


# The GPUs of multi-node NVLink systems (GB200 NVL, GB300 NVL), whose compute trays share GPU memory across the NVLink
# domain through NVIDIA's IMEX service: the PCI device IDs DCGM's multi-node diagnostic supports (NVIDIA/DCGM,
# modules/mndiag/DcgmMnDiagManager.cpp, m_supportedSkus at 72fa3fe: "2941" GB200 NVL, "31c2" GB300 NVL).
MULTI_NODE_NVLINK_DEVICES = ("0x2941", "0x31c2")
# What NVIDIA's IMEX package installs (IMEX guide, "Getting Started with IMEX": the daemon nvidia-imex, registered
# as the systemd service nvidia-imex, and nvidia-imex-ctl).
IMEX_SERVICE = "nvidia-imex"
IMEX_DAEMON = "/usr/bin/nvidia-imex"


def multi_node_nvlink(devices: list[str]) -> bool:
    """Whether any of these PCI device IDs ("0x2941") is a multi-node NVLink system's GPU."""
    return any(str(device).strip().lower() in MULTI_NODE_NVLINK_DEVICES for device in devices)


IMEX_CHANNELS = "/dev/nvidia-caps-imex-channels"


def imex_state(gpus: list[dict[str, str]], daemon: str | None = None,
               state: Callable[[str], str] | None = None, channels: str | None = None) -> dict | None:
    """IMEX on a node whose GPUs (pci_gpus) are a multi-node NVLink system's: {"installed": whether its daemon is,
    "state": `systemctl is-active nvidia-imex` (service_state), "not installed" without it, "channels": the IMEX
    channels (/dev/nvidia-caps-imex-channels/channelN) there are; the driver creates none by default, and CUDA's
    fabric-handle calls fail with a permission error without one (open-gpu-kernel-modules nv-reg.h)}; None
    elsewhere."""
    if not multi_node_nvlink([gpu.get("device", "") for gpu in gpus]):
        return None
    found = sorted(name for name in sysfs.entries(channels or IMEX_CHANNELS) if name.startswith("channel"))
    if not os.path.exists(daemon or IMEX_DAEMON):
        return {"installed": False, "state": "not installed", "channels": found}
    return {"installed": True, "state": (state or service_state)(IMEX_SERVICE), "channels": found}


def nvidia_smi_gpus(run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> dict:
    """GPUs as nvidia-smi sees them: count, models and the driver version; empty without a working driver.

    A view of gpu_health.query_gpus, the one reader of nvidia-smi's GPU list: a GPU is a row that answers for its
    index (a lost GPU is not counted). The launch's default nproc_per_node (launch, node_probe), verify.yml's stack
    table (stack_facts) and the health gate count the same GPUs."""
    return gpu_summary(gpu_health.query_gpus(run))


def gpu_summary(health: dict) -> dict:
    """Count, models and driver version of the GPUs a gpu_health read (query_gpus, read) found answering."""
    gpus = health.get("gpus") or []
    driver = next((gpu["driver"] for gpu in gpus if gpu.get("driver")), None)
    return {"count": len(gpus), "models": sorted({gpu["name"] for gpu in gpus if gpu.get("name")}), "driver": driver}


def cuda_version(cuda_home: str = "/usr/local/cuda",
                 run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> str | None:
    """The toolkit's version from `nvcc --version` (release X.Y)."""
    nvcc = os.path.join(cuda_home, "bin", "nvcc")
    try:
        done = run([nvcc, "--version"], capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in done.stdout.splitlines():
        if "release" in line:
            return line.split("release", 1)[1].split(",")[0].strip()
    return None


def package_versions(wanted: dict[str, tuple[str, ...]], run: node_state.Run = node_state.run_argv
                     ) -> dict[str, str | None]:
    """For each label, the installed version of the first of its names that is installed: every name read in one
    query (packages.query_packages)."""
    names = sorted({name for group in wanted.values() for name in group})
    found = packages.query_packages(names, run) or {}
    return {label: next((found[name]["version"] for name in group if name in found), None)
            for label, group in wanted.items()}


def package_version(names: tuple[str, ...], run: node_state.Run = node_state.run_argv) -> str | None:
    """The installed version of the first of names that is installed."""
    return package_versions({"": names}, run)[""]


def persistence_mode(run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> str | None:
    """Persistence mode as nvidia-smi reports it for the GPUs ("Enabled", "Disabled", or both joined), or None."""
    try:
        done = run(["nvidia-smi", "--query-gpu=persistence_mode", "--format=csv,noheader"], capture_output=True,
                   text=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    modes = sorted({line.strip() for line in done.stdout.splitlines() if line.strip()})
    return "/".join(modes) if done.returncode == 0 and modes else None


def service_state(name: str, run: node_state.Run = node_state.run_argv) -> str:
    """A unit's ActiveState ("active", "inactive", "failed", ...: node_state.read_services), or "no systemd" where
    systemd is not the init (a container) or systemctl is missing."""
    units = node_state.read_services([name], run) if os.path.isdir("/run/systemd/system") else None
    if units is None:
        return "no systemd"
    return units.get(name if "." in name else name + ".service", {}).get("ActiveState") or "unknown"


def module_loaded(name: str, sys_root: str = "/sys") -> bool:
    """Whether the kernel module (its /sys/module name, with underscores) is loaded."""
    return os.path.isdir(os.path.join(sys_root, "module", name.replace("-", "_")))


def ofed_release(run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> str | None:
    """MLNX_OFED's or DOCA-OFED's release (`ofed_info -s`, which both install: "MLNX_OFED_LINUX-24.10-1.1.4.0:",
    "OFED-internal-25.01-0.6.0:"), or None where neither is installed: the inbox RDMA stack of the distribution.
    The legacy nvidia-peermem module needs their ib_core's peer-memory API; with the inbox stack it fails to load
    (nv_mem_client_init: -EINVAL, NVIDIA/gpu-operator#2868), and GPUDirect RDMA goes through DMA-BUF."""
    try:
        done = run(["ofed_info", "-s"], capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = done.stdout.strip().rstrip(":") if done.returncode == 0 else ""
    return found or None


def open_modules_loaded(sys_root: str = "/sys") -> bool | None:
    """Whether the loaded driver is NVIDIA's open kernel modules, None without a loaded driver. The kernel lists the
    taint flags a module brings in /sys/module/NAME/taint: P for a proprietary licence, which the open modules
    (dual MIT/GPL) do not carry."""
    taint = sysfs.value(os.path.join(sys_root, "module", "nvidia", "taint"))
    if not taint and not os.path.isdir(os.path.join(sys_root, "module", "nvidia")):
        return None
    return "P" not in taint


# DMA-BUF, the path NVIDIA recommends for GPUDirect RDMA (GPU Operator documentation, "GPUDirect RDMA and GPUDirect
# Storage"), needs the open kernel modules and a kernel with RDMA DMA-BUF support, Linux 5.12 or later; NCCL uses it
# by default where it is supported.
DMABUF_MIN_KERNEL = (5, 12)


def gpudirect_rdma(has_hca: bool, peermem_loaded: bool, open_modules: bool | None, kernel: str) -> str:
    """Through which path GPUDirect RDMA works on this node: 'peermem', 'DMA-BUF', or why none does."""
    if not has_hca:
        return "no HCA"
    if peermem_loaded:
        return "peermem"
    if open_modules is None:
        return "no driver loaded"
    numbers = [int(part) for part in re.findall(r"\d+", kernel)[:2]]
    if not open_modules:
        return "none (DMA-BUF needs the open modules; nvidia-peermem is not loaded)"
    if tuple(numbers) < DMABUF_MIN_KERNEL:
        return "none (DMA-BUF needs Linux 5.12 or later; nvidia-peermem is not loaded)"
    return "DMA-BUF"
