# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Package-manager rules of the NVIDIA roles: dnf version locks by exact name (each entry read by node_state's
lock_entries and lock_name, the one reader of the lock list), EL's Open MPI paths, and apt
sources that already point at NVIDIA's repository (the cuda-keyring package's, or an old .list).

Pure functions over what the nodes print or hold; the roles call them through gpufleet.cluster filters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from ansible_collections.gpufleet.cluster.plugins.module_utils._node.packages import lock_entries, lock_name

# `dnf versionlock list` prints NAME-[EPOCH:]VERSION-RELEASE.* (NVIDIA driver installation guide, "Version locking").
_EPOCH_RE = re.compile(r"^\d+:")


def versionlock_missing(listing: str, names: Iterable[str]) -> list[str]:
    """The names that hold no lock yet, matched exactly ('libnccl' is not locked by 'libnccl-devel-...')."""
    locked = {lock_name(entry) for entry in lock_entries(listing)}
    return [name for name in names if name not in locked]


def versionlock_stale(listing: str, wanted: Mapping[str, str]) -> list[str]:
    """The lock entries of the wanted names at another version: removed before the wanted version is installed
    (a lock left from the previous version would keep dnf from moving to the new one)."""
    stale = []
    for entry in lock_entries(listing):
        name = lock_name(entry)
        if name not in wanted:
            continue
        version = entry[len(name) + 1:]
        version = _EPOCH_RE.sub("", version)
        if not version.startswith(str(wanted[name]) + ".") and version.rstrip(".*") != str(wanted[name]):
            stale.append(entry)
    return stale


def upstream_version(version: object) -> str:
    """The upstream part of a package version, without epoch and revision: '1:560.35.03-0ubuntu1' and
    '560.35.03-1' are both '560.35.03'. NVIDIA's apt repositories give the driver's packages Ubuntu-style revisions
    (560.35.03-0ubuntu1) and Fabric Manager's its own (560.35.03-1), so the two are matched on this part."""
    text = _EPOCH_RE.sub("", str(version or "").strip())
    return text.rsplit("-", 1)[0] if "-" in text else text


# Fabric Manager's packages and the NVSwitch configuration library, per branch and package manager, as NVIDIA's
# driver container installs them (NVIDIA/gpu-driver-container, ubuntu22.04/install.sh and rhel9/install.sh,
# commit 78fa4ac "add driver 580.65.06" and 9f15a32): from branch 580 unversioned names; before it, apt names carry
# the branch (nvidia-fabricmanager-570, libnvidia-nscq-570) and EL's are nvidia-fabric-manager and
# libnvidia-nscq-<branch>. Their revision is NVIDIA's "-1" in both.
FABRICMANAGER_UNVERSIONED_FROM = 580


def fabricmanager_packages(branch: object, kind: str) -> list[str]:
    """The names of Fabric Manager and libnvidia-nscq for a driver branch, for apt or dnf."""
    number = int(str(branch))
    if number >= FABRICMANAGER_UNVERSIONED_FROM:
        return ["nvidia-fabricmanager", "libnvidia-nscq"]
    if kind == "dnf":
        return ["nvidia-fabric-manager", "libnvidia-nscq-%d" % number]
    return ["nvidia-fabricmanager-%d" % number, "libnvidia-nscq-%d" % number]


# NVIDIA IMEX's package per driver branch, as NVIDIA's driver container installs it (NVIDIA/gpu-driver-container at
# 06a208c: ubuntu22.04/precompiled/nvidia-driver imex_install, "nvidia-imex" from 580, "nvidia-imex-<branch>" from 550,
# none before; rhel9/precompiled/Dockerfile: nvidia-imex-<version> from 580, nvidia-imex-<branch>-<version> from
# 570), at the driver's version and held (apt-mark hold; dnf versionlock add on EL).
IMEX_FIRST_BRANCH = 550


def imex_packages(branch: object) -> list[str]:
    """The name of NVIDIA IMEX's package for a driver branch (apt and dnf alike); none before branch 550."""
    number = int(str(branch))
    if number >= FABRICMANAGER_UNVERSIONED_FROM:
        return ["nvidia-imex"]
    return ["nvidia-imex-%d" % number] if number >= IMEX_FIRST_BRANCH else []


def driver_version_packages(branch: object) -> list[str]:
    """The driver packages whose installed version is the driver's, first found first: the branch's metapackage of
    either flavor (nvidia-open-580, cuda-drivers-580), then the unversioned ones (NVIDIA's driver installation
    guide's package names). nvidia_facts reads the first installed; Fabric Manager must be at its version."""
    return ["nvidia-open-%s" % branch, "cuda-drivers-%s" % branch, "nvidia-open", "cuda-drivers"]


def at_upstream_version(names: Iterable[str], version: object, kind: str) -> list[str]:
    """Package specifications of names at an upstream version, whatever their revision: apt 'name=560.35.03-*'
    (the apt module's version wildcard), dnf 'name-560.35.03'."""
    upstream = upstream_version(version)
    if kind == "dnf":
        return ["%s-%s" % (name, upstream) for name in names]
    return ["%s=%s-*" % (name, upstream) for name in names]


# The name prefixes of NVIDIA's driver packages (apt and EL): the kernel module, libraries and utilities of a branch.
DRIVER_PACKAGE_PREFIXES = ("nvidia-", "libnvidia-", "cuda-drivers", "libxnvctrl", "xserver-xorg-video-nvidia",
                           "kmod-nvidia")


def branch_packages(listing: str, branch: object) -> list[str]:
    """The installed packages of one driver branch, from `dpkg-query -W -f '${Package} ${Version}\\n'`: NVIDIA's
    version-locking page asks to lock every package of the branch (kernel module, utilities, compute libraries),
    not only the metapackage. A package belongs to the branch when its name carries -<branch> or its version starts
    with <branch>. and its name is one of NVIDIA's driver packages."""
    return _branch_members(listing, branch, with_fabricmanager=False)


def _branch_members(listing: str, branch: object, with_fabricmanager: bool) -> list[str]:
    number = str(branch)
    found = []
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, version = parts[0], parts[1]
        nvidia = name.startswith(DRIVER_PACKAGE_PREFIXES)
        in_branch = re.search(r"-%s($|-)" % re.escape(number), name) or version.split(":")[-1].startswith(number + ".")
        if nvidia and in_branch and (with_fabricmanager or not name.startswith("nvidia-fabricmanager")):
            found.append(name)
    return sorted(set(found))


# The packages that say which branch a node has: the driver metapackages and NVIDIA's pinning packages.
_BRANCH_MARKERS = ("nvidia-open", "cuda-drivers", "nvidia-driver-pinning-")


def installed_branches(listing: str) -> list[str]:
    """The driver branches installed, by the -<branch> in a metapackage's or pinning package's name, else by the
    version of an unversioned metapackage (nvidia-open 580.95.05-1 is branch 580)."""
    found = set()
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) < 2 or not parts[0].startswith(_BRANCH_MARKERS):
            continue
        named = re.search(r"-(\d{3})($|-)", parts[0])
        versioned = re.match(r"(\d{3})\.", parts[1].split(":")[-1])
        if named or versioned:
            found.add((named or versioned).group(1))
    return sorted(found)


def other_branch_packages(listing: str, branch: object) -> list[str]:
    """The installed packages of the other driver branches on the node (Fabric Manager's included): their holds
    are released and they are removed before another branch is installed. Only packages of a branch that is
    installed are named, so that a distribution's own package with an NVIDIA-like name is left alone."""
    others = [found for found in installed_branches(listing) if found != str(branch)]
    return sorted({name for other in others for name in _branch_members(listing, other, with_fabricmanager=True)})


def enabled_repo_ids(repolist: str) -> list[str]:
    """The repository ids in `dnf repolist --enabled -q` (the first column; the header line left out), so that
    "crb" is not taken for enabled where only "crb-debug" is."""
    ids = [line.split()[0] for line in repolist.splitlines() if line.strip()]
    return [repo for repo in ids if repo != "repo"]


def el_openmpi_paths(architecture: str) -> dict[str, str]:
    """Where EL's openmpi-devel puts Open MPI: headers under /usr/include/openmpi-<arch>, libraries under
    /usr/lib64/openmpi/lib (Fedora/EL packaging guidelines for MPI). nccl-tests wants both under one MPI_HOME."""
    return {"include": "/usr/include/openmpi-%s" % architecture, "lib": "/usr/lib64/openmpi/lib",
            "bin": "/usr/lib64/openmpi/bin"}


def grep_files(output: str) -> dict[str, str]:
    """`grep -H` output (path:line per line) as {path: its matching lines}."""
    found: dict[str, str] = {}
    for line in output.splitlines():
        path, sep, text = line.partition(":")
        if sep:
            found[path] = found.get(path, "") + text + "\n"
    return found


def apt_sources_for(sources: Mapping[str, str], repository_url: str, own_file: str, under: bool = False) -> list[str]:
    """The apt source files, other than own_file, that already name repository_url (NVIDIA's repository): the
    cuda-keyring package's cuda-<distro>-<arch>.list, or one written by hand. Two sources of one repository with
    different Signed-By keys make `apt update` fail ("Conflicting values set for option Signed-By"). With under, a
    URL below repository_url counts too: NVIDIA Container Toolkit's own list names .../stable/deb/$(ARCH)."""
    wanted = repository_url.rstrip("/")
    found = []
    for path, text in sorted(sources.items()):
        if path == own_file or not path.endswith((".list", ".sources")):
            continue  # apt reads only *.list and *.sources (a file set aside by gpufleet is neither)
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            urls = re.findall(r"(?:https?|file)://[^\s\]]+", line)
            if any(url.rstrip("/") == wanted or (under and url.startswith(wanted + "/")) for url in urls):
                found.append(path)
                break
    return found


# Podman reads CDI specifications (/etc/cdi, /var/run/cdi), through which NVIDIA Container Toolkit gives a container
# its GPUs (--device nvidia.com/gpu=all), from 4.1 on (NVIDIA Container Toolkit install guide, "Support for Container
# Device Interface"; Podman 4.1 release notes). Ubuntu 22.04 ships 3.4.4, Debian 11 3.0.1.
PODMAN_CDI_MIN = (4, 1)


def policy_version(policy: str) -> str:
    """The version `apt-cache policy NAME` says is installed, else its candidate; '' when neither."""
    found = {}
    for line in policy.splitlines():
        key, sep, value = line.strip().partition(":")
        if sep and key in ("Installed", "Candidate"):
            found[key] = value.strip()
    for key in ("Installed", "Candidate"):
        if found.get(key) and found[key] != "(none)":
            return found[key]
    return ""


def podman_cdi_problem(policy: str, host: str) -> str:
    """Why Podman on this node cannot give a container its GPUs (older than 4.1: no CDI), naming host and version;
    '' when it can, or when apt knows no Podman version (the engine's install then says so)."""
    version = policy_version(policy)
    numbers = re.match(r"^(?:\d+:)?(\d+)\.(\d+)", version)
    if not numbers or (int(numbers.group(1)), int(numbers.group(2))) >= PODMAN_CDI_MIN:
        return ""
    return ("%s: Podman %s reads no CDI specification (Podman 4.1 or later does), so GPU containers would get no GPU "
            "through --device nvidia.com/gpu=all; use container_runtime_engine=docker (gpufleet_container_engine), or "
            "a Podman 4.1 or later from another source" % (host, version))


def alternative_state(display: str) -> dict[str, object]:
    """Where an alternative points and whether it was set by hand, from `update-alternatives --display NAME`, as
    Debian's dpkg prints it ("cuda - manual mode", "  link currently points to /usr/local/cuda-12.8") and EL's
    chkconfig does ("cuda - status is manual.", " link currently points to ..."): EL's has no --query."""
    lines = display.splitlines()
    current = next((line.split("link currently points to", 1)[1].strip() for line in lines
                    if "link currently points to" in line), "")
    manual = bool(lines) and ("manual mode" in lines[0] or "status is manual" in lines[0])
    return {"value": current, "manual": manual}


def alternative_set_by_hand(record: object) -> bool:
    """Whether an alternative was set by hand, from the alternatives system's own record of it
    (/var/lib/dpkg/alternatives/NAME on Debian, /var/lib/alternatives/NAME on EL), whose first line is its mode,
    "manual" or "auto" (update-alternatives --display reads the same line). A missing record (None) is not."""
    return str(record or "").splitlines()[:1] == ["manual"]


def dkms_versions(status: str, kernel: str, module: str = "nvidia") -> list[str]:
    """The versions of a DKMS module built or installed for a kernel, from `dkms status -m MODULE`: dkms 3 prints
    "nvidia/580.95.05, 6.8.0-49-generic, x86_64: installed", dkms 2 "nvidia, 580.95.05, 6.8.0-49-generic, x86_64:
    installed". A module only added (no kernel) is left out: it has not been built."""
    versions = []
    for line in status.splitlines():
        fields = [field.strip() for field in line.split(":", 1)[0].split(",")]
        if "/" in fields[0]:
            name, version = fields[0].split("/", 1)
            rest = fields[1:]
        elif len(fields) > 1:
            name, version, rest = fields[0], fields[1], fields[2:]
        else:
            continue
        if name == module and rest and rest[0] == kernel and version not in versions:
            versions.append(version)
    return versions


def kernel_packages_missing(names: Iterable[str], installed: object, kernel: str) -> list[str]:
    """Of names (kernel-devel, kernel-devel-matched), those not installed at the running kernel's version: the kernel
    as `uname -r` gives it (5.14.0-427.13.1.el9_4.x86_64) is the package's VERSION-RELEASE and arch. ``installed`` is
    package_facts' shape (name -> [{version}]); where it is not a dict (not read), every name is missing."""
    wanted = list(names)
    if not isinstance(installed, Mapping):
        return wanted
    missing = []
    for name in wanted:
        versions = [str(entry.get("version", "")) for entry in installed.get(name) or [] if isinstance(entry, Mapping)]
        if not any(kernel == version or kernel.startswith(version + ".") for version in versions if version):
            missing.append(name)
    return missing
