# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Free TCP ports of torchrun's range on this node: picked by the probe (node_probe, through node.py) for a launch
over SSH, and by the shipped supervisor (``supervisor.py --pick-ports N``) when Slurm starts a job. Part of the
supervisor as shipped (supervisor_bundle.py): standard library only, Python 3.8+."""

from __future__ import annotations

import errno
import random
import socket
from collections.abc import Callable, Iterable

PORT_RANGE = (29500, 29999)


def port_in_use(port: int, host: str = "") -> bool:
    """True when port cannot be had on host (all addresses by default): a TCP listener could not bind it (torchrun's
    rendezvous store), or a UDP socket could not (the gang's heartbeats use the same number: gang.py). A job of this
    node that has started holds its master port over UDP before its TCP store is up, so the UDP test is what keeps a
    second job launched meanwhile off that port."""
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as sock:
            if kind == socket.SOCK_STREAM:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError as exc:
                if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                    return True
                raise
    return False


def pick_free_port(
    candidates: Iterable[int] | None = None,
    in_use: Callable[[int], bool] = port_in_use,
    rng: random.Random | None = None,
    prefer: Iterable[int] = (),
) -> int:
    """A port of the torchrun range (or of candidates) that nothing listens on, tried in random order; the free
    ones of prefer first (the ports the port check remembers a pass on: port_memory.py), also in random order.

    Random order keeps two jobs launched at the same moment from picking the
    same port before either has bound it.
    """
    ports = list(candidates if candidates is not None else range(PORT_RANGE[0], PORT_RANGE[1] + 1))
    first = [port for port in prefer if port in ports]
    rng = rng or random.Random()
    rng.shuffle(ports)
    rng.shuffle(first)
    for port in first + ports:
        if not in_use(port):
            return port
    raise RuntimeError("no free TCP port in %d-%d" % (min(ports), max(ports)) if ports else "no candidate ports")


def pick_free_ports(
    count: int,
    exclude: Iterable[int | None] = (),
    in_use: Callable[[int], bool] = port_in_use,
    rng: random.Random | None = None,
) -> list[int]:
    """count different free ports of the torchrun range, none of them in exclude."""
    picked: list[int] = []
    skip = {port for port in exclude if port is not None}
    for _index in range(count):
        candidates = [p for p in range(PORT_RANGE[0], PORT_RANGE[1] + 1) if p not in skip and p not in picked]
        picked.append(pick_free_port(candidates, in_use, rng))
    return picked


def pick_ports_main(count: str, out: Callable[[str], object], err: Callable[[str], object]) -> int:
    """``supervisor.py --pick-ports N``: N free ports on this node, comma-separated (Slurm's task script asks)."""
    try:
        picked = pick_free_ports(int(count))
    except RuntimeError as exc:
        err("gpufleet supervisor: %s\n" % exc)
        return 1
    out(",".join(str(port) for port in picked) + "\n")
    return 0
