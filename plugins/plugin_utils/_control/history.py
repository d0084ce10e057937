# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet's history of node faults, and quarantine: where it is decided that a node keeps failing.

The controller keeps one append-only file of JSON lines, ``<gpufleet_logs_dir>/history.jsonl``: one line per fault
gpufleet saw on a node (a GPU's hardware XID during a job, a spare taking a node's place for a hardware fault, a
node lost, a hung job's likely rank, the health gate's finding of a node's hardware at a launch or in health.yml),
per health check of a node (health.yml: its result, GPUs and driver), per step of a node's maintenance (maintain.yml:
out of service, back, or failed its check) and per release of a node. A line
is never rewritten; a line that is not a JSON object with a node and a kind is refused, naming the file and the
line, and the file is left as it is.

A node is quarantined when ``after`` faults of a hardware class (a GPU's or a network port's) fell within
``window`` seconds before now, after its last release: train.yml places a spare in its place (stand_in), or refuses
the job naming its history; so for a node out of service for maintenance, until maintain.yml puts it back. A
node lost (a reboot, a network blip) or named by a hang's stacks, and an
application's own failure, are recorded or not counted: they do not say the node is bad. Pure functions and one
file."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control.tables import text_table

HISTORY_FILE = "history.jsonl"
# The classes of fault that count toward quarantine: the node's hardware.
HARDWARE_CLASSES = ("gpu", "network")
KINDS = ("fault", "release", "check", "maintenance")
QUARANTINED, IN_SERVICE, IN_MAINTENANCE = "quarantined", "in service", "in maintenance"
# A maintenance record's result: the node taken out of service, put back, or left out (its check failed).
OUT, BACK, FAILED = "out", "back", "failed its check"
DEFAULT_AFTER = 3
DEFAULT_WINDOW = "7d"
_WINDOW = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class HistoryError(ValueError):
    """The history file or a quarantine setting cannot be used; the message names what and where."""


def path_of(logs_root: str) -> str:
    return os.path.join(logs_root, HISTORY_FILE)


def window_seconds(text: Any) -> float:
    """gpufleet_quarantine_window as seconds: a number of seconds, or a number with s, m, h, d or w."""
    match = _WINDOW.match(str(text))
    if not match or float(match.group(1)) <= 0:
        raise HistoryError("gpufleet_quarantine_window=%r does not parse: give a positive number of seconds, or one "
                           "with s, m, h, d or w (7d, 36h)" % (text,))
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def quarantine_after(value: Any) -> int:
    """gpufleet_quarantine_after: how many hardware faults in the window quarantine a node (1 or more)."""
    try:
        count = int(str(value))
    except ValueError:
        count = 0
    if count < 1:
        raise HistoryError("gpufleet_quarantine_after=%r is not a whole number of 1 or more" % (value,))
    return count


def load(path: str, after: Any, window: Any) -> tuple[list[dict[str, Any]], int, float]:
    """The history's records with the quarantine settings checked: (records, after, window in seconds)."""
    return read(path), quarantine_after(after), window_seconds(window)


def read(path: str) -> list[dict[str, Any]]:
    """Every record of the history, in order ([] where there is no file yet)."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise HistoryError("cannot read the fleet's history %s: %s" % (path, exc)) from exc
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise HistoryError("the fleet's history %s, line %d, is not JSON (%s): %s; it was left as it is: mend or "
                               "remove that line" % (path, number, exc, line[:120])) from exc
        if not isinstance(record, dict) or not record.get("node") or record.get("kind") not in KINDS:
            raise HistoryError("the fleet's history %s, line %d, is not a record with a node and a kind (fault, "
                               "release, check or maintenance): %s; it was left as it is: mend or remove that line" % (path, number, line[:120]))
        records.append(record)
    return records


def append(path: str, records: Sequence[Mapping[str, Any]]) -> None:
    """Add records at the end of the history, one line each, flushed to disk; nothing before them is rewritten."""
    if not records:
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("".join(json.dumps(dict(record), sort_keys=True) + "\n" for record in records))
        handle.flush()
        os.fsync(handle.fileno())


def add(path: str, found: Sequence[Mapping[str, Any]],
        new_of: Callable[[list[dict[str, Any]], Sequence[Mapping[str, Any]]], list[dict[str, Any]]]
        ) -> list[dict[str, Any]]:
    """Append what ``new_of(the history's records, found)`` keeps of found (not_yet_recorded for a job's faults,
    standing_faults for the gate's findings), and return it; HistoryError where the history cannot be read, with
    nothing written."""
    new = new_of(read(path), found)
    append(path, new)
    return new


def said(entries: Iterable[Mapping[str, Any]]) -> str:
    """Records in one line, for the log: 'node[ GPU]: fact; ...'."""
    return "; ".join("%s%s: %s" % (entry.get("node"), " " + entry["gpu"] if entry.get("gpu") else "",
                                   entry.get("fact")) for entry in entries)


def record(node: str, kind: str, fact: str, job: str = "", klass: str = "", gpu: str = "",
           at: float | None = None, run: str = "") -> dict[str, Any]:
    at = time.time() if at is None else float(at)
    return {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(at)), "at": round(at, 3), "node": str(node),
            "kind": kind, "class": klass, "gpu": gpu, "fact": fact, "job": job, "run": run}


def check(node: str, result: str, fact: str, gpus: int | None = None, driver: str = "",
          at: float | None = None) -> dict[str, Any]:
    """A health check's record: its result (passed, warned or refused), what it found, the GPUs and driver seen."""
    return dict(record(node, "check", fact, at=at), result=result, gpus=gpus, driver=driver)


def maintenance(node: str, result: str, fact: str, at: float | None = None) -> dict[str, Any]:
    """A maintenance step's record (maintain.yml): the node taken OUT of service, BACK in it, or FAILED its check
    after the change and left out; fact says what was done or found."""
    return dict(record(node, "maintenance", fact, at=at), result=result)


def maintained(records: Iterable[Mapping[str, Any]], node: str) -> Mapping[str, Any] | None:
    """The maintenance record that keeps the node out of service (its last, where no release or BACK came after)."""
    last = None
    for entry in records:
        if entry.get("node") == node and entry.get("kind") in ("maintenance", "release"):
            last = entry if entry.get("kind") == "maintenance" and entry.get("result") != BACK else None
    return last


def standing_faults(records: Iterable[Mapping[str, Any]], found: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The faults of found that the node does not already have on record since its last release with the same
    class, GPU and fact: a fault that stays until it is mended (a pending row remap, an XID not yet acknowledged)
    is one fault, however many launches or health checks see it again."""
    records = list(records)
    held: set[tuple] = set()
    new = []
    for entry in found:
        key = (entry.get("node"), entry.get("class"), entry.get("gpu"), entry.get("fact"))
        if key in held or any((old.get("kind"), old.get("class"), old.get("gpu"), old.get("fact")) ==
                              ("fault",) + key[1:] for old in _since_release(records, str(entry.get("node")))):
            continue
        held.add(key)
        new.append(dict(entry))
    return new


def _key(entry: Mapping[str, Any]) -> tuple:
    return (entry.get("node"), entry.get("kind"), entry.get("job"), entry.get("run"), entry.get("fact"))


def not_yet_recorded(records: Iterable[Mapping[str, Any]], found: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The faults of found that the history does not hold yet: a job's report read again (stop.yml after train.yml,
    on the same run) records nothing twice."""
    held = {_key(entry) for entry in records}
    return [dict(entry) for entry in found if _key(entry) not in held]


def job_faults(job: str, results: Iterable[Mapping[str, Any]], replaced: Mapping[str, Mapping[str, Any]],
               at: float | None = None, hung: Mapping[str, Sequence[int]] | None = None,
               left_out: Mapping[str, Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The faults a job's results show, one per node: a spare took its place for a hardware fault (a GPU's), or for
    its loss (recorded, class "node lost", not counted), or the gang went on without it (``left_out``, min_nodes),
    alike; a GPU's new hardware XID during the job (gpu_watch.py); the
    ranks the stacks of a hung job name as its likely cause (``hung``, by host: class "hang", recorded and not
    counted, since where a rank waits says as much of the program as of the node). A rank's own failure is the
    application's, and is not recorded."""
    results = list(results)
    run = next((str(result["run_id"]) for result in results if result.get("run_id")), "")
    found = []
    gone = [(host, "replaced by %s: %s" % (why.get("by"), why.get("why")), why) for host, why in replaced.items()]
    gone += [(host, "left out from attempt %s: %s" % (why.get("attempt"), why.get("why")), why)
             for host, why in (left_out or {}).items()]
    for host, fact, why in gone:  # the nodes the job went on without, each once
        found.append(record(host, "fault", fact, job, "gpu" if why.get("hardware_fault") else "node lost",
                            at=why.get("at") or at, run=run))
    went_without = {host for host, _fact, _why in gone}
    for result in results:
        host = str(result.get("host"))
        if result.get("gpu_fault") and host not in went_without:
            found.append(record(host, "fault", str(result["gpu_fault"]), job, "gpu", at=result.get("ended_at") or at,
                                run=run))
    for host, ranks in (hung or {}).items():
        found.append(record(host, "fault", "the job hung; the stacks name rank%s %s as the likely cause" % (
            "s" if len(ranks) > 1 else "", ", ".join(str(rank) for rank in ranks)), job, "hang", at=at, run=run))
    return found


def _since_release(records: Iterable[Mapping[str, Any]], node: str) -> list[Mapping[str, Any]]:
    mine: list[Mapping[str, Any]] = []
    for entry in records:
        if entry.get("node") != node:
            continue
        if entry.get("kind") == "release":
            mine = []
        else:
            mine.append(entry)
    return mine


def counted(records: Iterable[Mapping[str, Any]], node: str, window_s: float, now: float | None = None
            ) -> list[Mapping[str, Any]]:
    """The node's hardware faults within the window, since its last release."""
    now = time.time() if now is None else now
    return [entry for entry in _since_release(records, node)
            if entry.get("class") in HARDWARE_CLASSES and now - float(entry.get("at") or 0) <= window_s]


def quarantined(found: Mapping[str, Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Each node of a standing() that is quarantined, with the faults that put it there."""
    return {node: list(entry["faults"]) for node, entry in found.items() if entry["state"] == QUARANTINED}


def story(faults: Sequence[Mapping[str, Any]]) -> str:
    return "; ".join("%s%s: %s" % (entry.get("time"), " (job %s)" % entry["job"] if entry.get("job") else "",
                                   entry.get("fact")) for entry in faults)


def refusal(node: str, faults: Sequence[Mapping[str, Any]], window: str, path: str) -> str:
    return ("%s is quarantined: %d hardware faults within %s (%s); mend it, then return it to service with "
            "ansible-playbook -i <inventory> gpufleet.cluster.fleet -e release=%s (the history: %s)"
            % (node, len(faults), window, story(faults), node, path))


def warnings(found: Mapping[str, Mapping[str, Any]], after: int, window: str) -> list[str]:
    """What to say of each node of a standing() with hardware faults in the window, short of quarantine."""
    return ["%s has had %d hardware fault(s) within %s (%d quarantine it): %s" % (
        node, len(entry["faults"]), window, after, story(entry["faults"]))
        for node, entry in found.items() if entry["state"] != QUARANTINED and entry["faults"]]


def out_of_service(found: Mapping[str, Mapping[str, Any]], window: str, path: str) -> dict[str, tuple[str, str]]:
    """Each node of a standing() that no job may be placed on: (why, in a few words; the refusal where no spare is
    left)."""
    held = {}
    for node, entry in found.items():
        if entry["state"] == IN_MAINTENANCE:
            step = entry["maintenance"]
            why = "in maintenance since %s (%s)" % (step.get("time"), step.get("fact"))
            said = ("%s is %s; maintain.yml puts it back in service once its check passes (or gpufleet.cluster.fleet "
                    "-e release=%s; the history: %s)" % (node, why, node, path))
            held[node] = (why, said)
        elif entry["state"] == QUARANTINED:
            held[node] = ("quarantined (%d hardware faults within %s: %s)" % (
                len(entry["faults"]), window, story(entry["faults"])), refusal(node, entry["faults"], window, path))
    return held


def stand_in(nodes: Sequence[str], spares: Sequence[str], found: Mapping[str, Mapping[str, Any]], window: str,
             path: str) -> tuple[list[str], list[str], list[str]]:
    """The job's nodes with each node out of service (quarantined, in maintenance) replaced, at its place in rank
    order, by the first spare in service, and the spares left; what was done, one sentence each (a spare out of
    service is left out). HistoryError names every such node no spare is left for, and why it is out."""
    held = out_of_service(found, window, path)
    free = [spare for spare in spares if spare not in held]
    said = ["spare %s is %s and left out" % (spare, held[spare][0]) for spare in spares if spare in held]
    placed, refused = [], []
    for rank, node in enumerate(nodes):
        if node not in held:
            placed.append(node)
        elif free:
            spare = free.pop(0)
            placed.append(spare)
            said.append("%s is %s; spare %s takes its place (node_rank %d)" % (node, held[node][0], spare, rank))
        else:
            refused.append(held[node][1])
    if refused:
        raise HistoryError("; ".join(refused) + ("; no spare in service is left to take its place" if spares else ""))
    return placed, free, said


def release(records: Sequence[Mapping[str, Any]], node: str, inventory: Iterable[str], after: int, window_s: float,
            now: float | None = None) -> dict[str, Any]:
    """The release record of a quarantined node of the inventory, or of one left out of service by its maintenance,
    or HistoryError saying why it cannot be released."""
    if node not in list(inventory):
        raise HistoryError("release=%s: no such node in the inventory" % node)
    entry = standing(records, [node], after, window_s, now)[node]
    if entry["state"] == IN_SERVICE:
        raise HistoryError("release=%s: the node is neither quarantined (%d hardware fault(s) within the window, %d "
                           "quarantine it) nor in maintenance; nothing was recorded" % (node, len(entry["faults"]), after))
    return record(node, "release", "returned to service", at=now)


def standing(records: Sequence[Mapping[str, Any]], nodes: Iterable[str], after: int, window_s: float,
             now: float | None = None) -> dict[str, dict[str, Any]]:
    """Per node: in maintenance (maintained()), quarantined (where it is decided: ``after`` hardware faults counted)
    or in service, the faults counted, its last fault, maintenance or release (``last``) and its last health check
    (``last_check``)."""
    found = {}
    for node in nodes:
        faults = counted(records, node, window_s, now)
        step = maintained(records, node)
        last = next((entry for entry in reversed(records) if entry.get("node") == node
                     and entry.get("kind") != "check"), None)
        checked = next((entry for entry in reversed(records) if entry.get("node") == node
                        and entry.get("kind") == "check"), None)
        state = IN_MAINTENANCE if step else QUARANTINED if len(faults) >= after else IN_SERVICE
        found[node] = {"state": state, "faults": faults, "maintenance": dict(step) if step else None,
                       "last": dict(last) if last else None, "last_check": dict(checked) if checked else None}
    return found


def standing_table(found: Mapping[str, Mapping[str, Any]]) -> str:
    """One line per node: its standing, hardware faults counted, last health check (with the GPUs and driver it saw)
    and last fault or release."""
    rows = []
    for node, entry in found.items():
        checked = entry.get("last_check") or {}
        last = entry.get("last")
        rows.append([node, entry["state"], str(len(entry["faults"])),
                     "%s %s" % (checked["time"], checked.get("result")) if checked else "never",
                     "-" if checked.get("gpus") is None else str(checked["gpus"]), checked.get("driver") or "-",
                     "-" if not last else "%s %s: %s" % (last.get("time"), last.get("kind"), last.get("fact"))])
    return text_table(["node", "state", "faults", "last health check", "GPUs", "driver", "last fault or release"], rows)
