# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the port check remembers on a node: that this node's probes got through on a port, to every other node of a
job (UDP to each, TCP to the master), and when.

The probe step of the check (port_check.py, mode probe) writes the record where everything it tried got through, and
removes it where something did not; the next launch's probe (node_probe) reads it back, with each record's age
measured by the node's own clock. The controller trusts a pass only where every node of the job remembers one for
the same nodes, the same port and the same master within the TTL (plugin_utils/_control/ports.py remembered_pass):
together the records then cover every pair the check covers. The file is in the user's jobs folder, one per user;
each record is keyed by the node's inventory name and the port ("node1:29517"), so that two inventory hosts on one
machine (the local demo) keep one record each.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

MEMORY_FILE = ".port-checks.json"
KEEP_S = 7 * 24 * 3600  # a record older than this is dropped at the next write, whatever the TTL


def memory_path(jobs_dir: str) -> str:
    return os.path.join(os.path.abspath(os.path.expanduser(jobs_dir)), MEMORY_FILE)


def _load(path: str) -> dict[str, Any]:
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _age(record: Any, now: float) -> float:
    """How old a record is; -1 (not kept) where it has no time of the shape written."""
    try:
        return now - float(record["at"])
    except (KeyError, TypeError, ValueError):
        return -1.0


def key(host: str, port: int) -> str:
    return "%s:%d" % (host, port)


def read(jobs_dir: str, now: Callable[[], float] = time.time) -> dict[str, dict[str, Any]]:
    """The records by key (host:port), each {host, port, nodes, master, tcp (the master's TCP port was tried),
    age_s}; a record from the future (a clock set back) or not in the shape written is left out."""
    found = {}
    for name, record in _load(memory_path(jobs_dir)).items():
        try:
            age = now() - float(record["at"])
            entry = {"host": str(record["host"]), "port": int(record["port"]),
                     "nodes": [list(map(str, node)) for node in record["nodes"]], "master": str(record["master"]),
                     "tcp": bool(record.get("tcp"))}
        except (KeyError, TypeError, ValueError):
            continue
        if age >= 0 and name == key(entry["host"], entry["port"]):
            found[name] = dict(entry, age_s=round(age, 1))
    return found


def remember(jobs_dir: str, host: str, port: int, nodes: Sequence[Sequence[str]], master: str, tcp: bool,
             passed: bool, now: Callable[[], float] = time.time) -> None:
    """Keep (passed) or forget host's record for port; records past KEEP_S are dropped. Written whole to a
    temporary file and renamed, so a reader never sees half of it."""
    path = memory_path(jobs_dir)
    records = {name: record for name, record in _load(path).items() if 0 <= _age(record, now()) <= KEEP_S}
    records.pop(key(host, port), None)
    if passed:
        records[key(host, port)] = {"host": host, "port": port, "nodes": [list(node) for node in nodes],
                                    "master": master, "tcp": tcp, "at": now()}
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=MEMORY_FILE + ".")
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(records, out, indent=1, sort_keys=True)
        os.replace(temporary, path)
    except OSError:
        os.unlink(temporary)
        raise


def fresh_ports(records: dict[str, dict[str, Any]], nodes: Sequence[Sequence[str]], ttl_s: float) -> list[int]:
    """The ports the master (the first of nodes) remembers a pass on for these nodes, younger than ttl_s: where the
    master's probe looks first for a free port, so that a launch after a checked one can use the memory."""
    wanted = [list(node) for node in nodes]
    return sorted(record["port"] for record in records.values()
                  if wanted and record["host"] == wanted[0][0] and record["nodes"] == wanted
                  and record["master"] == wanted[0][0] and record["age_s"] <= ttl_s)
