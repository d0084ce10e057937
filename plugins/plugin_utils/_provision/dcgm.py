# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The dcgm role's decisions: which DCGM 4 packages a node gets, at which version, and for which CUDA major.

NVIDIA's DCGM installation page (docs.nvidia.com/datacenter/dcgm/latest/installation.html) installs
``datacenter-gpu-manager-4-cuda<major>``, where <major> is the CUDA version the driver reports (nvidia-smi's
"CUDA Version"), and runs it as the ``nvidia-dcgm`` service. The packages come from NVIDIA's CUDA repository, where
apt versions carry the epoch 1 (``datacenter-gpu-manager-4-core=1:4.4.0-1``, as NVIDIA's own Triton and go-dcgm
Dockerfiles pin them) and EL versions do not (``datacenter-gpu-manager-4-cuda12-4.5.2-1``).
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._provision import nvidia_hardware
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._provision.nvidia import StackError, driver_branch

# The CUDA major each driver branch reports, from the minimum driver of each major's first release (CUDA Toolkit
# Release Notes, table "CUDA Toolkit and Corresponding Driver Versions": 11.0 needs 450, 12.0 525, 13.0 580).
DRIVER_CUDA_MAJOR = ((580, 13), (525, 12), (450, 11))
# The CUDA majors DCGM 4 is built for (NVIDIA's repository: datacenter-gpu-manager-4-cuda11, -cuda12, -cuda13).
DCGM_CUDA_MAJORS = (11, 12, 13)
APT_EPOCH = "1"
SERVICE = "nvidia-dcgm"
_VERSION_RE = re.compile(r"^4\.\d+\.\d+$")


def driver_cuda_major(branch: Any) -> int:
    """The CUDA major a driver branch reports (580 -> 13, 570 -> 12)."""
    number = driver_branch(branch)
    for lowest, major in DRIVER_CUDA_MAJOR:
        if number >= lowest:
            return major
    raise StackError("nvidia_driver_branch: %d is older than any branch DCGM 4 supports (450 or newer)" % number)


def cuda_major(wanted: Any, branch: Any) -> int:
    """dcgm_cuda_major as given, or the driver branch's when empty; refused when DCGM 4 has no build for it."""
    if wanted in (None, ""):
        return driver_cuda_major(branch)
    text = str(wanted).strip()
    if isinstance(wanted, bool) or not text.isdigit() or int(text) not in DCGM_CUDA_MAJORS:
        raise StackError("dcgm_cuda_major: %r is not a CUDA major DCGM 4 is built for (%s), or empty for the "
                         "driver's" % (wanted, ", ".join(str(m) for m in DCGM_CUDA_MAJORS)))
    return int(text)


# CUDA 13 builds nothing for GPUs before Turing (compute capability 7.5; CUDA 13.0 release notes, "Deprecated and
# Dropped Features", the same floor nvidia_hardware.TOOLKIT_CAPABILITIES keeps): DCGM's cuda13 build cannot test them,
# so a node with such a GPU gets the cuda12 build whatever its driver reports.
CUDA13_MIN_CAPABILITY = (7, 5)


def node_cuda_major(wanted: Any, branch: Any, node_driver: Any = None, devices: Any = ()) -> int:
    """The CUDA major of the DCGM build a node gets: dcgm_cuda_major where given; else that of the driver the node
    runs (node_driver, its version such as 570.133.20, where the nvidia_driver role does not manage the node's
    driver; else the branch it installs), and 12 rather than 13 where one of the node's GPUs (PCI device IDs) is
    older than Turing."""
    if wanted not in (None, ""):
        return cuda_major(wanted, branch)
    text = str(node_driver or "").strip()
    major = driver_cuda_major(text.split(".", maxsplit=1)[0] if text else branch)
    capabilities = [nvidia_hardware.gpu_model(device)["capability"] for device in devices or ()]
    if major >= 13 and any(c is not None and c < CUDA13_MIN_CAPABILITY for c in capabilities):
        return 12
    return major


def check_version(version: Any) -> str:
    """dcgm_version must be a DCGM 4 upstream version such as 4.5.2 (no epoch, no revision)."""
    text = str(version or "").strip()
    if not _VERSION_RE.match(text):
        raise StackError("dcgm_version: %r is not a DCGM 4 version such as 4.5.2 (upstream version, without epoch "
                         "or package revision)" % (version,))
    return text


# DCGM 4's proprietary modules (among them the profiling module, libdcgmmoduleprofiling, behind the DCGM_FI_PROF_*
# metrics) come in datacenter-gpu-manager-4-proprietary and -proprietary-cuda<major>, which the CUDA build only
# recommends: apt's recommends and dnf's weak dependencies pull them at their newest version, neither pinned nor held,
# so they drift from the core. Azure's HPC images install the four at one version (Azure/azhpc-images,
# components/install_dcgm.sh at 048132d: -cuda<N>, -core, -proprietary and -proprietary-cuda<N>, each =<version>).
PROPRIETARY = ("datacenter-gpu-manager-4-proprietary", "datacenter-gpu-manager-4-proprietary-cuda%d")


def package_names(major: Any, proprietary: Any = True) -> list[str]:
    """The packages installed and held: DCGM's core, its build for the CUDA major, and (proprietary) its proprietary
    modules for that major."""
    number = int(major)
    names = ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda%d" % number]
    if str(proprietary).strip().lower() not in ("false", "no", "off", "0"):
        names += [PROPRIETARY[0], PROPRIETARY[1] % number]
    return names


def package_specs(major: Any, version: Any, kind: str, proprietary: Any = True) -> list[str]:
    """package_names at version: apt 'name=1:4.5.2-*' (NVIDIA's epoch, any revision), dnf 'name-4.5.2'."""
    upstream = check_version(version)
    if kind == "dnf":
        return ["%s-%s" % (name, upstream) for name in package_names(major, proprietary)]
    return ["%s=%s:%s-*" % (name, APT_EPOCH, upstream) for name in package_names(major, proprietary)]


# NVIDIA's DCGM exporter (NVIDIA/dcgm-exporter), the package datacenter-gpu-manager-exporter in the same repository,
# serving DCGM's fields for Prometheus on port 9400 as the nvidia-dcgm-exporter service (the unit its packaging
# ships: After=nvidia-dcgm.service). Each release is built against one DCGM release (its hack/VERSION: exporter 4.8.1
# against DCGM 4.5.2, 4.8.2 against 4.5.3), and its packages carry the exporter's own version
# (datacenter-gpu-manager-exporter_4.8.2-1_amd64.deb, datacenter-gpu-manager-exporter-4.5.0-1.x86_64.rpm; no epoch
# shows in those names, and none is added here).
EXPORTER = "datacenter-gpu-manager-exporter"
EXPORTER_SERVICE = "nvidia-dcgm-exporter"
EXPORTER_FOR_DCGM = {"4.5.2": "4.8.1", "4.5.3": "4.8.2"}
_EXPORTER_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")


def exporter_version(wanted: Any, dcgm_version: Any) -> str:
    """dcgm_exporter_version as given (x.y.z), or the release built against dcgm_version when empty."""
    text = str(wanted or "").strip()
    if not text:
        found = EXPORTER_FOR_DCGM.get(str(dcgm_version or "").strip())
        if not found:
            raise StackError("dcgm_exporter_version: no DCGM exporter release is known here to be built against DCGM %s "
                             "(known: %s); give the release built against it (NVIDIA/dcgm-exporter's releases name "
                             "both, as 4.5.2-4.8.1)" % (dcgm_version, ", ".join(
                                 "%s for %s" % (exporter, dcgm) for dcgm, exporter in sorted(EXPORTER_FOR_DCGM.items()))))
        return found
    if not _EXPORTER_VERSION_RE.match(text):
        raise StackError("dcgm_exporter_version: %r is not a DCGM exporter release such as 4.8.1 (its own version, "
                         "without DCGM's or a package revision)" % (wanted,))
    return text


def exporter_spec(wanted: Any, dcgm_version: Any, kind: str) -> str:
    """The exporter's package at its version: apt 'name=4.8.1-*' (any revision), dnf 'name-4.8.1'."""
    version = exporter_version(wanted, dcgm_version)
    return "%s-%s" % (EXPORTER, version) if kind == "dnf" else "%s=%s-*" % (EXPORTER, version)


def preflight_error(version: Any, wanted_major: Any, branch: Any, exporter: Any = None) -> str:
    """Why the dcgm role's inputs cannot be installed, naming the variable, or ''. exporter: dcgm_exporter_version,
    where the exporter is installed (None: it is not)."""
    try:
        check_version(version)
        cuda_major(wanted_major, branch)
        if exporter is not None:
            exporter_version(exporter, version)
    except StackError as exc:
        return str(exc)
    return ""
