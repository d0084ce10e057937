# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Spare nodes: a spare's supervisor stands by, running no rank, hearing the gang's heartbeats, until the gang names
it in the place of a node it lost (or whose GPU failed); it then runs that node rank's part from the next attempt
on, as that node did.

Who replaces whom is decided by every member alike (gang_rules.restart_decision, from the same heartbeats); this
file is how a member applies the decision (the gang, state.json, the log) and how a spare learns it: the members'
heartbeats carry the hosts of the node ranks ("members"), and a spare that finds itself there takes that rank.
Shipped to the nodes as part of the supervisor; standard library only, Python 3.8+.
"""

from __future__ import annotations

import collections
import os
import time
from typing import Protocol

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gang import Gang, LoneNode
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gang_rules import SpareView, changes, next_members
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.heartbeat import Heartbeat
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import (
    HOSTFILE,
    PLACE_VARS,
    HeartbeatPhase,
    JobState,
)


class Placement(collections.namedtuple("Placement", ("node_rank", "attempt", "replaced", "restart_reason",
                                                     "restarts_used"), defaults=(0,))):
    """Where the members' news placed this spare: its node rank from the attempt named, the host it replaces there,
    why the attempt starts, and how much of the restart budget the members have used (the spare decides the next
    restart as they do). stand_by returns it; the supervisor alone takes it on (Supervisor._take_place)."""

    def record(self) -> dict:
        """state.json's took_place_of."""
        return {"node_rank": self.node_rank, "host": self.replaced, "attempt": self.attempt, "why": self.restart_reason}


class SpareHost(Protocol):
    """What this file uses of a node's supervisor."""

    job_dir: str
    spec: dict
    state: dict
    gang: Gang | LoneNode
    attempt: int
    node_rank: int
    host: str
    stop_reason: str | None

    def save(self, **changes: object) -> None: ...

    def log(self, line: str) -> None: ...

    def tick(self, phase: HeartbeatPhase, timeout_s: float = 0.2) -> None: ...


def spare_view(gang: Gang | LoneNode, attempt: int, min_nodes: int | None = None) -> SpareView | None:
    """What this node knows of the spares (and how far the gang may shrink) when it decides a restart, or None for
    a job whose members cannot change (no spares, min_nodes all of them)."""
    if not isinstance(gang, Gang) or not gang.elastic:
        return None
    return SpareView(gang.members(), gang.ready_spares(), gang.rank, announced(gang, attempt), min_nodes or None)


def announced(gang: Gang, attempt: int) -> tuple[list[str], str] | None:
    """The members (and why) a peer already in the next attempt says its heartbeats, where they differ from this
    node's: it decided first, and the gang follows it (gang_rules._follow)."""
    for _rank, news in sorted(gang.news.items()):
        if news.attempt > attempt and news.members is not None and list(news.members) != gang.members():
            return list(news.members), news.restart_reason
    return None


def place_env(node: SpareHost) -> dict[str, str]:
    """The variables launch.sh takes this attempt's place from (launchers.place_prelude), for a job whose members may
    change (spares, min_nodes): this part's node rank, node 0's address, the ranks on this node, the node count, the
    world size and every node's address with its ranks."""
    if not node.spec.get("spares") and not node.spec.get("min_nodes"):
        return {}
    nodes, slots = node.spec["nodes"], _slots(node.spec)
    place = (node.node_rank, nodes[0][1], slots[node.node_rank], len(nodes), sum(slots),
             ",".join("%s:%d" % (address, count) for (_host, address), count in zip(nodes, slots)),
             ",".join(address for _host, address in nodes))
    return {name: str(value) for name, value in zip(PLACE_VARS, place)}


def _slots(spec: dict) -> list[int]:
    """The ranks on each node, in node rank order."""
    return [int(count) for count in spec.get("slots") or [spec.get("nproc_per_node") or 1] * len(spec["nodes"])]


def write_hostfile(job_dir: str, spec: dict) -> None:
    """The job folder's hostfile for the members now (launchers.hostfile_text's form), for a script that reads it."""
    path = os.path.join(job_dir, HOSTFILE)
    with open(path + ".tmp", "w") as handle:
        handle.write("".join("%s slots=%d\n" % (address, count) for (_h, address), count in zip(spec["nodes"], _slots(spec))))
    os.replace(path + ".tmp", path)


def reshape(node: SpareHost, replaced: dict[int, str], dropped: tuple[int, ...], why: str,
            parts: list[Heartbeat]) -> None:
    """A member applies the gang's decision: each spare takes its node rank from the next attempt, the nodes left
    out are gone and the others renumbered (the heartbeats name them so from now on); said in the log, and in
    state.json under "replaced" (who, by whom, when, why, and whether for a hardware fault: the controller records it
    in the fleet's history, plugin_utils/_control/history.py) and "left_out" (who, from which attempt, on how many
    nodes). The hostfile is rewritten for the new members; this node's rank is then the gang's (the supervisor
    takes it on)."""
    gang = node.gang
    if not isinstance(gang, Gang):
        raise TypeError("only a gang's members change")
    members = gang.members()
    faulted = {part.rank for part in parts if part.hardware_fault}
    now, attempt = round(time.time(), 3), node.attempt + 1
    records = list(node.state.get("replaced") or [])
    for rank, spare in sorted(replaced.items()):
        records.append({"node_rank": rank, "host": members[rank], "by": spare, "attempt": attempt, "why": why,
                        "at": now, "hardware_fault": rank in faulted})
        node.log("%s takes node_rank %d in place of %s from attempt %d" % (spare, rank, members[rank], attempt))
    staying = next_members(members, replaced, dropped)
    left = list(node.state.get("left_out") or [])
    for rank in dropped:
        left.append({"node_rank": rank, "host": members[rank], "attempt": attempt, "why": why, "at": now,
                     "nodes": len(staying), "hardware_fault": rank in faulted})
    if dropped:
        node.log("attempt %d goes on without %s, on %d nodes: %s" % (
            attempt, ", ".join(members[rank] for rank in dropped), len(staying), why))
    _take_members(node, gang, staying, dropped)
    node.save(replaced=records, left_out=left, members=staying, node_rank=gang.rank)


def _take_members(node: SpareHost, gang: Gang, members: list[str], dropped: tuple[int, ...]) -> None:
    """The gang, the spec's nodes and slots, and the hostfile as members (hosts in node rank order; the node ranks
    dropped gone) have them."""
    node.spec["slots"] = [slot for rank, slot in enumerate(_slots(node.spec)) if rank not in dropped]
    gang.reshape(members)
    node.spec["nodes"] = [list(member) for member in gang.nodes]
    write_hostfile(node.job_dir, node.spec)


def _placed(gang: Gang) -> Heartbeat | None:
    """The news of a member that names this spare among the node ranks, else None."""
    for _rank, news in sorted(gang.news.items()):
        if gang.me[0] in (news.members or ()):
            return news
    return None


def _job_over(gang: Gang) -> bool:
    """Whether the job has ended without this spare: every member has ended for good, or none is heard any more."""
    lost = set(gang.lost())
    return all(rank in lost or (rank in gang.news and gang.news[rank].final) for rank in gang.peers())


def stand_by(node: SpareHost) -> Placement | None:
    """A spare's wait: heartbeats in standby until a member's names this spare at a node rank (its placement; the
    gang is then that rank's), or the job ends without it, or it is stopped (None)."""
    gang = node.gang
    if not isinstance(gang, Gang):
        return None
    node.save(state=JobState.STANDBY)
    node.log("standing by as a spare for %s" % ", ".join(gang.members()))
    while node.stop_reason is None:
        node.tick(HeartbeatPhase.STANDBY)
        news = _placed(gang)
        if news is not None:
            return _place(node, news)
        if _job_over(gang):
            return None
    return None


def unused(node: SpareHost) -> int:
    """A spare's end when the job did not need it (or it was stopped in standby): state unused, exit status 0."""
    node.save(state=JobState.UNUSED, exit_code=0, ended_at=time.time(),
              stop_reason=node.stop_reason or "the job ended without needing this spare")
    node.gang.close()
    return 0


def _place(node: SpareHost, news: Heartbeat) -> Placement:
    """The gang as the members' news has it (this spare and every other spare they placed, at their node ranks; the
    nodes they left out gone), and where it puts this spare."""
    gang = node.gang
    if not isinstance(gang, Gang):
        raise TypeError("a spare stands by in a gang")
    members = list(news.members or ())
    replaced, dropped = changes(gang.members(), members)
    mine = next((gang.host(rank) for rank, host in replaced.items() if host == gang.me[0]), "")
    _take_members(node, gang, members, dropped)
    return Placement(gang.rank, news.attempt or 1, mine, news.restart_reason, news.restarts_used)
