# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one reader of a node's packages: what dpkg or rpm says is installed, in which version, and what holds it
(apt-mark hold, dnf versionlock). node_state's read (a role's packages against what it wants), nvidia_facts and
stack_facts (a driver's, NCCL's or Fabric Manager's version) and the roles' filters (the versionlock list's entries:
plugin_utils/_provision/nvidia_packaging.py) all read through it; package_drift says how they differ from what a
role wants. Changes nothing."""

from __future__ import annotations

from typing import Any, Optional

from ansible_collections.gpufleet.cluster.plugins.module_utils._node.node_state import Run, read_text, run_argv

# dpkg's status of an installed package (dpkg-query ${db:Status-Abbrev}: want, status, error flags): "ii ", or "hi "
# when held. https://man7.org/linux/man-pages/man1/dpkg-query.1.html
DPKG_FORMAT = "${Package}\t${db:Status-Abbrev}\t${Version}\n"
# dnf's versionlock plugin keeps its locks here, one NEVRA pattern a line (dnf-plugins-core, versionlock.conf's
# locklist); the dnf5 plugin keeps the same place for compatibility.
VERSIONLOCK_LIST = "/etc/dnf/plugins/versionlock.list"


def parse_dpkg(out: str) -> dict[str, dict[str, Any]]:
    """name -> {version, held} for each installed package in dpkg-query's DPKG_FORMAT output (half-installed or
    removed packages, whose status letter is not "i", are left out)."""
    found: dict[str, dict[str, Any]] = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) != 3 or len(parts[1]) < 2 or parts[1][1] != "i":
            continue
        name = parts[0].split(":", 1)[0]  # libfoo:amd64, a multi-arch package
        found[name] = {"version": parts[2], "held": parts[1][0] == "h"}
    return found


def parse_rpm(out: str, locks: str = "") -> dict[str, dict[str, Any]]:
    """name -> {version, held, stale_lock} from `rpm -q --qf '%{NAME}\\t%{VERSION}-%{RELEASE}\\n'` ("package x is
    not installed" lines are left out) and the versionlock list's text: held where a lock holds the installed
    version, stale_lock where the package's only locks hold another (a lock left from before an upgrade)."""
    locked: dict[str, list[str]] = {}
    for entry in lock_entries(locks):
        locked.setdefault(lock_name(entry), []).append(lock_version(entry))
    found: dict[str, dict[str, Any]] = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 2:
            versions = locked.get(parts[0], [])
            found[parts[0]] = {"version": parts[1], "held": parts[1] in versions,
                               "stale_lock": bool(versions) and parts[1] not in versions}
    return found


def lock_entries(listing: str) -> list[str]:
    """The locks of `dnf versionlock list` output or of the plugin's versionlock.list, one entry each: its header
    ("Last metadata expiration check ..."), comments, blank lines and exclusions (`!NAME-...`, which hold nothing)
    left out. The one reader of the lock list: node_state's reads and the roles' filters
    (plugin_utils/_provision/nvidia_packaging.py) both use it."""
    return [line.strip() for line in listing.splitlines()
            if line.strip() and not line.startswith(("Last metadata", "Updating", "#"))
            and not line.strip().startswith("!") and "-" in line]


def lock_name(pattern: str) -> str:
    """The package name of a versionlock entry (NAME-EPOCH:VERSION-RELEASE.ARCH, or NAME-VERSION...): the part
    before the epoch or the version."""
    pattern = pattern.strip().lstrip("!")
    head = pattern.split(":", 1)[0]
    if ":" in pattern:  # name-epoch:version-release.arch
        return head.rsplit("-", 1)[0]
    return pattern.rsplit("-", 2)[0]


# The arch part dnf's versionlock plugin writes after a lock's release (dnf-plugins-core versionlock.py: `add` writes
# NAME-EPOCH:VERSION-RELEASE.*), or an arch a lock was written with by hand.
_LOCK_ARCHES = ("*", "x86_64", "aarch64", "noarch", "i686")


def lock_version(pattern: str) -> str:
    """The VERSION-RELEASE a versionlock entry holds, as rpm's %{VERSION}-%{RELEASE} prints it."""
    pattern = pattern.strip().lstrip("!")
    name = lock_name(pattern)
    rest = pattern[len(name) + 1:]
    rest = rest.split(":", 1)[1] if ":" in rest else rest
    stem, _dot, arch = rest.rpartition(".")
    return stem if stem and arch in _LOCK_ARCHES else rest


def package_query(names: Optional[list[str]], kind: str) -> list[str]:
    """The one command that reads the installed ones of names (every installed package when names is None) with
    version and hold: dpkg-query's (kind "apt") or rpm's."""
    if kind == "apt":
        return ["dpkg-query", "-W", "-f", DPKG_FORMAT, *(names or [])]
    return (["rpm", "-q", "--qf", "%{NAME}\t%{VERSION}-%{RELEASE}\n", *names] if names else
            ["rpm", "-qa", "--qf", "%{NAME}\t%{VERSION}-%{RELEASE}\n"])


def parse_packages(out: str, kind: str) -> dict[str, dict[str, Any]]:
    return parse_dpkg(out) if kind == "apt" else parse_rpm(out, read_text(VERSIONLOCK_LIST) or "")


def read_packages(names: Optional[list[str]], kind: str, run: Run) -> dict[str, dict[str, Any]]:
    """The installed ones of names (every installed package when names is None), with version and hold, in one
    command."""
    if names is not None and not names:
        return {}
    _rc, out, _err = run(package_query(names, kind))
    return parse_packages(out, kind)


def query_packages(names: Optional[list[str]], run: Run = run_argv) -> Optional[dict[str, dict[str, Any]]]:
    """read_packages where the node's package manager is not known: dpkg's database where dpkg-query runs, else
    rpm's; None where neither answers (neither is there, or the listing of every package failed). A query for
    names exits 1 when one of them is not installed and still lists the others."""
    if names is not None and not names:
        return {}
    for kind in ("apt", "rpm"):
        rc, out, _err = run(package_query(names, kind))
        if rc == 127 or (names is None and rc != 0):
            continue
        return parse_packages(out, kind)
    return None


def package_facts(found: dict[str, dict[str, Any]], kind: str) -> dict[str, list[dict[str, str]]]:
    """The installed packages in the shape of ansible.builtin.package_facts' ansible_facts.packages (a name maps to
    a list of its installed versions), which the roles' missing_packages filter reads."""
    source = "apt" if kind == "apt" else "rpm"
    return {name: [{"name": name, "version": have["version"], "source": source}] for name, have in found.items()}


def package_drift(wanted: list[str], absent: list[str], held: list[str],
                  found: dict[str, dict[str, Any]]) -> list[str]:
    """Sentences for each difference. wanted: "name" (any version) or "name=version" (a version that starts so)."""
    drift = []
    for spec in wanted:
        name, _sep, version = spec.partition("=")
        have = found.get(name)
        if have is None:
            drift.append("package %s is not installed" % name)
        elif version and not have["version"].startswith(version):
            drift.append("package %s is %s, not %s" % (name, have["version"], version))
    drift.extend("package %s is installed" % name for name in absent if name in found)
    drift.extend("package %s is not held" % name for name in held if name in found and not found[name]["held"])
    drift.extend("package %s is not installed (to hold)" % name for name in held if name not in found)
    return drift
