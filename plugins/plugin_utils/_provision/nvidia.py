# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Version rules of the NVIDIA stack: numeric comparison, driver/CUDA compatibility, NCCL builds, reboots.

Versions are compared as tuples of integers ("10" > "8", "12.10" > "12.9"), never as strings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_NUMBER_RE = re.compile(r"\d+")
NCCL_VERSION_RE = re.compile(r"^(?P<nccl>\d+\.\d+\.\d+)-(?P<release>\d+)\+cuda(?P<cuda>\d+\.\d+)$")


class StackError(ValueError):
    """A version input is wrong or the versions do not fit together; the message names the variable."""


def version_tuple(version: Any) -> tuple[int, ...]:
    """'570.124.06' -> (570, 124, 6); '12.8' -> (12, 8). Anything but digits and dots before a '-' or '+' ends it."""
    text = str(version).strip()
    head = re.split(r"[-+~ ]", text, maxsplit=1)[0]
    if not head or not re.fullmatch(r"\d+(\.\d+)*", head):
        raise StackError("%r is not a version number" % (version,))
    return tuple(int(part) for part in head.split("."))


def version_compare(left: Any, right: Any) -> int:
    """-1, 0 or 1, comparing numerically and padding the shorter with zeros."""
    a, b = version_tuple(left), version_tuple(right)
    width = max(len(a), len(b))
    a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return (a > b) - (a < b)


def driver_branch(value: Any, variable: str = "nvidia_driver_branch") -> int:
    """The driver branch as a number (570); refuse anything that is not a whole number."""
    if isinstance(value, bool) or not re.fullmatch(r"\d{3}", str(value).strip()):
        raise StackError("%s: %r is not a driver branch; give its number, e.g. 570" % (variable, value))
    return int(str(value).strip())


def cuda_major_minor(value: Any, variable: str = "cuda_toolkit_version") -> tuple[int, int]:
    text = str(value).strip()
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", text):
        raise StackError("%s: %r is not a CUDA version such as 12.8" % (variable, value))
    major, minor = version_tuple(text)[:2]
    return major, minor


# Minor version compatibility: every CUDA 12.x runs on a driver of 525 or later, every 13.x on 580 or later (CUDA
# Compatibility guide, "Minor Version Compatibility", and the CUDA Toolkit Release Notes' table of minimum drivers
# for it), without the features that need the newer driver (PTX JIT of code from the newer toolkit among them).
MINOR_VERSION_COMPATIBILITY = {12: 525, 13: 580}


def _lowest_branch(key: str, table: Mapping[str, Any]) -> int:
    """The lowest driver branch that runs CUDA key: its toolkit driver, or its major's minor version compatibility."""
    own = int(table[key])
    compatible = MINOR_VERSION_COMPATIBILITY.get(version_tuple(key)[0])
    return min(own, compatible) if compatible is not None else own


def check_cuda_driver(cuda: Any, branch: Any, table: Mapping[str, Any]) -> dict[str, Any]:
    """Refuse a CUDA version the driver branch cannot run, from table {'12.8': 570, ...} (the toolkit's own driver)
    and minor version compatibility (MINOR_VERSION_COMPATIBILITY): 13.2 runs on the 580 long-term branch. The
    answer's ``compatibility`` says when only minor version compatibility lets it run."""
    major, minor = cuda_major_minor(cuda)
    number = driver_branch(branch)
    key = "%d.%d" % (major, minor)
    if key not in table:
        raise StackError(
            "cuda_toolkit_version: %s is not in the compatibility table (%s); add it to "
            "cuda_toolkit_driver_minimum with the driver branch it needs" % (key, ", ".join(sorted(table, key=version_tuple))))
    needed = driver_branch(table[key], "cuda_toolkit_driver_minimum[%s]" % key)
    if number < needed and _lowest_branch(key, table) <= number:
        return {"cuda": key, "driver_branch": number, "needs": needed, "compatibility": True}
    if number < needed:
        needed = _lowest_branch(key, table)
        newest = max((k for k in table if _lowest_branch(k, table) <= number), key=version_tuple, default=None)
        raise StackError(
            "cuda_toolkit_version: CUDA %s needs driver branch %d or newer, but nvidia_driver_branch is %d%s"
            % (key, needed, number, "; the newest CUDA it runs is %s" % newest if newest else ""))
    return {"cuda": key, "driver_branch": number, "needs": needed, "compatibility": False}


def check_nccl_for_cuda(nccl_version: Any, cuda: Any, branch: Any = None) -> dict[str, Any]:
    """The NCCL package version must be a build for the toolkit's CUDA major (2.30.4-1+cuda12.9 for CUDA 12.8).

    NVIDIA builds each NCCL release for a few CUDA minors only (2.29.3 for 12.9 and 13.1, 2.30.4 for 12.9 and 13.2,
    as the packages of its CUDA repository are versioned), so requiring the toolkit's exact minor could leave no
    NCCL at all. libnccl carries its own CUDA runtime, so a build for another minor of the same major runs where the
    driver runs that minor: on the branch of MINOR_VERSION_COMPATIBILITY for its major (12.x on 525, 13.x on 580).
    Another major is refused, and, with ``branch``, a build the driver branch cannot run."""
    match = NCCL_VERSION_RE.match(str(nccl_version).strip())
    if not match:
        raise StackError("nccl_version: %r is not a package version such as 2.30.4-1+cuda12.9" % (nccl_version,))
    major, minor = cuda_major_minor(cuda)
    built = match.group("cuda")
    built_major, built_minor = version_tuple(built)[:2]
    if built_major != major:
        raise StackError("nccl_version: %s is built for CUDA %s, but cuda_toolkit_version is %d.%d (another CUDA major)"
                         % (nccl_version, built, major, minor))
    compatible = MINOR_VERSION_COMPATIBILITY.get(built_major)
    if built_minor != minor and compatible is None:
        raise StackError("nccl_version: %s is built for CUDA %s; pin the build for cuda_toolkit_version %d.%d"
                         % (nccl_version, built, major, minor))
    if built_minor != minor and branch not in (None, "") and driver_branch(branch) < compatible:
        raise StackError("nccl_version: %s is built for CUDA %s, which driver branch %s cannot run (CUDA %d.x "
                         "other than the toolkit's %d.%d needs %d or newer); pin the build for CUDA %d.%d"
                         % (nccl_version, built, branch, built_major, major, minor, compatible, major, minor))
    return {"nccl": match.group("nccl"), "cuda": built, "minor_differs": built_minor != minor}


def reboot_decision(installed: str | None, loaded: str | None, gpu_present: bool, reboot_allowed: bool) -> dict:
    """Whether a node must reboot to load its installed driver: only when both are known and differ."""
    if not gpu_present:
        return {"reboot": False, "reason": "no NVIDIA GPU on this node"}
    if not installed:
        return {"reboot": False, "reason": "no NVIDIA driver installed"}
    if loaded and version_compare(installed, loaded) == 0:
        return {"reboot": False, "reason": "the loaded driver %s is the installed one" % loaded}
    reason = ("the loaded driver %s differs from the installed %s" % (loaded, installed) if loaded
              else "no NVIDIA kernel module is loaded; the installed driver is %s" % installed)
    if not reboot_allowed:
        return {"reboot": False, "needed": True, "reason": reason + " (reboots are not allowed: reboot by hand)"}
    return {"reboot": True, "needed": True, "reason": reason}
