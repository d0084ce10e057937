# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether the job's ports reach every node before launch: the rendezvous (TCP, on the master) and the supervisors'
heartbeats (UDP, on every node), both on the master port's number.

Three steps, each one task of train.yml's preflight, on every node at once:
  1. ``listen``: bind the UDP port (and on the master the TCP port), answer every probe with an ack, accept TCP
     connections; runs in the background until told to quit (or its lifetime ends).
  2. ``probe``: send a ping to every other node's UDP port until each acks, and connect to the master's TCP port,
     for at most a few seconds; report who did not answer.
  3. ``quit``: tell this node's listener to end (a quit file and a datagram), and wait until it has, so that the
     launch finds the port free.
The datagrams carry a token of this launch, so a stray packet is not taken for an answer. Nothing is kept: the
controller reads the reports (plugin_utils/_control/ports.py port_problems()).
"""

from __future__ import annotations

import errno
import json
import os
import select
import socket
import struct
import tempfile
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gang import bind_own_address

try:
    from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple
except ImportError:  # pragma: no cover
    pass

MAGIC = b"gpufleet-port-check"
RESEND_S = 0.2
POLL_S = 0.1  # how often the listener looks for its quit file


def _family(address: str) -> int:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def _message(token: str, word: str, host: str = "") -> bytes:
    return b" ".join([MAGIC, token.encode(), word.encode(), host.encode()])


def _parse(data: bytes, token: str) -> "Optional[Tuple[str, str]]":
    parts = data.split(b" ")
    if len(parts) != 4 or parts[0] != MAGIC or parts[1] != token.encode():
        return None
    return parts[2].decode("ascii", "replace"), parts[3].decode("ascii", "replace")


def quit_path(host: str, port: int, token: str) -> str:
    """The file whose presence tells this node's listener to end (the datagram's second path, see quit_listener)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in "%s-%s-%d" % (token, host, port))
    return os.path.join(tempfile.gettempdir(), "gpufleet-port-check-%s.quit" % safe)


def listen(host: str, address: str, port: int, tcp: bool, token: str, lifetime_s: float,
           clock: "Callable[[], float]" = time.monotonic) -> "Dict[str, Any]":
    """Answer probes until told to quit (a datagram or the quit file of this token) or lifetime_s ends."""
    result = {"host": host, "port": port, "udp_error": "", "tcp_error": "", "heard": [], "tcp_from": [],
              "quit": False}  # type: Dict[str, Any]
    stop_file = quit_path(host, port, token)
    sockets = []  # type: List[socket.socket]
    heard, tcp_from = set(), set()
    try:
        try:
            udp = bind_own_address(socket.SOCK_DGRAM, address, port)
        except OSError as exc:
            result["udp_error"] = str(exc)
            return result
        sockets.append(udp)
        server = None
        if tcp:
            try:
                server = bind_own_address(socket.SOCK_STREAM, address, port)
                server.listen(64)
                sockets.append(server)
            except OSError as exc:
                result["tcp_error"] = str(exc)
        deadline = clock() + lifetime_s
        while clock() < deadline and not os.path.exists(stop_file):
            ready = select.select(sockets, [], [], min(POLL_S, max(deadline - clock(), 0.0)))[0]
            if server is not None and server in ready:
                connection, peer = server.accept()
                tcp_from.add(peer[0])
                # Closed with a reset, not a FIN: no TIME_WAIT on the port that the launch binds next.
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                connection.close()
            if udp in ready:
                try:
                    data, peer = udp.recvfrom(512)
                except OSError:
                    continue
                parsed = _parse(data, token)
                if parsed is None:
                    continue
                word, sender = parsed
                if word == "quit":
                    break
                if word == "ping":
                    heard.add(sender)
                    udp.sendto(_message(token, "ack", host), peer)
        result["quit"] = clock() < deadline
    finally:
        for sock in sockets:
            sock.close()
        try:
            os.remove(stop_file)
        except OSError:
            pass
    result.update(heard=sorted(heard), tcp_from=sorted(tcp_from))
    return result


class _Connector:
    """One TCP connection to the master's port, tried again while it is refused (the listener may not be up yet)."""

    def __init__(self, address: str, port: int) -> None:
        self.target = (address, port)
        self.sock = None  # type: Optional[socket.socket]
        self.error = ""
        self.done = False
        self.retry_at = 0.0

    def start(self, now: float) -> None:
        sock = socket.socket(_family(self.target[0]), socket.SOCK_STREAM)
        sock.setblocking(False)
        code = sock.connect_ex(self.target)
        if code == errno.EINPROGRESS:
            self.sock = sock
            return
        sock.close()
        self._ended(code, now)

    def finish(self, now: float) -> None:
        if self.sock is None:
            return
        code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        self.sock.close()
        self.sock = None
        self._ended(code, now)

    def _ended(self, code: int, now: float) -> None:
        if code == 0:
            self.done, self.error = True, ""
        else:  # refused, unreachable: the error stands unless a later try gets through
            self.error = "%s (%s)" % (errno.errorcode.get(code, str(code)), os.strerror(code))
            self.retry_at = now + RESEND_S

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def probe(host: str, peers: "Sequence[Tuple[str, str]]", port: int, token: str, master: "Optional[Tuple[str, str]]",
          timeout_s: float, clock: "Callable[[], float]" = time.monotonic) -> "Dict[str, Any]":
    """Ping every peer's UDP port until it acks and connect to the master's TCP port, for at most timeout_s.

    peers and master are (host, address) pairs; master is None where no TCP check is wanted (this node is the
    master, or the launcher uses no rendezvous). A port whose packets are dropped shows as no answer within
    timeout_s; one that is refused is tried again until then, as the listener may start after the probe."""
    started = clock()
    pending = dict(peers)  # host -> address, until it acks
    udp = socket.socket(socket.AF_INET6 if any(":" in a for a in pending.values()) else socket.AF_INET,
                        socket.SOCK_DGRAM)
    connector = _Connector(master[1], port) if master is not None else None
    next_send = started
    try:
        while clock() - started < timeout_s and (pending or (connector is not None and not connector.done)):
            now = clock()
            if pending and now >= next_send:
                for address in pending.values():
                    try:
                        udp.sendto(_message(token, "ping", host), (address, port))
                    except OSError:
                        pass  # no route yet: the next round tries again, the report names the peer
                next_send = now + RESEND_S
            if connector is not None and not connector.done and connector.sock is None and now >= connector.retry_at:
                connector.start(now)
            wait = max(min(next_send - clock(), timeout_s - (clock() - started), RESEND_S), 0.01)
            writing = [connector.sock] if connector is not None and connector.sock is not None else []
            readable, writable = select.select([udp], writing, [], wait)[:2]
            if readable:
                try:
                    data, _peer = udp.recvfrom(512)
                except OSError:
                    data = b""
                parsed = _parse(data, token)
                if parsed is not None and parsed[0] == "ack":
                    pending.pop(parsed[1], None)
            if writable and connector is not None:
                connector.finish(clock())
        tcp_error = ""
        if connector is not None and not connector.done:
            tcp_error = connector.error or "no answer within %g s (the packets are dropped)" % timeout_s
    finally:
        udp.close()
        if connector is not None:
            connector.close()
    return {"host": host, "port": port, "udp_unanswered": sorted(pending), "tcp_error": tcp_error,
            "tcp_checked": master is not None, "seconds": round(clock() - started, 3)}


def read_async_result(path: str, wait_s: float, clock: "Callable[[], float]" = time.monotonic) -> "Dict[str, Any]":
    """The listener's report from the results file of its async job, once written (then the file is removed, as
    async_status's cleanup would); {} when it is not there within wait_s."""
    deadline = clock() + wait_s
    while True:
        try:
            with open(path) as handle:
                data = json.load(handle)
        except (OSError, ValueError):
            data = None
        if isinstance(data, dict) and "started" not in data:  # async_wrapper writes the module's result last
            try:
                os.remove(path)
            except OSError:
                pass
            return data
        if clock() >= deadline:
            return {}
        time.sleep(0.02)


def quit_listener(host: str, address: str, port: int, token: str, wait_s: float = 2.0,
                  clock: "Callable[[], float]" = time.monotonic, results_file: str = "") -> "Dict[str, Any]":
    """Tell this node's listener to end, wait until it has (the port is free again), and read its report from
    results_file (the async job's) when given: one round trip instead of a quit and an async_status poll.

    Two paths, so that a firewall that drops the port on every interface does not keep the listener (and the port)
    for its whole lifetime: the quit file, then a datagram to the listener's own address. The listener removes the
    file as it ends; a file still there after wait_s means no listener was running, and it is removed here."""
    stop_file = quit_path(host, port, token)
    with open(stop_file, "w"):
        pass
    sock = socket.socket(_family(address), socket.SOCK_DGRAM)
    try:
        try:
            sock.bind((address, 0))
            target = address
        except OSError:
            # Not one of this node's addresses (NAT): the listener is bound on all of them, loopback among them.
            target = "::1" if ":" in address else "127.0.0.1"
        for _attempt in range(3):
            try:
                sock.sendto(_message(token, "quit"), (target, port))
            except OSError:
                break
    finally:
        sock.close()
    deadline = clock() + wait_s
    while clock() < deadline and os.path.exists(stop_file):
        time.sleep(0.02)
    ended = not os.path.exists(stop_file)
    if not ended:
        try:
            os.remove(stop_file)
        except OSError:
            pass
    result = {"listener_ended": ended}  # type: Dict[str, Any]
    if results_file:
        result["listener"] = read_async_result(results_file, wait_s if ended else 0.0, clock)
    return result
