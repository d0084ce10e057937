# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which network interface holds an address, and the node's InfiniBand HCAs. Reads `ip -j addr` and /sys; a node
without iproute2 (a minimal image) is read through the kernel instead: SIOCGIFADDR and /proc/net/if_inet6."""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import re
import socket
import struct
import subprocess
from collections.abc import Callable, Iterable

from ansible_collections.gpufleet.cluster.plugins.module_utils._node import sysfs


SIOCGIFADDR = 0x8915


def interfaces(run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
               proc_root: str = "/proc") -> dict[str, list[str]]:
    """Interface name -> its IP addresses, from `ip -j addr show`, or from the kernel where `ip` is not installed."""
    try:
        done = run(["ip", "-j", "addr", "show"], capture_output=True, text=True, check=True)
    except FileNotFoundError:
        return kernel_interfaces(proc_root)
    found: dict[str, list[str]] = {}
    for link in json.loads(done.stdout or "[]"):
        found[link["ifname"]] = [info["local"] for info in link.get("addr_info", []) if "local" in info]
    return found


def _ipv4_of(name: str) -> str | None:
    """The interface's (primary) IPv4 address through the SIOCGIFADDR ioctl, or None when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            answer = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(answer[20:24])


def kernel_interfaces(proc_root: str = "/proc", ipv4_of: Callable[[str], str | None] = _ipv4_of,
                      names: Callable[[], list[tuple[int, str]]] = socket.if_nameindex) -> dict[str, list[str]]:
    """Interface name -> its addresses without iproute2: each interface's primary IPv4 address (an interface's
    secondary IPv4 addresses are not seen this way) and every IPv6 address in /proc/net/if_inet6."""
    ipv6: dict[str, list[str]] = {}
    try:
        with open(os.path.join(proc_root, "net", "if_inet6")) as handle:
            for line in handle:
                fields = line.split()
                if len(fields) >= 6:
                    ipv6.setdefault(fields[5], []).append(str(ipaddress.IPv6Address(bytes.fromhex(fields[0]))))
    except OSError:
        pass
    found: dict[str, list[str]] = {}
    for name in [entry[1] for entry in names()] + list(ipv6):
        if name not in found:
            ipv4 = ipv4_of(name)
            found[name] = ([ipv4] if ipv4 else []) + ipv6.get(name, [])
    return found


def interface_of(address: str, addresses: dict[str, list[str]]) -> str | None:
    """The interface that holds address (an IP literal), or None. An IPv4 loopback address is held by the interface
    that holds 127.0.0.1 (or any of 127.0.0.0/8), as the kernel routes the whole block to it: the embedded demo
    inventory's second node is 127.0.0.2."""
    wanted = ipaddress.ip_address(address)
    for name, held in addresses.items():
        if any(ipaddress.ip_address(ip) == wanted for ip in held):
            return name
    if wanted.version == 4 and wanted.is_loopback:
        for name, held in addresses.items():
            if any(ipaddress.ip_address(ip).version == 4 and ipaddress.ip_address(ip).is_loopback for ip in held):
                return name
    return None


# The port's error counters worth watching (the PortCounters the kernel shows under ports/N/counters; what each
# means: the InfiniBand Architecture Specification, vol. 1, 16.1.3.5, as NHC and gpud read them too). Each reads
# "%u", or "N/A (no PMA)" where the device answers no performance query (drivers/infiniband/core/sysfs.c,
# show_pma_counter): that is None here, as a missing file is.
ERROR_COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
                  "local_link_integrity_errors", "excessive_buffer_overrun_errors")
# ports/N/rate as the kernel writes it (sysfs.c, rate_show): "%d%s Gb/sec (%dX%s)", the rate in Gb/sec (".5" for
# half), the active width and the speed's name (" EDR", " HDR", " NDR"...; none for SDR): "200 Gb/sec (4X HDR)".
RATE_RE = re.compile(r"^(\d+(?:\.5)?) Gb/sec \((\d+)X ?([A-Z0-9]*)\)$")


def parse_rate(text: str) -> dict | None:
    """ports/N/rate as rate_gbps, width and speed ('' for SDR); None for anything else (a driver's own text)."""
    match = RATE_RE.match(text.strip())
    if match is None:
        return None
    return {"rate_gbps": float(match.group(1)), "width": int(match.group(2)), "speed": match.group(3)}


def _counter(path: str) -> int | None:
    text = sysfs.value(path)
    return int(text) if text.isdigit() else None


def _port(port_dir: str, port: str) -> dict:
    """One port of an HCA: its states as the kernel says them ("4: ACTIVE", "5: LinkUp"), its rate, parsed, and its
    counters."""
    counters = os.path.join(port_dir, "counters")
    rate = sysfs.value(os.path.join(port_dir, "rate"))
    return {
        "port": int(port),
        "state": sysfs.value(os.path.join(port_dir, "state")),
        "phys_state": sysfs.value(os.path.join(port_dir, "phys_state")),
        "link_layer": sysfs.value(os.path.join(port_dir, "link_layer")),
        "rate": rate,
        "link": parse_rate(rate),
        # In units of 4 bytes (octets / 4), as the IB specification counts them; 0 where the device answers no query.
        "xmit_data": _counter(os.path.join(counters, "port_xmit_data")) or 0,
        "rcv_data": _counter(os.path.join(counters, "port_rcv_data")) or 0,
        "errors": {name: _counter(os.path.join(counters, name)) for name in ERROR_COUNTERS},
    }


def infiniband(sys_root: str = "/sys") -> list[dict]:
    """The HCAs in /sys/class/infiniband with their ports (state, physical state, link layer, rate, traffic and error
    counters) and their net devices: the one reader of that tree."""
    base = os.path.join(sys_root, "class", "infiniband")
    hcas = []
    for name in sysfs.entries(base):
        ports_dir = os.path.join(base, name, "ports")
        ports = [_port(os.path.join(ports_dir, port), port) for port in sysfs.entries(ports_dir) if port.isdigit()]
        netdevs = sysfs.entries(os.path.join(base, name, "device", "net"))
        hcas.append({"name": name, "ports": ports, "netdevs": netdevs})
    return hcas


def active_hcas(hcas: list[dict], leave_out: Iterable[str] = ()) -> list[str]:
    """NCCL_IB_HCA entries (name:port) for the ports that are up, but those of the HCAs named in leave_out (an NVLink5
    system's switch management ports, which are InfiniBand devices too)."""
    skipped = set(leave_out)
    return ["%s:%d" % (hca["name"], port["port"]) for hca in hcas if hca["name"] not in skipped
            for port in hca["ports"] if port["state"].endswith("ACTIVE")]


def ib_traffic_bytes(before: list[dict], after: list[dict]) -> dict[str, dict[str, int]]:
    """Bytes sent and received on each HCA port between two readings of infiniband()."""
    def table(hcas: list[dict]) -> dict[str, dict]:
        return {"%s:%d" % (h["name"], p["port"]): p for h in hcas for p in h["ports"]}

    old, new = table(before), table(after)
    return {port: {"sent": 4 * (new[port]["xmit_data"] - old[port]["xmit_data"]),
                   "received": 4 * (new[port]["rcv_data"] - old[port]["rcv_data"])}
            for port in sorted(new) if port in old}


def interface_holding(address: str, run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> str:
    """The interface that holds address, or "" when none does or the node has no `ip` to ask."""
    try:
        return interface_of(address, interfaces(run)) or ""
    except (OSError, subprocess.CalledProcessError, ValueError):
        return ""


def hostname_address() -> str:
    """What this node's hostname resolves to (the first IPv4 answer, as Gloo takes it), or ""."""
    try:
        return socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)[0][4][0]
    except (OSError, IndexError):
        return ""


def hostname() -> dict[str, str]:
    return {"hostname": socket.gethostname().split(".")[0], "fqdn": socket.getfqdn()}
