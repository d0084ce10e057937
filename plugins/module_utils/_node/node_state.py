# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a role manages on a node, read at once, and how it differs from what the role wants.

A role that is already right on a node costs that node one read (gpufleet.cluster.node_state) instead of one task
per package, file and service: the read returns every difference as a sentence, and the role's tasks run only where
there is one. Every reader here changes nothing; every comparison is a pure function of what was read.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import re
import socket
import stat
import subprocess
from typing import Any, Callable, Optional

Run = Callable[[list], "tuple[int, str, str]"]


def run_argv(argv: list, timeout: int = 60) -> tuple[int, str, str]:
    """Run a read-only command as AnsibleModule.run_command answers, (rc, stdout, stderr), for the readers that run
    outside node_state's module: 127 where the command is not there (the shell's "command not found"), 124 past
    the timeout (timeout(1)'s)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)  # noqa: S603
    except OSError as exc:
        return 127, "", str(exc)
    except subprocess.TimeoutExpired:
        return 124, "", "%s did not answer within %d s" % (argv[0], timeout)
    return done.returncode, done.stdout, done.stderr


# ---------------------------------------------------------------------------------------------------------------
# Files


def read_text(path: str, limit: int = -1) -> Optional[str]:
    """A file's text (a path may start with ~user), or None where there is none."""
    try:
        with open(os.path.expanduser(path), "rb") as handle:
            return handle.read(limit).decode("utf-8", "surrogateescape")
    except OSError:
        return None


def read_file(path: str) -> dict[str, Any]:
    """What a file is (without following a last link): kind, mode ("0644"), owner, group, sha1 of a regular file, src
    (what it points at) of a link."""
    path = os.path.expanduser(path)
    try:
        info = os.lstat(path)
    except OSError:
        return {"kind": "absent"}
    kinds = {stat.S_IFREG: "file", stat.S_IFDIR: "directory", stat.S_IFLNK: "link"}
    found: dict[str, Any] = {"kind": kinds.get(stat.S_IFMT(info.st_mode), "other"),
                             "mode": "%04o" % stat.S_IMODE(info.st_mode), "owner": _name(pwd.getpwuid, info.st_uid),
                             "group": _name(grp.getgrgid, info.st_gid)}
    if found["kind"] == "link":
        found["src"] = os.readlink(path)
    if found["kind"] == "file":
        digest = hashlib.sha1()  # noqa: S324  # the digest Ansible's copy and template compare, not for security
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        found["sha1"] = digest.hexdigest()
    return found


def grep_fixed(text: str, paths: list[str], limit: int = 1 << 20) -> dict[str, str]:
    """The lines that contain text (a fixed string), by file, in the files at paths and in every file below a folder
    among them (as grep -rsF): {path: its matching lines, each ending with a newline}. Unreadable files are left out."""
    files: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, names in os.walk(path):
                dirs.sort()
                files.extend(os.path.join(root, name) for name in sorted(names))
        else:
            files.append(path)
    found: dict[str, str] = {}
    for path in files:
        content = read_text(path, limit) if os.path.isfile(path) else None
        lines = [line for line in (content or "").splitlines() if text in line]
        if lines:
            found[path] = "".join(line + "\n" for line in lines)
    return found


def _name(lookup: Callable[[int], Any], number: int) -> str:
    try:
        return str(lookup(number)[0])
    except KeyError:
        return str(number)


def sha1_of(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogateescape")).hexdigest()  # noqa: S324


def file_drift(want: dict[str, Any], found: dict[str, Any]) -> list[str]:
    """Sentences for each way the file at want["path"] differs: its kind (state: file, directory, link, absent), its
    content (content, or sha1), mode, owner, group, or for a link what it points at (src). An unset wish is not
    compared."""
    path, state = want["path"], want.get("state") or "file"
    if state == "absent":
        return [] if found["kind"] == "absent" else ["%s is there" % path]
    if found["kind"] != state:
        return ["%s is %s, not a %s" % (path, "missing" if found["kind"] == "absent" else "a " + found["kind"],
                                        state)]
    if state == "link":
        src = want.get("src")
        return [] if src is None or found.get("src") == src else ["%s points at %s, not %s" % (path, found.get("src"),
                                                                                               src)]
    drift = []
    content_sha1 = sha1_of(want["content"]) if want.get("content") is not None else want.get("sha1")
    if state == "file" and content_sha1 and found.get("sha1") != content_sha1:
        drift.append("%s differs from what the role writes" % path)
    for key in ("mode", "owner", "group"):
        wish = want.get(key)
        if wish is not None and _normal(key, wish) != found.get(key):
            drift.append("%s has %s %s, not %s" % (path, key, found.get(key), _normal(key, wish)))
    return drift


def _normal(key: str, value: Any) -> str:
    return "%04o" % int(str(value), 8) if key == "mode" else str(value)


def marked_block(text: Optional[str], marker: str) -> Optional[str]:
    """The lines between blockinfile's BEGIN and END markers (marker with {mark}), without them; None when the file or
    the block is missing."""
    if text is None:
        return None
    begin, end = marker.replace("{mark}", "BEGIN"), marker.replace("{mark}", "END")
    lines = text.splitlines()
    if begin not in lines or end not in lines:
        return None
    first = lines.index(begin)
    last = lines.index(end, first) if end in lines[first:] else -1
    return None if last < 0 else "\n".join(lines[first + 1:last])


def block_drift(want: dict[str, Any], text: Optional[str]) -> list[str]:
    """A sentence when the marked block of want["path"] is missing or differs from want["block"] (compared as
    blockinfile writes it: its lines; an empty block means none)."""
    have = marked_block(text, want["marker"])
    lines = "\n".join(str(want.get("block") or "").splitlines())
    if not lines:
        return [] if have is None else ["%s holds the block %s" % (want["path"], want["marker"])]
    if have is None:
        return ["%s lacks the block %s" % (want["path"], want["marker"])]
    return [] if have == lines else ["%s's block %s differs" % (want["path"], want["marker"])]


def line_drift(want: dict[str, Any], text: Optional[str]) -> list[str]:
    """A sentence when the file at want["path"] has a line matching want["regexp"] (which must not be there)."""
    pattern = re.compile(want["regexp"])
    found = [line for line in (text or "").splitlines() if pattern.search(line)]
    return ["%s has the line %r" % (want["path"], found[0])] if found else []


# ---------------------------------------------------------------------------------------------------------------
# A virtual environment's Python packages


def canonical(name: str) -> str:
    """A distribution's name as PEP 503 compares names."""
    return re.sub(r"[-_.]+", "-", name).lower()


def venv_versions(venv: str) -> Optional[dict[str, str]]:
    """Canonical name -> version of every distribution in the environment at venv (its *.dist-info folders, named
    NAME-VERSION.dist-info), without starting its Python; None when there is no environment there."""
    lib = os.path.join(venv, "lib")
    if not os.path.exists(os.path.join(venv, "bin", "python")) or not os.path.isdir(lib):
        return None
    found: dict[str, str] = {}
    for python in sorted(os.listdir(lib)):
        site = os.path.join(lib, python, "site-packages")
        for entry in sorted(os.listdir(site)) if os.path.isdir(site) else []:
            if entry.endswith(".dist-info") and "-" in entry:
                name, version = entry[:-len(".dist-info")].rsplit("-", 1)
                found[canonical(name)] = version
    return found


def same_version(have: str, want: str) -> bool:
    """Whether the installed version have satisfies ==want as pip decides it: PEP 440's equality (2.3 is 2.3.0, where
    the node's Python has packaging, which python_env installs; as text otherwise), the local label (+cpu) of have
    ignored unless want has one."""
    if "+" not in want:  # PEP 440: ==2.13.0 matches 2.13.0+cpu; a local label is compared only when asked for
        have = have.split("+", 1)[0]
    if have == want:
        return True
    try:
        from packaging.version import InvalidVersion, Version  # pylint: disable=import-outside-toplevel
    except ImportError:
        return False
    try:
        return Version(have) == Version(want)
    except InvalidVersion:
        return False


def pip_drift(venv: str, pinned: list[str], found: Optional[dict[str, str]]) -> list[str]:
    """A sentence for each NAME[extras]==VERSION of pinned not installed at that version in the environment."""
    if found is None:
        return ["there is no Python environment at %s" % venv]
    drift = []
    for spec in pinned:
        name, _sep, version = spec.partition("==")
        name = canonical(name.split("[", 1)[0])
        have = found.get(name)
        if have is None or not same_version(have, version):
            drift.append("%s is %s in %s, not %s" % (name, "not installed" if have is None else have, venv, version))
    return drift


# ---------------------------------------------------------------------------------------------------------------
# Names


def first_address(name: str) -> str:
    """The first IPv4 address the node's resolver gives for name (what `getent ahostsv4 NAME | head -1` prints), or
    "nothing"."""
    try:
        found = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return "nothing"
    return str(found[0][4][0]) if found else "nothing"


def resolve_drift(expected: dict[str, str], resolve: Callable[[str], str] = first_address) -> list[str]:
    """A sentence for each name that does not resolve first to its expected address."""
    drift = []
    for name, address in expected.items():
        found = resolve(name)
        if found != address:
            drift.append("%s resolves to %s, not to its cluster address %s" % (name, found, address))
    return drift


# ---------------------------------------------------------------------------------------------------------------
# Services and kernel modules


def parse_systemctl_show(out: str) -> dict[str, dict[str, str]]:
    """unit -> {UnitFileState, ActiveState} from `systemctl show --property=Id,UnitFileState,ActiveState a b`."""
    units: dict[str, dict[str, str]] = {}
    for chunk in out.strip().split("\n\n"):
        props = dict(line.split("=", 1) for line in chunk.splitlines() if "=" in line)
        if props.get("Id"):
            units[props["Id"]] = props
    return units


def read_services(names: list[str], run: Run) -> Optional[dict[str, dict[str, str]]]:
    """The units' states in one command; None without systemd (nothing can then be compared)."""
    if not names:
        return {}
    units = [name if "." in name else name + ".service" for name in names]
    rc, out, _err = run(["systemctl", "show", "--property=Id,UnitFileState,ActiveState", "--", *units])
    return parse_systemctl_show(out) if rc == 0 else None


def service_drift(want: dict[str, Any], units: Optional[dict[str, dict[str, str]]]) -> list[str]:
    name = want["name"] if "." in want["name"] else want["name"] + ".service"
    if units is None:
        return ["the state of %s cannot be read (no systemd)" % name]
    unit = units.get(name, {})
    drift = []
    if want.get("enabled") is not None:
        enabled = unit.get("UnitFileState") in ("enabled", "enabled-runtime", "static", "alias", "indirect")
        if enabled != bool(want["enabled"]):
            drift.append("%s is %s" % (name, unit.get("UnitFileState") or "not found"))
    state = want.get("state")
    if state in ("started", "stopped"):
        active = unit.get("ActiveState") == "active"
        if active != (state == "started"):
            drift.append("%s is %s" % (name, unit.get("ActiveState") or "not found"))
    return drift


def loaded_modules(text: Optional[str]) -> set[str]:
    """Module names from /proc/modules."""
    return {line.split()[0] for line in (text or "").splitlines() if line.strip()}


def module_drift(wanted: list[str], loaded: set[str]) -> list[str]:
    return ["kernel module %s is not loaded" % name for name in wanted if name.replace("-", "_") not in loaded]
