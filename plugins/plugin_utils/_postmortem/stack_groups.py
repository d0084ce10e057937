# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which rank a hung job is stuck in, from every rank's stack (taken on the nodes by module_utils/_runtime/rank_stacks.py).

In a hang, typically every rank but one waits in the same collective and the odd one is elsewhere (a data loader,
a checkpoint write, an uneven branch). The ranks are grouped by where they are: the innermost frame of the main
thread, at the innermost frame of the user's own code (not the standard library's or an installed package's). When
one group holds more ranks than any other, the ranks outside it are named as the likely cause; when every rank is in
one place, or the largest groups tie, no rank is blamed.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping, Sequence

# Files of the standard library and of installed packages; a frame elsewhere is the user's code.
LIBRARY_FILE = re.compile(r"/(site|dist)-packages/|/lib/python\d+(\.\d+)?/|^<frozen ")


def where(frames: Sequence[Sequence[Any]]) -> str:
    """'function (file:line)': the innermost frame's function, at the innermost frame of the user's code (the
    innermost frame itself when no frame is the user's)."""
    inner = frames[0]
    user = next((f for f in frames if not LIBRARY_FILE.search(str(f[1]))), inner)
    return "%s (%s:%s)" % (inner[0], os.path.basename(str(user[1])), user[2])


def rank_list(ranks: Sequence[int]) -> str:
    """'rank 4', 'ranks 0–3, 5': runs of three or more written as a range."""
    ordered, runs = sorted(ranks), []
    for rank in ordered:
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    said = ", ".join(str(a) if a == b else "%d, %d" % (a, b) if b == a + 1 else "%d–%d" % (a, b) for a, b in runs)
    return ("rank " if len(ordered) == 1 else "ranks ") + said


def _stacked(results: Sequence[Mapping[str, Any]]) -> tuple[dict[str, list[tuple[int, str]]], list[str]]:
    """Each place with its (rank, host), and a clause per node whose stacks (or some of them) were not taken."""
    places: dict[str, list[tuple[int, str]]] = {}
    missing = []
    for result in results:
        stacks, host = result.get("stacks"), str(result.get("host"))
        if not isinstance(stacks, Mapping):
            continue
        if stacks.get("error"):
            missing.append("no stacks from %s: %s" % (host, stacks["error"]))
        for rank in stacks.get("ranks") or []:
            if rank.get("error") or not rank.get("frames") or rank.get("rank") is None:
                missing.append("no stack of %s's pid %s: %s" % (host, rank.get("pid"), rank.get("error") or "no frame"))
                continue
            places.setdefault(where(rank["frames"]), []).append((int(rank["rank"]), host))
    return places, missing


def _groups(places: Mapping[str, list[tuple[int, str]]]) -> list[tuple[str, list[tuple[int, str]]]]:
    return sorted(places.items(), key=lambda item: (-len(item[1]), min(item[1])))


def _odd(groups: Sequence[tuple[str, list[tuple[int, str]]]]) -> list[tuple[int, str]]:
    """The (rank, host) outside the largest group, where one group holds more ranks than any other; else none."""
    if len(groups) > 1 and len(groups[0][1]) > len(groups[1][1]):
        return sorted(member for _place, members in groups[1:] for member in members)
    return []


def likely_cause(results: Sequence[Mapping[str, Any]]) -> dict[str, list[int]]:
    """The ranks the stacks name as the likely cause of a hang, by host ({} where none stands out)."""
    found: dict[str, list[int]] = {}
    for rank, host in _odd(_groups(_stacked(results)[0])):
        found.setdefault(host, []).append(rank)
    return found


def verdict(results: Sequence[Mapping[str, Any]]) -> str | None:
    """Where the ranks were when the job was found hung (or stopped with stacks asked for), and which rank is the
    likely cause; None when no node took stacks."""
    if not any(isinstance(r.get("stacks"), Mapping) for r in results):
        return None
    places, missing = _stacked(results)
    groups = _groups(places)
    said = ", ".join("%s in %s" % (rank_list([rank for rank, _host in members]), place) for place, members in groups)
    odd = _odd(groups)
    if len(groups) == 1:
        said += ": no rank stands out"
    elif odd:
        hosts = sorted({host for _rank, host in odd})
        verb = "is" if len(odd) == 1 else "are"
        said += ": %s on %s %s the likely cause" % (rank_list([rank for rank, _host in odd]), ", ".join(hosts), verb)
    return "; ".join(part for part in [said] + missing if part) or None
