# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which rank a collective waited for, from the dumps of PyTorch's flight recorder, fetched from the nodes.

With TORCH_NCCL_DUMP_ON_TIMEOUT=1 (module_utils/_job/launchers.py sets it), each rank of an NCCL job writes its last
collectives when one times out: ``<TORCH_FR_DUMP_TEMP_FILE><global rank>``, a pickle of plain dicts, lists,
strings and numbers (torch 2.13: torch/csrc/distributed/c10d/FlightRecorderDetail.hpp; version "2.10"). Each entry
is one collective of one process group: its ``collective_seq_id`` (1 for the group's first), ``profiling_name``
("nccl:all_reduce"), sizes, ``state`` (scheduled, started, completed) and the Python ``frames`` that called it.

Read here with an unpickler that refuses every class (a dump holds none; a file that names one is not read, so no
code in a fetched file ever runs), then, per process group: the ranks that entered its latest collective and wait in
it, and the ranks that never entered it (behind: the likely cause), or ranks that called different collectives at
the same place in the sequence (a mismatch). When torch is importable on the controller, its own analyser
(``python -m torch.distributed.flight_recorder.fr_trace``) is run on the same dumps and its verdict kept beside.
"""

from __future__ import annotations

import ast
import io
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Mapping, Sequence

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._postmortem.stack_groups import rank_list, where

DUMP_NAME = re.compile(r"^rank_(\d+)$")
# What torch's analyser says that is a verdict (torch/distributed/flight_recorder/components/utils.py).
TORCH_VERDICT = re.compile(r"^(Not all ranks joining collective.*|.*[Mm]ismatch.*|missing ranks: .*|collective: .*|"
                           r"group info: .*|We cannot decide .*? information)")
ANALYSER_TIMEOUT_S = 120


class NoClasses(pickle.Unpickler):
    """Loads plain data only: any class or function named in the file refuses it."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError("a flight recorder dump holds no class, and this file names %s.%s" % (module, name))


def load(path: str) -> dict:
    """One dump, checked to be one: a dict with entries (a list of dicts) and pg_config."""
    with open(path, "rb") as handle:
        dump = NoClasses(io.BytesIO(handle.read())).load()
    if not isinstance(dump, dict) or not isinstance(dump.get("entries", []), list):
        raise ValueError("not a flight recorder dump (no entries list)")
    return dump


def read_dumps(folder: str, names: Sequence[str]) -> tuple[dict[int, dict], list[str]]:
    """The dumps by global rank, and a clause per file that could not be read."""
    dumps: dict[int, dict] = {}
    unread = []
    for name in names:
        found = DUMP_NAME.match(name)
        if not found:
            continue
        try:
            dumps[int(found.group(1))] = load(os.path.join(folder, name))
        except (OSError, ValueError, pickle.UnpicklingError, EOFError) as exc:
            unread.append("%s not read: %s" % (name, exc))
    return dumps, unread


def _members(dumps: Mapping[int, dict], group: str) -> set[int]:
    """The group's global ranks, as its pg_config says ("[0, 1, 2]"); else the ranks whose dumps name it."""
    for dump in dumps.values():
        config = (dump.get("pg_config") or {}).get(group)
        if isinstance(config, dict):
            try:
                return {int(rank) for rank in ast.literal_eval(str(config.get("ranks")))}
            except (ValueError, SyntaxError, TypeError):
                break
    return set(dumps)


def _latest(entries: Sequence[Mapping[str, Any]], group: str) -> Mapping[str, Any] | None:
    """The group's latest collective (not point-to-point) in one rank's entries."""
    mine = [e for e in entries if isinstance(e, Mapping) and not e.get("is_p2p") and _group(e) == group]
    return max(mine, key=lambda e: int(e.get("collective_seq_id") or 0)) if mine else None


def _group(entry: Mapping[str, Any]) -> str:
    pg = entry.get("process_group")
    return str(pg[0]) if isinstance(pg, (list, tuple)) and pg else str(pg)


def _desc(entry: Mapping[str, Any]) -> str:
    pg = entry.get("process_group")
    return str(pg[1]) if isinstance(pg, (list, tuple)) and len(pg) > 1 and pg[1] else _group(entry)


def _called_from(entry: Mapping[str, Any]) -> str:
    frames = [[f.get("name"), f.get("filename"), f.get("line")] for f in entry.get("frames") or []
              if isinstance(f, Mapping)]
    return " at %s" % where(frames) if frames else ""


def group_verdict(dumps: Mapping[int, dict], group: str) -> str | None:
    """What one process group's dumps say: the ranks behind its latest collective, or a mismatch, or None when
    every rank completed the same last collective."""
    members = _members(dumps, group)  # a rank outside the group (a TP or DP group of others) is never behind in it
    latest = {rank: _latest(dump.get("entries") or [], group) for rank, dump in dumps.items() if rank in members}
    if not any(latest.values()):
        return None
    top = max(int(e.get("collective_seq_id") or 0) for e in latest.values() if e)
    at_top = {rank: e for rank, e in latest.items() if e and int(e.get("collective_seq_id") or 0) == top}
    sample = at_top[min(at_top)]
    kinds: dict[tuple, list[int]] = {}
    for rank, entry in at_top.items():
        kinds.setdefault((entry.get("profiling_name"), str(entry.get("input_sizes"))), []).append(rank)
    name = "%s #%d of process group %s" % (sample.get("profiling_name"), top, _desc(sample))
    if len(kinds) > 1:
        return "collective #%d of process group %s differs between ranks: %s" % (top, _desc(sample), ", ".join(
            "%s %s %s" % (rank_list(ranks), kind[0], kind[1]) for kind, ranks in sorted(kinds.items(), key=lambda k: min(k[1]))))
    behind = sorted(rank for rank in latest if rank not in at_top)
    waiting = sorted(rank for rank, e in at_top.items() if e.get("state") != "completed")
    missing = sorted(members - set(dumps))
    if not behind and not waiting:
        return None
    said = "%s %s in %s%s" % (rank_list(waiting or sorted(at_top)), ("waits" if len(waiting) == 1 else "wait")
                              if waiting else "completed", name, _called_from(sample))
    if behind:
        last = "; ".join("rank %d's last: #%s, %s" % (r, latest[r].get("collective_seq_id"), latest[r].get("state"))
                         if latest[r] else "rank %d: none" % r for r in behind)
        said += "; %s never entered it (%s): the likely cause" % (rank_list(behind), last)
    if missing:
        said += "; no dump from %s" % rank_list(missing)
    return said


def verdict(dumps: Mapping[int, dict]) -> str | None:
    """Every process group's verdict, the default group's first; None when no dump says anything is pending."""
    groups = sorted({_group(e) for d in dumps.values() for e in d.get("entries") or [] if isinstance(e, Mapping)},
                    key=lambda g: (g != "0", g))
    said = [found for found in (group_verdict(dumps, g) for g in groups) if found]
    return "; ".join(said) or None


def torch_analyser(folder: str, names: Sequence[str], python: str = sys.executable) -> tuple[str, str]:
    """torch's own analyser on this run's dumps (copied to a folder of their own, so that older files in the logs
    folder are not read): its output and its verdict lines; ('', '') when torch, or its analyser, is not importable
    by python (Python's own "No module named 'torch...'": one start of python, not a second to find out first)."""
    with tempfile.TemporaryDirectory(prefix="gpufleet-fr-") as scratch:
        for name in names:
            shutil.copy(os.path.join(folder, name), os.path.join(scratch, name))
        try:
            done = subprocess.run([python, "-m", "torch.distributed.flight_recorder.fr_trace", scratch, "--prefix",
                                   "rank_", "--allow-incomplete-ranks"], capture_output=True, text=True, check=False,
                                  timeout=ANALYSER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return "", "torch's analyser did not finish within %d s" % ANALYSER_TIMEOUT_S
    if done.returncode != 0 and "No module named 'torch" in done.stderr:
        return "", ""
    output = (done.stdout + done.stderr).replace(scratch, folder)
    lines: list[str] = []
    for line in output.splitlines():
        found = TORCH_VERDICT.match(line.strip())
        if found and found.group(1) not in lines:
            lines.append(found.group(1))
    if done.returncode != 0:
        return output, "torch's analyser failed: %s" % (output.strip().splitlines() or ["exit %d" % done.returncode])[-1]
    return output, "; ".join(lines)


def summary(logs_dir: str, results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the report says of the flight recorder's dumps fetched into <logs_dir>/flight_recorder/ (each node's
    result names its own, so that older files there are not read): ``said`` ('' without dumps), ``dumps`` (the
    files read) and ``analyser`` (torch's output, written to fr_trace.txt there; '' when torch is not importable)."""
    folder = os.path.join(logs_dir, "flight_recorder")
    names = sorted({str(name) for r in results for name in ((r.get("flight_recorder") or {}).get("dumps") or [])
                    if os.path.isfile(os.path.join(folder, str(name)))})
    if not names:
        return {"said": "", "dumps": [], "analyser": ""}
    dumps, unread = read_dumps(folder, names)
    found = verdict(dumps) if dumps else None
    parts = [found or "no collective was pending in any dump"] + unread
    analyser = ""
    if dumps:
        output, torch_said = torch_analyser(folder, ["rank_%d" % rank for rank in sorted(dumps)])
        if output:
            analyser = os.path.join(folder, "fr_trace.txt")
            with open(analyser, "w", encoding="utf-8") as handle:
                handle.write(output)
        if torch_said:
            parts.append("torch's analyser: %s (%s)" % (torch_said, analyser or "no output"))
    said = "%s (%d dumps in %s)" % ("; ".join(parts), len(names), folder)
    return {"said": said, "dumps": [os.path.join(folder, name) for name in names], "analyser": analyser}
