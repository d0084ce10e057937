# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gang: the nodes of a job watching each other with signed UDP heartbeats (the message format, who was heard
when, who is lost); what a peer's news means for this node is gang_rules.py's. Shipped to the nodes as part of the supervisor;
standard library only, Python 3.8+."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import hmac
import json
import select
import socket
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.heartbeat import Heartbeat
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import Defaults, HeartbeatPhase


def bind_own_address(kind: int, address: str, port: int) -> socket.socket:
    """A socket of kind (UDP, TCP) bound to port at this node's address as the controller knows it; where that is
    not one of this node's own (NAT, a jump host), on every address. The one bind of the gang and of the port check
    before launch (port_check.py), so that the check tests what the gang will use."""
    sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, kind)
    if kind == socket.SOCK_STREAM:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((address, port))
    except OSError as exc:
        if exc.errno != errno.EADDRNOTAVAIL:
            sock.close()
            raise
        sock.bind(("::" if ":" in address else "0.0.0.0", port))
    return sock


def sign(key: bytes, message: dict) -> bytes:
    """The datagram for message: its canonical JSON and an HMAC-SHA256 of it under the run's key."""
    body = json.dumps(message, sort_keys=True, separators=(",", ":")).encode()
    return body + b"\n" + hmac.new(key, body, hashlib.sha256).hexdigest().encode()


def verify(key: bytes, datagram: bytes) -> dict | None:
    """The message of an authentic datagram, or None (forged, damaged or not ours)."""
    body, _sep, mac = datagram.rpartition(b"\n")
    if not body or not hmac.compare_digest(hmac.new(key, body, hashlib.sha256).hexdigest().encode(), mac):
        return None
    try:
        message = json.loads(body)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


class Gang:
    """This node's view of the other nodes of the run, kept by heartbeats over UDP.

    ``nodes`` is the job's (host, address) list in rank order; every
    supervisor listens on ``port`` (UDP) at its own address. Times are this
    node's monotonic clock: a peer's silence is measured from when its last
    heartbeat arrived here, and the log silence it reports is a duration, so
    clocks need not agree.
    """

    def __init__(self, spec: dict, key: bytes, clock=time.monotonic) -> None:
        self.rank = int(spec["node_rank"])
        self.run_id = str(spec["run_id"])
        self.nodes = [(str(host), str(address)) for host, address in spec["nodes"]]
        self.port = int(spec["master_port"])  # UDP; the rendezvous uses TCP on the same number
        self.key = key
        self.clock = clock
        self.heartbeat_s = float(spec.get("heartbeat_s", Defaults.HEARTBEAT_S))
        self.lost_after_s = self.heartbeat_s * int(spec.get("heartbeat_misses", Defaults.HEARTBEAT_MISSES))
        self.join_timeout_s = float(spec.get("join_timeout_s", Defaults.JOIN_TIMEOUT_S))
        self.started = clock()
        self.heard: dict[int, float] = {}
        self.news: dict[int, Heartbeat] = {}
        # Each peer's last news of each attempt: a peer that has moved on to the next attempt has overwritten its news
        # of the one this node is still ending (news_of).
        self.attempt_news: dict[tuple[int, int], Heartbeat] = {}
        # Per peer, the least (this node's wall clock on arrival - the peer's on sending) over its heartbeats: how far
        # the peer's clock is behind this node's, plus the shortest trip (the events' timeline aligns by it).
        self.offsets: dict[int, float] = {}
        # The spare nodes (host, address), in inventory order: they hear every heartbeat, and a spare's own say it is
        # ready (spares.py). A spare's node_rank before it takes a node's place is len(nodes) + its index.
        self.spares = [(str(host), str(address)) for host, address in spec.get("spares") or []]
        self.spare_heard: dict[str, float] = {}
        self.spare_news: dict[str, Heartbeat] = {}
        self.joined: dict[int, float] = {}  # when a spare took each replaced rank: its join is counted from then
        # Whether the members may change between attempts (spares; min_nodes below the node count): the heartbeats
        # then carry them, so that a node that decided later follows the one that decided first (spares.announced).
        self.elastic = bool(self.spares) or bool(spec.get("min_nodes"))
        self.me = (self.nodes + self.spares)[self.rank]
        self.sock = bind_own_address(socket.SOCK_DGRAM, self.me[1], self.port)

    def peers(self) -> list[int]:
        return [rank for rank in range(len(self.nodes)) if rank != self.rank]

    def host(self, rank: int) -> str:
        return self.nodes[rank][0]

    def members(self) -> list[str]:
        """The hosts of the job's node ranks now, in rank order (a spare in the place of a node it replaced)."""
        return [host for host, _address in self.nodes]

    def send(self, beat: Heartbeat) -> None:
        beat = dataclasses.replace(beat, run=self.run_id, rank=self.rank, host=self.me[0], sent_at=time.time(),
                                   members=tuple(self.members()) if self.elastic else None)
        datagram = sign(self.key, beat.to_wire())
        for address in [self.nodes[rank][1] for rank in self.peers()] + [
                address for host, address in self.spares if host != self.me[0] and host not in self.members()]:
            try:
                self.sock.sendto(datagram, (address, self.port))
            except OSError:
                pass  # unreachable just now: its silence is what the others will notice

    def reshape(self, members: list[str]) -> None:
        """The gang from the next attempt: members (hosts, in node rank order) are the nodes that stay, renumbered,
        and spares in the places of nodes they replaced. What was heard of each staying node is kept under its new
        rank; a newcomer's join is counted from now; a node left out is not heard any more."""
        addresses = dict(self.nodes + self.spares)
        old = {host: rank for rank, host in enumerate(self.members())}
        moved = {old[host]: rank for rank, host in enumerate(members) if host in old}
        for known in (self.heard, self.news, self.offsets, self.joined):
            kept = {moved[rank]: value for rank, value in known.items() if rank in moved}
            known.clear()
            known.update(kept)
        self.attempt_news = {(moved[rank], attempt): news for (rank, attempt), news in self.attempt_news.items()
                             if rank in moved}
        now = self.clock()
        for rank, host in enumerate(members):
            if host not in old:
                self.joined[rank] = now
        self.nodes = [(host, addresses[host]) for host in members]
        self.rank = members.index(self.me[0])

    def ready_spares(self) -> list[str]:
        """The spares that can take a node's place now, in inventory order: heard within lost_after_s, in standby,
        and not a member already."""
        now = self.clock()
        return [host for host, _address in self.spares if host not in self.members()
                and now - self.spare_heard.get(host, float("-inf")) <= self.lost_after_s
                and host in self.spare_news and self.spare_news[host].phase == HeartbeatPhase.STANDBY]

    def receive(self, timeout_s: float, extra: dict | None = None, on_extra=None) -> None:
        """Take in every heartbeat that arrives within timeout_s; call on_extra(extra[fd]) for ready extra fds."""
        deadline = self.clock() + timeout_s
        extra = dict(extra or {})
        while True:
            left = deadline - self.clock()
            ready, _w, _x = select.select([self.sock] + list(extra), [], [], max(0.0, left))
            if not ready:
                return
            for fd in [fd for fd in ready if fd in extra]:
                on_extra(extra.pop(fd))
            if self.sock not in ready:
                continue
            try:
                datagram, _addr = self.sock.recvfrom(65536)
            except OSError:
                return
            message = verify(self.key, datagram)
            beat = Heartbeat.from_wire(message) if message else None
            if beat and beat.run == self.run_id:
                self._take(beat)

    def _take(self, beat: Heartbeat) -> None:
        """Note an authentic heartbeat of this run: a member's (by rank, from the host that holds that rank now; a
        node a spare replaced is not heard any more) or a spare's."""
        # By host, where it says: a peer that renumbered for the next attempt before this node (reshape) is still
        # the same peer here.
        members = self.members()
        rank, host = (members.index(beat.host) if beat.host in members else -1) if beat.host else beat.rank, beat.host
        if rank in self.peers():
            self.heard[rank] = self.clock()
            self.news[rank] = beat
            self.attempt_news[(rank, beat.attempt)] = beat
            if beat.sent_at is not None:
                offset = time.time() - beat.sent_at
                self.offsets[rank] = min(offset, self.offsets.get(rank, offset))
        elif host in dict(self.spares) and host not in self.members():
            self.spare_heard[host] = self.clock()
            self.spare_news[host] = beat

    def news_of(self, rank: int, attempt: int) -> Heartbeat | None:
        """Peer rank's last news of attempt (its part of it as it last told), or None if none arrived here."""
        return self.attempt_news.get((rank, attempt))

    def lost(self) -> list[int]:
        """The peers that have stopped answering (or never answered within the join timeout)."""
        now = self.clock()
        found = []
        for rank in self.peers():
            if rank in self.news and self.news[rank].final:
                continue  # it has ended for good and said so
            heard = self.heard.get(rank)
            if heard is None:
                if now - self.joined.get(rank, self.started) > self.join_timeout_s:
                    found.append(rank)
            elif now - heard > self.lost_after_s:
                found.append(rank)
        return found

    def never_heard(self, ranks: list[int]) -> list[int]:
        """Those of ranks whose heartbeat never arrived here."""
        return [rank for rank in ranks if rank not in self.heard]

    def waited_s(self) -> float:
        """How long this node has been in the gang (listening for its peers)."""
        return self.clock() - self.started

    def silent_s(self, rank: int) -> float:
        """How long since peer rank's last heartbeat arrived here (since the join if it never did)."""
        return self.clock() - self.heard.get(rank, self.joined.get(rank, self.started))

    def last_heard_wall(self, rank: int) -> float:
        """When peer rank was last heard, as wall-clock time (its join started this node's wait if never)."""
        heard = self.heard.get(rank, self.started)
        return time.time() - (self.clock() - heard)

    def as_heard(self) -> dict[str, dict[str, float]]:
        """For the final state.json: how far each peer's clock is behind this node's (plus the shortest trip), from
        the heartbeats; and when each peer was last heard (wall clock): a peer whose supervisor vanished failed
        about then, and the report orders it by this even when this node ended before counting it lost."""
        return {"clock_offsets": {self.host(rank): round(offset, 4) for rank, offset in self.offsets.items()},
                "peers_last_heard": {self.host(rank): round(self.last_heard_wall(rank), 3)
                                     for rank in self.peers() if rank in self.heard}}

    def silence_s(self, rank: int, attempt: int) -> float | None:
        """How long peer rank's log has been silent in this attempt, as of now, from its last heartbeat; None if
        unknown (or its news is of another attempt)."""
        news, heard = self.news.get(rank), self.heard.get(rank)
        if news is None or heard is None or news.silent_s is None or news.attempt != attempt:
            return None
        return news.silent_s + (self.clock() - heard)

    def close(self) -> None:
        self.sock.close()


class LoneNode:
    """The gang of a job with one node, or whose nodes do not watch each other: no one to tell or to hear, so the
    supervisor's loop reads the same with one node as with many (its peers are none)."""

    heartbeat_s = Defaults.HEARTBEAT_S
    lost_after_s = 0.0

    def __init__(self) -> None:
        self.news: dict[int, Heartbeat] = {}
        self.heard: dict[int, float] = {}
        self.offsets: dict[int, float] = {}

    def peers(self) -> list[int]:
        return []

    def host(self, rank: int) -> str:
        raise KeyError("a lone node has no peer %d" % rank)

    def send(self, beat: Heartbeat) -> None:
        pass

    def receive(self, timeout_s: float, extra: dict | None = None, on_extra=None) -> None:
        """Wait timeout_s; call on_extra(extra[fd]) for ready extra fds (a run's processes that ended)."""
        extra = dict(extra or {})
        ready, _w, _x = select.select(list(extra), [], [], timeout_s)
        for fd in ready:
            on_extra(extra[fd])

    def news_of(self, rank: int, attempt: int) -> Heartbeat | None:
        return None

    def lost(self) -> list[int]:
        return []

    def last_heard_wall(self, rank: int) -> float:
        raise KeyError("a lone node has no peer %d" % rank)

    def as_heard(self) -> dict[str, dict[str, float]]:
        return {"clock_offsets": {}, "peers_last_heard": {}}

    def silence_s(self, rank: int, attempt: int) -> float | None:
        return None

    def close(self) -> None:
        pass


def lost_at(gang: Gang | LoneNode, ranks: list[int], known: dict | None) -> dict:
    """known ({host: when last heard}), with when each of ranks was last heard (wall clock) where not known yet: the
    report orders failures by it."""
    lost = dict(known or {})
    for rank in ranks:
        lost.setdefault(gang.host(rank), round(gang.last_heard_wall(rank), 3))
    return lost
