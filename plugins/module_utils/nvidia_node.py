# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a node has of the NVIDIA stack: GPUs on the PCI bus, the loaded and the installed driver."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

NVIDIA_VENDOR = "0x10de"
DISPLAY_CLASSES = ("0x0300", "0x0302")  # VGA and 3D controllers; NVSwitches (0x0680) are not GPUs


def _read(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def pci_gpus(sys_root: str = "/sys") -> list[dict[str, str]]:
    """NVIDIA GPUs on the PCI bus, whether or not a driver is loaded."""
    base = os.path.join(sys_root, "bus", "pci", "devices")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    found = []
    for name in names:
        device = os.path.join(base, name)
        if _read(os.path.join(device, "vendor")) != NVIDIA_VENDOR:
            continue
        if _read(os.path.join(device, "class"))[:6] in DISPLAY_CLASSES:
            found.append({"address": name, "device": _read(os.path.join(device, "device"))})
    return found


def loaded_driver(sys_root: str = "/sys") -> str | None:
    """The version of the nvidia kernel module that is loaded, or None."""
    return _read(os.path.join(sys_root, "module", "nvidia", "version")) or None


def installed_driver(run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> str | None:
    """The version of the nvidia kernel module installed for the running kernel (modinfo), or None."""
    try:
        done = run(["modinfo", "-F", "version", "nvidia"], capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    version = done.stdout.strip()
    return version if done.returncode == 0 and version else None
