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
import time
from typing import Protocol

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gang import Gang, LoneNode
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gang_rules import SpareView
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.heartbeat import Heartbeat
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import HeartbeatPhase, JobState


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


def spare_view(gang: Gang | LoneNode, attempt: int) -> SpareView | None:
    """What this node knows of the spares when it decides a restart, or None for a job without spares."""
    if not isinstance(gang, Gang) or not gang.spares:
        return None
    return SpareView(gang.members(), gang.ready_spares(), gang.rank, announced(gang, attempt))


def announced(gang: Gang, attempt: int) -> tuple[list[str], str] | None:
    """The members (and why) a peer already in the next attempt says its heartbeats, where they differ from this
    node's: it decided first, and the gang follows it (gang_rules._follow)."""
    for _rank, news in sorted(gang.news.items()):
        if news.attempt > attempt and news.members is not None and list(news.members) != gang.members():
            return list(news.members), news.restart_reason
    return None


def place_env(node: SpareHost) -> dict[str, str]:
    """The variables launch.sh takes this attempt's place from (launchers.place_prelude), for a job with spares: this
    part's node rank, node 0's address and the ranks on this node."""
    if not node.spec.get("spares"):
        return {}
    slots = list(node.spec.get("slots") or [])
    nproc = slots[node.node_rank] if node.node_rank < len(slots) else node.spec.get("nproc_per_node")
    return {"GPUFLEET_NODE_RANK": str(node.node_rank), "GPUFLEET_MASTER_ADDR": str(node.spec["nodes"][0][1]),
            "GPUFLEET_NPROC": str(nproc)}


def replace_nodes(node: SpareHost, replaced: dict[int, str], why: str, parts: list[Heartbeat]) -> None:
    """A member applies the gang's decision: each spare takes its node rank from the next attempt (the heartbeats
    name it there from now on), said in the log, and in state.json under "replaced" (who, by whom, when, why, and
    whether for a hardware fault: the controller records it in the fleet's history, plugin_utils/_control/history.py)."""
    records = list(node.state.get("replaced") or [])
    faulted = {part.rank for part in parts if part.hardware_fault}
    for rank, spare in sorted(replaced.items()):
        old = node.gang.host(rank)
        node.gang.replace(rank, spare)
        records.append({"node_rank": rank, "host": old, "by": spare, "attempt": node.attempt + 1, "why": why,
                        "at": round(time.time(), 3), "hardware_fault": rank in faulted})
        node.log("%s takes node_rank %d in place of %s from attempt %d" % (spare, rank, old, node.attempt + 1))
    node.spec["nodes"] = [list(member) for member in node.gang.nodes]
    node.save(replaced=records, members=node.gang.members())


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
            return _place(gang, news)
        if _job_over(gang):
            return None
    return None


def unused(node: SpareHost) -> int:
    """A spare's end when the job did not need it (or it was stopped in standby): state unused, exit status 0."""
    node.save(state=JobState.UNUSED, exit_code=0, ended_at=time.time(),
              stop_reason=node.stop_reason or "the job ended without needing this spare")
    node.gang.close()
    return 0


def _place(gang: Gang, news: Heartbeat) -> Placement:
    """The gang as the members' news has it (this spare and every other spare they placed, at their node ranks), and
    where it puts this spare."""
    members = list(news.members or ())
    spares = dict(gang.spares)
    mine = ""
    for rank, host in enumerate(members):
        if host != gang.host(rank) and host in spares:
            if host == gang.me[0]:
                mine = gang.host(rank)
            gang.replace(rank, host)
    gang.rank = members.index(gang.me[0])
    return Placement(gang.rank, news.attempt or 1, mine, news.restart_reason, news.restarts_used)
