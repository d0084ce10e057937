# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gang's rules: why a node's part stops because of the others, and how an attempt ended for the whole gang.

The one fail-fast authority of a job. Each node's supervisor applies these rules to what it has heard (gang.py
carries the heartbeats; the supervisor loop acts on the answer): another node's part failed or found the job hung,
a peer is lost (never heard since the join, or silent for heartbeat_misses beats), or every node's log has been
silent for hang_timeout_s. Shipped to the nodes as part of the supervisor; standard library only, Python 3.8+.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Callable, Sequence

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gang import Gang, LoneNode
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.heartbeat import Heartbeat
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_processes import wait_status_said
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.restart_policy import DEFAULT_RESTART_ON, refused_by_policy
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import (
    GANG_FAILURE_STATES,
    HeartbeatPhase,
    SINGLE_ENTRY,
    JobState,
    StopReason,
)


def gang_failure(gang: Gang, attempt: int) -> tuple[int, Heartbeat] | None:
    """The first peer (by rank) whose part of this attempt ended in a way that ends it for everyone."""
    for rank in gang.peers():
        news = gang.news.get(rank) or Heartbeat(rank=rank)
        if news.attempt == attempt and news.outcome in GANG_FAILURE_STATES and not news.stopped_for:
            return rank, news
        if news.final and news.attempt < attempt:
            # Its last heartbeat said its part ended, finally, in an earlier attempt.
            return rank, dataclasses.replace(news, outcome=HeartbeatPhase.ENDED,
                                             reason="it has ended and will not take part in attempt %d" % attempt)
    return None


def rank_failure_news(rank: int | None, pid: int, status: int | None, stopping: bool,
                      launcher: str) -> Heartbeat | None:
    """What this node tells the others the moment one of its ranks ends, before its launcher has ended the node's
    part: a failure (a non-zero exit, a signal) of the rank's own, with how it ended. Not a rank that ended well, nor
    one whose end is this node's stop's doing (stopping), nor one whose end its supervisor could not read (status
    None: its launcher reaped it first, and the part's outcome tells); nor any under a single-entry launcher
    (SINGLE_ENTRY: mpirun), whose one command on node 0 owns every rank and reports which one failed, a report the
    others' stop would cut short."""
    if not status or stopping or launcher in SINGLE_ENTRY:
        return None
    return Heartbeat(outcome=JobState.FAILED, reason="rank %s (pid %d) ended with %s"
                     % ("?" if rank is None else rank, pid, wait_status_said(status)))


def describe(host: str, rank: int, news: Heartbeat) -> str:
    """One clause saying what ended a node's part, for stop reasons and the report."""
    what = news.outcome
    if what == JobState.SUCCEEDED:
        return "%s (node_rank %d) succeeded" % (host, rank)
    if what == JobState.FAILED and news.reason and (news.exit_code is None or news.hardware_fault):
        # Failing, before its part has ended; or ended by a hardware fault, which says more than the exit code.
        return "%s (node_rank %d) failed: %s" % (host, rank, news.reason)
    if what == JobState.FAILED:
        code = news.signal or "exit code %s" % news.exit_code
        return "%s (node_rank %d) failed with %s" % (host, rank, code)
    if what == JobState.HUNG:
        return "%s (node_rank %d) found the job hung" % (host, rank)
    if what == HeartbeatPhase.ENDED:
        return "%s (node_rank %d) %s" % (host, rank, news.reason)
    return "%s (node_rank %d) was stopped (%s)" % (host, rank, news.reason or "stop requested")


def failure_reason(gang: Gang | LoneNode, attempt: int) -> StopReason | None:
    """Why this node's part stops because another node's part of the attempt failed, ended or found the job
    hung (a hang is the whole job's, not one node's), else None. Every rank's stack is taken first on a hang, and
    when the other node's stop asked for stacks (stop.yml -e dump_stacks=true)."""
    if not isinstance(gang, Gang):
        return None
    failure = gang_failure(gang, attempt)
    if failure is None:
        return None
    rank, news = failure
    host = gang.host(rank)
    if news.outcome == JobState.HUNG:
        return StopReason(JobState.HUNG, str(news.reason), None, True)
    return StopReason(JobState.STOPPED, "stopped by gpufleet: %s" % describe(host, rank, news), host,
                      news.stacks_wanted)


def lost_reason(gang: Gang | LoneNode, lost: list[int]) -> StopReason:
    """Why this node stops for lost peers: those never heard since the join (a port the firewall drops, a node
    that never started) are named with the UDP port and the wait; else the first that fell silent, and for how
    long."""
    if not isinstance(gang, Gang):  # a lone node has no peers to lose
        raise TypeError("no gang to have lost a peer of")
    never = gang.never_heard(lost)
    if never:
        host = gang.host(never[0])
        return StopReason(JobState.STOPPED, "stopped by gpufleet: no heartbeat from %s arrived at this node's UDP "
                          "port %d in the %.1f s it waited (join_timeout_s=%g): the UDP port must be open "
                          "between every pair of nodes, and each of those nodes' supervisor started"
                          % (", ".join("%s (node_rank %d)" % (gang.host(rank), rank) for rank in never),
                             gang.port, gang.waited_s(), gang.join_timeout_s), host)
    host = gang.host(lost[0])
    return StopReason(JobState.STOPPED, "stopped by gpufleet: %s (node_rank %d) lost: no heartbeat for %.0f s "
                      "(UDP port %d)" % (host, lost[0], gang.silent_s(lost[0]), gang.port), host)


def hang_reason(silences: list[float | None], hang_timeout_s: float) -> StopReason | None:
    """The job is hung when every node's log (this node's first, then each peer's as its heartbeats say) has been
    silent for hang_timeout_s; off when hang_timeout_s is 0."""
    if hang_timeout_s and all(s is not None and s >= hang_timeout_s for s in silences):
        return StopReason(JobState.HUNG, "hung: no node wrote to its log for %.0f s (hang_timeout=%.0f)"
                          % (min(s for s in silences if s is not None), hang_timeout_s), None, True)
    return None


def ending_on_its_own(stopping: StopReason, first_exit_at: float | None) -> bool:
    """Whether the gang's news came while this node's launcher was already ending its part on its own, a rank
    of it having ended: it is left its grace period to finish (torchrun ends the node's other ranks, then
    prints which rank failed first and how, which a SIGTERM would cut short)."""
    return stopping.stopped_for is not None and first_exit_at is not None


def failed_before(stopping: StopReason, returncode: int, first_exit_at: float | None, stop_decided_at: float,
                  failed_first: bool = False) -> bool:
    """Whether this node's part was failing on its own before the gang's news stopped it: a rank of it had
    ended before the news came, and its launcher ended in failure. The news then only raced this node's own
    (a rank dies; a rank on another node fails in a collective a moment later, and its launcher, with no
    other rank to end, reports first): this node failed, and which failure came first is the report's to
    decide, by time. So too a bare signal's stop (no request of gpufleet's) after a rank of this node had failed on
    its own (failed_first): under Slurm, --kill-on-bad-exit ends the step's other tasks once one ends in failure,
    and the others' parts end at this node's news while its launcher is still ending its other ranks. A stop the
    user asked for, or a hang, stays what it is."""
    if returncode == 0 or first_exit_at is None or first_exit_at >= stop_decided_at:
        return False
    return stopping.stopped_for is not None or (bool(stopping.signalled) and failed_first)


def peer_done(news: Heartbeat | None, attempt: int) -> bool:
    """Whether a peer's part of this attempt has ended (or it has moved on, or ended for good), by its news."""
    if news is None:
        return False
    if news.final or news.attempt > attempt:
        return True
    return news.attempt == attempt and news.phase == HeartbeatPhase.ENDED


def no_restart_for(parts: list[Heartbeat]) -> str | None:
    """Why a failed attempt is not launched again although restarts remain, else None: a node's part ended for a
    hardware fault of its GPUs (gpu_watch.py's XID), which a restart on the same nodes would meet again."""
    for part in parts:
        if part.hardware_fault:
            return ("not restarting: %s is a hardware fault, which a restart on the same nodes would meet again"
                    % (part.reason or "a GPU fault"))
    return None


# Why a restart happens, and when restarting is no use: the same failure again soon after a restart; which spare
# takes which node rank's place in it ({node_rank: spare host}), and which node ranks the gang goes on without
# (min_nodes: the gang shrinks).
RestartDecision = collections.namedtuple("RestartDecision", ("refused", "reason", "signature", "replaced", "dropped"),
                                         defaults=({}, ()))
# What a node knows of the gang's spares when it decides: the hosts of the node ranks now (rank order), the spares
# ready to take a place (inventory order), this node's own rank, what a peer that has already decided the next
# attempt announced in its heartbeats: (its members, why), or None; and the fewest nodes the job may go on with
# (min_nodes; None: all of them).
SpareView = collections.namedtuple("SpareView", ("members", "ready", "rank", "announced", "min_nodes"),
                                   defaults=(None, None))


def _failed_on_its_own(parts: list[Heartbeat]) -> list[Heartbeat]:
    """The parts that failed or hung by themselves (not stopped for another node's failure), by node rank."""
    return sorted((p for p in parts if p.outcome in (JobState.FAILED, JobState.HUNG) and not p.stopped_for),
                  key=lambda p: p.rank)


def failure_signature(parts: list[Heartbeat]) -> tuple:
    """What failed, alike on every node that heard the same parts: each part that failed by itself, by node rank,
    with its outcome and exit code or signal (a hang: the outcome and the frame the ranks were in, where stacks were
    taken; a hardware fault: its reason), and its first failed rank's own exit code and place."""
    return tuple((p.rank, str(p.outcome), p.hung_in if p.outcome == JobState.HUNG else (p.signal or p.exit_code),
                  p.reason if p.hardware_fault else None, p.rank_exit, p.failed_at) for p in _failed_on_its_own(parts))


# Where a part's signature (failure_signature) holds its first failed rank's own exit code: what that node's
# supervisor read of the rank itself, unknown when the rank had ended before the supervisor's scan found it (its
# launcher reaped it first; a loaded node does this at random). Unknown on either side matches any code.
_RANK_EXIT = 4


def same_failure(earlier: tuple | None, now: tuple) -> bool:
    """Whether two attempts failed the same way (failure_signature): every field equal, but a rank's own exit code
    that one of them did not read; the part's exit code or signal, always known, must still be the same."""
    if earlier is None or len(earlier) != len(now):
        return False
    return all(len(was) == len(part) and all(
        a == b or (field == _RANK_EXIT and (a is None or b is None)) for field, (a, b) in enumerate(zip(was, part)))
        for was, part in zip(earlier, now))


def failure_cause(parts: list[Heartbeat], lost: dict | None) -> tuple[str, int | None]:
    """What a failed attempt is put down to (restart_policy.CAUSES), alike on every node: a lost node, a hardware
    fault, a hang, else a rank's failure, with the first failed part's rank exit code (its launcher's, unknown)."""
    if lost:
        return "node_lost", None
    if any(part.hardware_fault for part in parts):
        return "hardware_fault", None
    failed = _failed_on_its_own(parts)
    first = failed[0] if failed else parts[0]
    if first.outcome == JobState.HUNG:
        return "hang", None
    return "rank_exit", first.rank_exit if first.rank_exit is not None else first.exit_code


def repeated_failure(parts: list[Heartbeat], earlier: tuple | None, host_of: Callable[[int], str]) -> str | None:
    """Why a rank's failure is the script's own and not retried: the same part failed twice in a row at the same
    place (its rank's traceback's frame) with the same exit, however long the attempt ran; else None."""
    failed = _failed_on_its_own(parts)
    first = failed[0] if failed else None
    if first is None or first.outcome != JobState.FAILED or not first.failed_at or not same_failure(
            earlier, failure_signature(parts)):
        return None
    who = "node_rank %d" % first.rank if first.failed_rank is None else "rank %d" % first.failed_rank
    code = first.rank_exit if first.rank_exit is not None else first.exit_code
    return ("not restarting: %s (%s) failed twice in a row in %s with exit code %s: the script's own failure, which a "
            "restart would meet again" % (who, host_of(max(first.rank, 0)), first.failed_at, code))


def _cut_off(lost: list[int], view: SpareView) -> str | None:
    """Why this node may not replace the lost ones: it hears half the gang or less (with node 0 among the lost, when
    exactly half), so it may be the one cut off; the side that holds the majority (or node 0) carries on."""
    alive = len(view.members) - len(lost)
    if alive * 2 > len(view.members) or (alive * 2 == len(view.members) and 0 not in lost):
        return None
    return ("not restarting: this node (%s) lost contact with %s, half the gang or more; if it is the one cut off, "
            "the others carry on without it" % (view.members[view.rank], ", ".join(view.members[r] for r in lost)))


def placing(bad: list[int], view: SpareView) -> tuple[dict[int, str], tuple[int, ...]]:
    """Which spare takes each bad node rank's place (the ready spares in inventory order, to the bad ranks in rank
    order), and which bad ranks the gang goes on without when the spares run out: as many as leave min_nodes (the
    gang shrinks); ({}, ()) when it cannot go on (a gang is launched whole, or at its min_nodes, or not at all)."""
    ranks = sorted(set(bad))
    taken = dict(zip(ranks, view.ready))
    dropped = tuple(ranks[len(taken):])
    if dropped and len(view.members) - len(dropped) < (view.min_nodes or len(view.members)):
        return {}, ()
    return taken, dropped


def next_members(members: Sequence[str], replaced: dict[int, str], dropped: Sequence[int]) -> list[str]:
    """The hosts of the next attempt's node ranks: each spare at the rank it took, the ranks left out gone, the
    others renumbered in their order (the inventory's)."""
    return [replaced.get(rank, host) for rank, host in enumerate(members) if rank not in dropped]


def changes(members: Sequence[str], announced: Sequence[str]) -> tuple[dict[int, str], tuple[int, ...]]:
    """What a peer's announced members change (next_members the other way round): the spares among them take the
    places of the missing nodes in rank order, the missing nodes past them are left out."""
    missing = [rank for rank, host in enumerate(members) if host not in announced]
    coming = [host for host in announced if host not in members]
    return dict(zip(missing, coming)), tuple(missing[len(coming):])


def _replacing(parts: list[Heartbeat], lost: dict, view: SpareView | None
               ) -> tuple[dict[int, str], tuple[int, ...], str | None]:
    """The spares that take the places of the lost nodes and of those with a hardware fault, the nodes the gang goes
    on without (min_nodes), or why the gang cannot go on (cut off; not enough nodes: ({}, ()) then, for the caller
    to say what failed)."""
    members = view.members if view else []
    lost_ranks = [members.index(host) for host in lost if host in members]
    bad = lost_ranks + [p.rank for p in parts if p.hardware_fault]
    if not bad or view is None:
        return {}, (), None
    cut_off = _cut_off(lost_ranks, view) if lost_ranks else None
    return ({}, (), cut_off) if cut_off else (*placing(bad, view), None)


def _left_out(view: SpareView | None, replaced: dict[int, str], dropped: Sequence[int],
              why: str) -> RestartDecision | None:
    """This node's own end where the gang goes on without it (a spare took its place, or it is left out)."""
    if view is None or (view.rank not in replaced and view.rank not in dropped):
        return None
    instead = ("%s took this node's place" % replaced[view.rank] if view.rank in replaced
               else "the gang goes on without this node")
    said = "not restarting: %s (%s, node_rank %d): %s" % (instead, view.members[view.rank], view.rank, why)
    return RestartDecision(said, why, ())


def _follow(parts: list[Heartbeat], view: SpareView) -> RestartDecision:
    """A peer decided the next attempt first (it heard a loss sooner; view.announced): its members are taken as they
    are, so that the gang stays one, unless they leave this node out (it was replaced or left out, by the side that
    carried on)."""
    members, why = view.announced
    replaced, dropped = changes(view.members, members)
    return _left_out(view, replaced, dropped, why) or RestartDecision(None, why, failure_signature(parts), replaced,
                                                                      dropped)


def _going_on(replaced: dict[int, str], dropped: Sequence[int], view: SpareView | None) -> str:
    """'spare0 takes node_rank 1; the gang goes on without node2 (node_rank 2) on 2 nodes (min_nodes=2)'."""
    said = ["%s takes node_rank %d" % (spare, rank) for rank, spare in sorted(replaced.items())]
    if dropped and view is not None:
        said.append("the gang goes on without %s on %d nodes (min_nodes=%d)" % (
            ", ".join("%s (node_rank %d)" % (view.members[rank], rank) for rank in dropped),
            len(view.members) - len(dropped), view.min_nodes or len(view.members)))
    return "; ".join(said)


def restart_decision(parts: list[Heartbeat], host_of: Callable[[int], str], earlier: tuple | None, ran_s: float,
                     min_progress_s: float, lost: dict | None = None, spares: SpareView | None = None,
                     restart_on: Sequence[str] = DEFAULT_RESTART_ON) -> RestartDecision:
    """Whether a failed attempt is launched again (restarts remaining), and with which spares: not when its cause
    is not among restart_on (failure_cause), nor when a rank failed twice in a row at the same place
    (repeated_failure); a lost node (lost: {host: when last heard}) or one with a hardware fault is replaced by a
    ready spare at its node rank, or left out while min_nodes remain (placing); else the gang is not launched again
    (a hardware fault would meet the same GPU again); nor when it failed the same way as the attempt before within
    min_progress_s of its start. A node the gang goes on without ends (_left_out). With why it failed, for the
    restart's GPUFLEET_RESTART_REASON, the log and the report."""
    if spares is not None and spares.announced:
        return _follow(parts, spares)
    refused = refused_by_policy(restart_on, *failure_cause(parts, lost)) or repeated_failure(parts, earlier, host_of)
    if refused:
        return RestartDecision(refused, refused, failure_signature(parts))
    replaced, dropped, cut_off = _replacing(parts, lost or {}, spares)
    if cut_off:
        return RestartDecision(cut_off, "%s lost" % ", ".join(sorted(lost or {})), ())
    going_on = _going_on(replaced, dropped, spares)
    if lost:
        said = ", ".join(sorted(lost))
        if going_on:
            why = "%s lost; %s" % (said, going_on)
            return _left_out(spares, replaced, dropped, why) or RestartDecision(None, why, (), replaced, dropped)
        return RestartDecision("not restarting: %s lost, and no spare node is available to take %s place%s"
                               % (said, "its" if len(lost) == 1 else "their", _too_few(spares, len(lost))),
                               "%s lost" % said, ())
    failed = _failed_on_its_own(parts)
    first = failed[0] if failed else parts[0]
    rank = max(first.rank, 0)
    reason = str(first.reason) if first.outcome == JobState.HUNG else describe(host_of(rank), rank, first)
    signature = failure_signature(parts)
    refused = None if going_on else no_restart_for(parts)
    if refused is None and same_failure(earlier, signature) and ran_s < min_progress_s:
        refused = ("not restarting: the same failure twice within %g s of a restart (min_progress_s): %s"
                   % (min_progress_s, reason))
    why = "%s; %s" % (reason, going_on) if going_on else reason
    if refused:
        return RestartDecision(refused, why, signature)
    return _left_out(spares, replaced, dropped, why) or RestartDecision(None, why, signature, replaced, dropped)


def _too_few(view: SpareView | None, bad: int) -> str:
    """', and the 2 nodes left would be fewer than min_nodes=3', where the job may shrink at all."""
    if view is None or view.min_nodes is None:
        return ""
    left = len(view.members) - bad
    return ", and the %d node%s left would be fewer than min_nodes=%d" % (left, "" if left == 1 else "s", view.min_nodes)


def stacks_read(gang: Gang | LoneNode, attempt: int) -> bool:
    """Whether every peer has read its ranks' stacks on a hang (its heartbeat says so), or has ended, or is lost:
    only then may this node stop its own ranks (rank_stacks.py)."""
    if not isinstance(gang, Gang):
        return True
    lost = gang.lost()
    news = {rank: gang.news.get(rank) for rank in gang.peers()}
    return all(rank in lost or (said is not None and said.stacks_taken) or peer_done(said, attempt)
               for rank, said in news.items())


def attempt_verdict(parts: list[Heartbeat], stop_requested: bool) -> str:
    """How an attempt ended for the gang, from every node's part: 'succeeded' (every part succeeded), 'stopped'
    (stopped by a user: no restart) or 'failed' (a part failed or the job hung: a restart may help)."""
    if all(part.outcome == JobState.SUCCEEDED for part in parts):
        return JobState.SUCCEEDED
    if stop_requested or any(part.outcome == JobState.STOPPED and not part.stopped_for for part in parts):
        return JobState.STOPPED
    return JobState.FAILED
