# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A node's heartbeat: what its supervisor tells the others of its part of the job, typed, and its form on the wire.

The one reader and writer of a heartbeat's fields. gang.py signs ``to_wire()`` and takes in ``from_wire()`` of what
arrives; gang_rules.py, spares.py, attempt.py and the supervisor read the fields by name, never the wire's keys
(tests/unit/plugins/module_utils/test_heartbeat.py checks both). A node's own part of an attempt joins its peers'
news as one too (``of_part``), so that the gang's rules read every part alike. Shipped to the nodes as part of the
supervisor; standard library only, Python 3.8+.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Tuple

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import STOPPED_FOR, JobState, PartOutcome


def _int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _str(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None


@dataclasses.dataclass(frozen=True)
class Heartbeat:  # pylint: disable=too-many-instance-attributes
    """One node's news of its part: the attempt and phase (running, ended, a spare's standby), how the part ended
    or is failing (outcome, exit code or signal, reason, the node it was stopped for, a hardware fault, its first
    failed rank's exit code and place), its log's
    silence, the hang's stacks (wanted, taken, where the ranks were), why the next attempt starts, and who sent it
    when (the run, node rank, host, the members the sender knows, its wall clock)."""

    rank: int = -1
    attempt: int = 0
    phase: Optional[str] = None
    final: bool = False
    outcome: Optional[str] = None
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    reason: Optional[str] = None
    stopped_for: Optional[str] = None
    silent_s: Optional[float] = None
    hardware_fault: bool = False
    stacks_taken: bool = False
    stacks_wanted: bool = False
    restart_reason: str = ""
    hung_in: Optional[str] = None
    failed_rank: Optional[int] = None
    rank_exit: Optional[int] = None
    failed_at: Optional[str] = None
    restarts_used: int = 0
    members: Optional[Tuple[str, ...]] = None
    host: Optional[str] = None
    run: Optional[str] = None
    sent_at: Optional[float] = None

    @classmethod
    def from_wire(cls, message: dict) -> Heartbeat:
        """The heartbeat of an authentic message (gang.verify's); a key of the wrong type reads as absent, an
        unknown key (a newer supervisor's) is left out."""
        members = message.get("members")
        return cls(
            rank=_int(message.get("rank")) if _int(message.get("rank")) is not None else -1,
            attempt=_int(message.get("attempt")) or 0,
            phase=_str(message.get("phase")),
            final=bool(message.get("final")),
            outcome=_str(message.get("outcome")),
            exit_code=_int(message.get("exit_code")),
            signal=_str(message.get("signal")),
            reason=_str(message.get("reason")),
            stopped_for=_str(message.get(STOPPED_FOR)),
            silent_s=_float(message.get("silent_s")),
            hardware_fault=bool(message.get("hardware_fault")),
            stacks_taken=bool(message.get("stacks_taken")),
            stacks_wanted=bool(message.get("stacks_wanted")),
            restart_reason=_str(message.get("restart_reason")) or "",
            hung_in=_str(message.get("hung_in")),
            failed_rank=_int(message.get("failed_rank")),
            rank_exit=_int(message.get("rank_exit")),
            failed_at=_str(message.get("failed_at")),
            restarts_used=_int(message.get("restarts_used")) or 0,
            members=tuple(str(host) for host in members) if isinstance(members, list) else None,
            host=_str(message.get("host")),
            run=_str(message.get("run")),
            sent_at=_float(message.get("sent_at")),
        )

    def to_wire(self) -> dict:
        """The message gang.sign signs: every field under its key (the node stopped for under STOPPED_FOR, as in
        state.json), the members as a list."""
        message = dataclasses.asdict(self)
        message[STOPPED_FOR] = message.pop("stopped_for")
        message["members"] = list(self.members) if self.members is not None else None
        return message

    @classmethod
    def of_part(cls, part: PartOutcome, rank: int, hung_in: Optional[str]) -> Heartbeat:
        """This node's own part of an attempt, read as its peers' news is (for the gang's rules)."""
        return cls(rank=rank, attempt=part.attempt, outcome=part.outcome, exit_code=part.exit_code,
                   signal=part.signal, reason=part.reason, stopped_for=part.stopped_for,
                   hardware_fault=part.hardware_fault, hung_in=hung_in, failed_rank=part.failed_rank,
                   rank_exit=part.rank_exit, failed_at=part.failed_at)

    @classmethod
    def unheard(cls, rank: int, attempt: int) -> Heartbeat:
        """A peer's part this node never heard of: it counts as failed."""
        return cls(rank=rank, attempt=attempt, outcome=JobState.FAILED)
