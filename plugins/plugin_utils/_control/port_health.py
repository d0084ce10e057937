# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The network ports' health: what a node's InfiniBand/RoCE ports in use mean for a launch, in one place, beside the
GPU gate (gpu_gate.py, whose Finding it returns).

The facts are the probe's (node_probe's ``ib_ports``): every HCA port as the one reader of /sys/class/infiniband
gives it (module_utils/_node/netinfo.py), the node's NCCL_IB_HCA (the ports nccl_env chose, or the inventory's),
and the error counters the node remembers from the last launch's probe (module_utils/_job/ib_counters.py).

- A port in use whose state is not ACTIVE or whose physical state is not LinkUp refuses: NCCL would fail on it, or
  hang until its timeout. The kernel writes them as "4: ACTIVE" and "5: LinkUp" (drivers/infiniband/core/sysfs.c,
  state_show and phys_state_show); the number is what is compared. A port NCCL_IB_HCA names that the node does not
  have warns: NCCL leaves it out.
- A port trained at a lower rate than the node's other ports in use of its link layer, or than
  gpufleet_ib_rate_gbps where the inventory sets it, warns: a link with failed lanes trains at a lower width (a 4X
  link at 1X), a bad cable or transceiver at a lower speed (NHC's check_hw_ib compares the rate the same way).
- An error counter that rose since the last reading warns, naming the counter, by how much and since when (the
  counters, the InfiniBand Architecture Specification's PortCounters, vol. 1, 16.1.3.5). A counter lower than
  before was reset (a reboot, a driver reload, perfquery -R): nothing is said.

Without NCCL_IB_HCA, NCCL takes every port that is up: those are judged, a port that is down is not in use.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control.gpu_gate import Finding

ACTIVE = "4"
LINK_UP = "5"
RATE_VARIABLE = "gpufleet_ib_rate_gbps"

# What each watched counter counts (IBA vol. 1, 16.1.3.5, PortCounters), as the warning says it.
COUNTER_MEANINGS = {
    "symbol_error": "symbol errors (bits received wrong on the link's lanes)",
    "link_error_recovery": "link error recoveries (the link retrained)",
    "link_downed": "link downs (error recovery failed and the link went down)",
    "port_rcv_errors": "packets received with errors",
    "local_link_integrity_errors": "local link integrity errors (physical errors over their threshold)",
    "excessive_buffer_overrun_errors": "excessive buffer overruns",
}


def _number(state: str) -> str:
    """The number of a state as the kernel writes it ("4: ACTIVE" -> "4"); '' when unread."""
    return state.split(":", 1)[0].strip()


def _entries(ib_hca: str) -> tuple[bool, bool, list[tuple[str, int | None]]]:
    """NCCL_IB_HCA as NCCL reads it (NCCL's environment variables, NCCL_IB_HCA): a leading '^' leaves the list out
    instead of taking it, then a leading '=' makes the names exact instead of prefixes; each entry name[:port]."""
    text = ib_hca.strip()
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    entries: list[tuple[str, int | None]] = []
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, _colon, port = entry.partition(":")
        entries.append((name, int(port) if port.isdigit() else None))
    return exclude, exact, entries


def _named(entries: list[tuple[str, int | None]], exact: bool, hca: str, port: int) -> bool:
    return any((hca == name if exact else hca.startswith(name)) and (wanted is None or wanted == port)
               for name, wanted in entries)


def ports_in_use(hcas: list[Mapping[str, Any]], ib_hca: str | None) -> tuple[list[tuple[str, Mapping[str, Any]]], list[str]]:
    """The ports NCCL takes on this node, as (HCA, port) pairs, and the exact entries of NCCL_IB_HCA the node does not
    have ('mlx5_7:1')."""
    ports = [(str(hca["name"]), port) for hca in hcas for port in hca.get("ports") or []]
    if not ib_hca:
        return [(hca, port) for hca, port in ports if _number(str(port.get("state") or "")) == ACTIVE], []
    exclude, exact, entries = _entries(ib_hca)
    if exclude:
        return [(hca, port) for hca, port in ports if not _named(entries, exact, hca, int(port["port"]))], []
    taken = [(hca, port) for hca, port in ports if _named(entries, exact, hca, int(port["port"]))]
    missing = ["%s%s" % (name, "" if wanted is None else ":%d" % wanted) for name, wanted in entries
               if exact and not any(_named([(name, wanted)], True, hca, int(port["port"])) for hca, port in ports)]
    return taken, missing


def _label(hca: str, port: Mapping[str, Any]) -> str:
    return "%s port %d" % (hca, int(port["port"]))


def _down(hca: str, port: Mapping[str, Any], ib_hca: str | None) -> Finding | None:
    state, phys = str(port.get("state") or ""), str(port.get("phys_state") or "")
    if _number(state) == ACTIVE and _number(phys) in (LINK_UP, ""):
        return None
    why = "its state is %s" % (state or "unreadable")
    if phys:
        why += ", its physical state %s" % phys
    named = ("NCCL_IB_HCA=%s names it" % ib_hca) if ib_hca else "NCCL would take it"
    return Finding(True, _label(hca, port), "%s (%s): NCCL would fail or hang on it" % ("the link is not up", why),
                   "%s: check its cable and the switch port at its other end (ibstat %s %d), or run provision.yml "
                   "--tags nccl_env so that NCCL_IB_HCA names the ports that are up"
                   % (named, hca, int(port["port"])))


def _slow(hca: str, port: Mapping[str, Any], best: Mapping[str, float], expected: float | None) -> Finding | None:
    link = port.get("link") or {}
    rate = link.get("rate_gbps")
    if rate is None:
        return None
    said = "%s" % port.get("rate")
    reference = best.get(str(port.get("link_layer") or ""))
    if reference is not None and rate < reference:
        compared = "the node's other ports in use run at %g Gb/sec" % reference
    elif expected is not None and rate < expected:
        compared = "%s is %g" % (RATE_VARIABLE, expected)
    else:
        return None
    return Finding(False, _label(hca, port), "the link trained at %s, %s: a degraded link (lanes down, a bad cable or "
                   "transceiver) slows every collective of the job" % (said, compared),
                   "reseat or replace the cable or transceiver, then check the rate (cat /sys/class/infiniband/%s/"
                   "ports/%d/rate)" % (hca, int(port["port"])), hardware=True)


def _utc(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _rising(hca: str, port: Mapping[str, Any], before: Mapping[str, Any] | None) -> list[Finding]:
    if not before:
        return []
    old = (before.get("errors") or {}).get("%s:%d" % (hca, int(port["port"]))) or {}
    found = []
    for name, meaning in COUNTER_MEANINGS.items():
        now, then = (port.get("errors") or {}).get(name), old.get(name)
        if isinstance(now, int) and isinstance(then, int) and now > then:
            found.append(Finding(False, _label(hca, port), "%s rose by %d since %s (%d to %d): %s"
                                 % (name, now - then, _utc(float(before["at"])), then, now, meaning),
                                 "watch it (a counter that keeps rising is a failing link: reseat or replace its "
                                 "cable or transceiver)", hardware=True))
    return found


def findings(ib_ports: Mapping[str, Any], expected_gbps: Any = None) -> list[Finding]:
    """What the node's ports in use mean for a launch: refusals (a port down) and warnings (a port NCCL_IB_HCA names
    that the node does not have, a degraded rate, error counters that rose since the last reading). expected_gbps is
    gpufleet_ib_rate_gbps as a number (None where unset; node_findings reads the inventory's value)."""
    hcas = list(ib_ports.get("hcas") or [])
    ib_hca = ib_ports.get("ib_hca") or None
    used, missing = ports_in_use(hcas, ib_hca)
    # NCCL does not fail on a name it does not find: it leaves it out ("NET/IB : No device found" where none is left,
    # then TCP sockets), so the job runs, slower: a warning.
    found = [Finding(False, entry, "NCCL_IB_HCA=%s names it, and the node has no such port: NCCL leaves it out, and "
                     "falls back to TCP sockets where no port is left" % ib_hca,
                     "correct NCCL_IB_HCA (nccl_env_ib_hca), or run provision.yml --tags nccl_env to have the ports "
                     "that are up found") for entry in missing]
    judged = [(hca, port, _down(hca, port, ib_hca)) for hca, port in used]
    best: dict[str, float] = {}
    for _hca, port, down in judged:
        rate = (port.get("link") or {}).get("rate_gbps")
        if down is None and rate is not None:
            layer = str(port.get("link_layer") or "")
            best[layer] = max(best.get(layer, 0.0), float(rate))
    expected = float(expected_gbps) if expected_gbps not in (None, "") else None
    for hca, port, down in judged:
        if down is not None:
            found.append(down)
            continue
        slow = _slow(hca, port, best, expected)
        found += ([slow] if slow else []) + _rising(hca, port, ib_ports.get("before"))
    return found


def node_findings(ib_ports: Mapping[str, Any], rate_value: Any) -> list[Finding]:
    """findings() for one node, with its gpufleet_ib_rate_gbps as the inventory gives it: a value that is not a rate
    is the node's refusal (Finding.message names the host), for the launch's gate and verify.yml alike."""
    rate, wrong = _rate(rate_value)
    if wrong:
        return [Finding(True, "", wrong, "correct it in the inventory", hardware=False)]
    return findings(ib_ports, rate)


def _rate(value: Any) -> tuple[float | None, str]:
    """gpufleet_ib_rate_gbps as a number of Gb/sec (None where unset), or what is wrong with it."""
    if value in (None, ""):
        return None, ""
    try:
        rate = float(value)
    except (TypeError, ValueError):
        return None, "%s=%r is not a number of Gb/sec (e.g. 400 for NDR 4X)" % (RATE_VARIABLE, value)
    if rate <= 0:
        return None, "%s=%r must be more than 0" % (RATE_VARIABLE, value)
    return rate, ""
