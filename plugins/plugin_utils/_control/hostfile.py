# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Host lists people already have, read into gpufleet's node list. Pure functions; no Ansible imports.

Formats (one node per line, in rank order; blank lines and ``#`` comments are ignored):

- ``pssh``: parallel-ssh's host_file, ``[user@]host[:port]``;
- ``mpi``: an Open MPI / DeepSpeed hostfile, ``host [slots=N] [max_slots=M]`` (DeepSpeed's is the same
  format with ``slots=`` only);
- ``mlp``: the variables a training platform injects: MLP_WORKER_NUM, MLP_WORKER_GPU and the hosts from
  MLP_MPI_HOSTFILE (an ``mpi`` file), else MLP_WORKER_ALL_HOSTS or MLP_MPI_HOSTS (comma-separated,
  ``host[:slots]``), else MLP_WORKER_<i>_HOST.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

FORMATS = ("auto", "pssh", "mpi", "deepspeed", "mlp")
_HOST_RE = re.compile(r"^(?:[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\])$")


class HostfileError(ValueError):
    """A host list is malformed; the message names the file (or variable) and the line."""


@dataclass(frozen=True)
class Node:
    host: str
    user: str | None = None
    port: int | None = None
    slots: int | None = None
    max_slots: int | None = None
    line: int = 0


def _where(source: str, line: int) -> str:
    return "%s:%d" % (source, line) if line else source


def _lines(text: str) -> list[tuple[int, str]]:
    found = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if line:
            found.append((number, line))
    return found


def _host(value: str, source: str, line: int) -> str:
    if not _HOST_RE.match(value):
        raise HostfileError("%s: %r is not a host name or address" % (_where(source, line), value))
    return value.strip("[]")


def _count(value: str, what: str, source: str, line: int) -> int:
    if not re.match(r"^\d+$", value) or int(value) < 1:
        raise HostfileError("%s: %s=%s must be a whole number of at least 1" % (_where(source, line), what, value))
    return int(value)


def parse_pssh(text: str, source: str) -> list[Node]:
    """``[user@]host[:port]`` lines (parallel-ssh's host_file)."""
    nodes = []
    for number, line in _lines(text):
        match = re.match(r"^(?:(?P<user>[^@\s]+)@)?(?P<host>\[[^\]]+\]|[^:\s]+)(?::(?P<port>\S+))?$", line)
        if not match:
            raise HostfileError("%s: expected [user@]host[:port], got %r" % (_where(source, number), line))
        port = match.group("port")
        if port is not None and (not port.isdigit() or not 1 <= int(port) <= 65535):
            raise HostfileError("%s: port %r is not a number from 1 to 65535" % (_where(source, number), port))
        nodes.append(Node(host=_host(match.group("host"), source, number), user=match.group("user"),
                          port=int(port) if port else None, line=number))
    return _checked(nodes, source)


def parse_slots(text: str, source: str) -> list[Node]:
    """``host [slots=N] [max_slots=M]`` lines (Open MPI and DeepSpeed hostfiles)."""
    nodes = []
    for number, line in _lines(text):
        fields = line.split()
        host = _host(fields[0], source, number)
        values: dict[str, int] = {}
        for field in fields[1:]:
            key, sep, value = field.partition("=")
            if not sep or key not in ("slots", "max_slots"):
                raise HostfileError("%s: expected host slots=N [max_slots=M], got %r" % (_where(source, number), field))
            values[key] = _count(value, key, source, number)
        if "slots" in values and "max_slots" in values and values["max_slots"] < values["slots"]:
            raise HostfileError("%s: max_slots=%d is less than slots=%d"
                                % (_where(source, number), values["max_slots"], values["slots"]))
        nodes.append(Node(host=host, slots=values.get("slots"), max_slots=values.get("max_slots"), line=number))
    return _checked(nodes, source)


def detect(text: str) -> str:
    """'mpi' when a line has slots=, else 'pssh'."""
    return "mpi" if any(re.search(r"\s(max_)?slots=", line) for _n, line in _lines(text)) else "pssh"


def parse(text: str, source: str, fmt: str = "auto") -> list[Node]:
    if fmt not in FORMATS or fmt == "mlp":
        raise HostfileError("%s: format must be one of auto, pssh, mpi, deepspeed, got %r" % (source, fmt))
    chosen = detect(text) if fmt == "auto" else fmt
    return parse_pssh(text, source) if chosen == "pssh" else parse_slots(text, source)


def parse_mlp(env: Mapping[str, str], read_file=None) -> list[Node]:
    """The nodes a training platform describes in its MLP_* variables."""
    def number(name: str) -> int | None:
        value = env.get(name)
        if value is None or value == "":
            return None
        return _count(value, name, "environment", 0)

    count, gpus = number("MLP_WORKER_NUM"), number("MLP_WORKER_GPU")
    if env.get("MLP_MPI_HOSTFILE"):
        path = env["MLP_MPI_HOSTFILE"]
        if read_file is None:
            raise HostfileError("MLP_MPI_HOSTFILE: cannot read %s" % path)
        nodes = parse_slots(read_file(path), path)
    elif env.get("MLP_WORKER_ALL_HOSTS") or env.get("MLP_MPI_HOSTS"):
        name = "MLP_WORKER_ALL_HOSTS" if env.get("MLP_WORKER_ALL_HOSTS") else "MLP_MPI_HOSTS"
        nodes = []
        for index, item in enumerate(part.strip() for part in env[name].split(",")):
            host, _sep, slots = item.partition(":")
            nodes.append(Node(host=_host(host, name, 0), slots=_count(slots, "slots", name, 0) if slots else None,
                              line=index + 1))
        nodes = _checked(nodes, name)
    elif count:
        nodes = []
        for index in range(count):
            name = "MLP_WORKER_%d_HOST" % index
            if not env.get(name):
                raise HostfileError("%s: is not set, but MLP_WORKER_NUM=%d" % (name, count))
            nodes.append(Node(host=_host(env[name], name, 0), line=index + 1))
        nodes = _checked(nodes, "MLP_WORKER_<i>_HOST")
    else:
        raise HostfileError("environment: none of MLP_MPI_HOSTFILE, MLP_WORKER_ALL_HOSTS, MLP_MPI_HOSTS or "
                            "MLP_WORKER_NUM is set")
    if count is not None and count != len(nodes):
        raise HostfileError("MLP_WORKER_NUM=%d, but the hosts list %d nodes" % (count, len(nodes)))
    if gpus is not None:
        nodes = [Node(host=n.host, user=n.user, port=n.port, slots=n.slots or gpus, max_slots=n.max_slots, line=n.line)
                 for n in nodes]
    return nodes


def _checked(nodes: list[Node], source: str) -> list[Node]:
    if not nodes:
        raise HostfileError("%s: lists no host" % source)
    seen: dict[tuple[str, int | None], int] = {}
    for node in nodes:
        key = (node.host, node.port)
        if key in seen:
            raise HostfileError("%s: host %s is listed again (first on line %d)"
                                % (_where(source, node.line), node.host, seen[key]))
        seen[key] = node.line
    return nodes


def host_vars(node: Node, default_gpus: int | None = None) -> dict:
    """The inventory variables of one node."""
    found: dict = {"ansible_host": node.host}
    if node.user:
        found["ansible_user"] = node.user
    if node.port:
        found["ansible_port"] = node.port
    gpus = node.slots or default_gpus
    if gpus:
        found["gpufleet_gpus"] = gpus
    return found


def inventory_names(nodes: list[Node]) -> list[str]:
    """Each node's inventory name: its host, or host_port where several lines name one host (other ports)."""
    hosts = [node.host for node in nodes]
    return [node.host if hosts.count(node.host) == 1 else "%s_%s" % (node.host, node.port) for node in nodes]
