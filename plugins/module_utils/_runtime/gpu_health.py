# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A node's GPU health, read in one pass: the one reader of it, for the launch's probe, verify.yml and the
supervisor (standard library, Python 3.8).

What it reads: per GPU, nvidia-smi's --query-gpu fields below; the compute processes on the GPUs (with their
user from /proc); NVLink link states (`nvidia-smi nvlink --status`, where a node has two GPUs or more); and the
kernel log's XID events (/dev/kmsg, else journalctl), each classified from NVIDIA's XID documentation, and the
NVSwitches' SXid events on NVSwitch systems. What is made of it (refuse, warn) is gpu_gate.py's. The test seam:
``run`` (how commands run) and ``kernel_log`` (a file in /dev/kmsg's record format instead of the device)."""

from __future__ import annotations

import os
import pwd
import re
import stat
import subprocess
from collections.abc import Callable
from typing import Any

# nvidia-smi --query-gpu fields, in the order asked (nvidia-smi(1), "GPU ATTRIBUTES"; --help-query-gpu).
HEALTH_FIELDS = (
    ("index", "index"), ("uuid", "uuid"), ("bus_id", "pci.bus_id"), ("name", "name"), ("driver", "driver_version"),
    ("temperature", "temperature.gpu"), ("utilization", "utilization.gpu"), ("memory_used", "memory.used"),
    ("memory_total", "memory.total"), ("power", "power.draw"), ("sm_clock", "clocks.sm"),
    ("sm_clock_max", "clocks.max.sm"), ("event_reasons", "clocks_event_reasons.active"),
    ("ecc_uncorrected", "ecc.errors.uncorrected.volatile.total"), ("retired_pending", "retired_pages.pending"),
    ("remap_pending", "remapped_rows.pending"), ("remap_failure", "remapped_rows.failure"),
    ("pcie_width", "pcie.link.width.current"), ("pcie_width_max", "pcie.link.width.max"),
    # The NVLink fabric's training on NVSwitch and NVLink5 systems: CUDA starts only once it is "Completed" with
    # "Success" ([N/A] on a GPU without a fabric); and the driver's recovery action for the GPU (None, Reset, Reboot,
    # Drain P2P, Drain and Reset: NVML's nvmlDeviceGpuRecoveryAction_t, the GPU memory error management guide's
    # "Recovery action flag"). A driver that does not know them leaves them out (query_gpus).
    ("fabric_state", "fabric.state"), ("fabric_status", "fabric.status"), ("recovery_action", "gpu_recovery_action"),
)
# Drivers before the rename (R535) know the clock event reasons by their older name.
FIELD_ALIASES = {"clocks_event_reasons.active": "clocks_throttle_reasons.active"}
_INVALID_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')
# How nvidia-smi says it cannot reach a GPU that the driver enumerated (a lost GPU, one that needs a reset).
_NO_HANDLE = re.compile(r"Unable to determine the device handle for GPU\s*([0-9A-Fa-f:.]+):\s*(.*)")
# Values nvidia-smi prints in a field's place when it has none ("[N/A]", "[Not Supported]"), and those that say the
# GPU is in an error state.
_ABSENT = ("[n/a]", "n/a", "[not supported]", "not supported", "")
GPU_ERROR_VALUES = ("[gpu requires reset]", "[unknown error]", "[gpu is lost]")

# Active clock event reasons (nvml.h, nvmlClocksEventReason*; the bits of clocks_event_reasons.active).
EVENT_REASONS = {0x1: "idle", 0x2: "application clocks setting", 0x4: "SW power cap", 0x8: "HW slowdown",
                 0x10: "sync boost", 0x20: "SW thermal slowdown", 0x40: "HW thermal slowdown",
                 0x80: "HW power brake slowdown", 0x100: "display clock setting"}
# The reasons that mean the hardware holds the clocks down (heat, power delivery), not a setting or idleness.
SLOWDOWN_REASONS = 0x8 | 0x20 | 0x40 | 0x80

# What an XID means (NVIDIA's Xid catalog, docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, and the
# GPU memory error management guide, docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt, for 48, 63, 64, 94, 95).
XID_MEANINGS = {
    8: "GPU stopped processing", 13: "graphics engine exception", 31: "GPU memory page fault",
    43: "GPU stopped processing", 45: "preemptive cleanup, due to previous errors", 48: "double bit ECC error",
    61: "internal micro-controller breakpoint/warning", 62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event", 64: "ECC page retirement or row remapper recording failure",
    68: "video processor exception", 74: "NVLink error", 79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate", 94: "contained ECC error", 95: "uncontained ECC error",
    109: "context switch timeout", 119: "GSP RPC timeout", 120: "GSP error", 154: "GPU recovery action changed",
}
# Application faults: the XIDs after which NVIDIA's Kubernetes device plugin keeps a GPU healthy
# (NVIDIA/k8s-device-plugin at 1b826acc, internal/rm/health.go, getDisabledHealthCheckXids' ignoredXids: 13, 31, 43,
# 45, 68 and 109). Every other XID counts as a hardware or driver fault, as that plugin counts it.
APPLICATION_XIDS = frozenset((13, 31, 43, 45, 68, 109))
# XID 154 states the recovery action the driver now asks for: "GPU recovery action changed from 0x0 (None) to 0x1
# (GPU Reset Required)"; the names vary by driver ("Node Reboot Required", "OS Reboot", "PF FLR", public kernel logs).
_RECOVERY_CHANGE = re.compile(r"recovery action changed from .*? to (0x[0-9a-fA-F]+) \(([^)]*)\)")
# The driver's kernel log line: "NVRM: Xid (PCI:0000:9b:00): 79, pid=..., name=..., GPU has fallen off the bus."
_XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+)(?:\.[0-9A-Fa-f]+)?\): (\d+),?\s*(.*)")
# An NVSwitch's error line (the NVSwitch driver's format, "nvidia-%s: SXid (PCI:%s): %05d, " then the text; real
# lines quoted in leptonai/gpud's sxid component README): "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal,
# Link 48 LTSSM Fault Up". Only a line whose text starts with Fatal or Non-fatal opens an event; the lines after it
# ("Severity 1 Engine instance ...", "Data {...}") belong to it. A fatal SXid needs the fabric reset (Fabric Manager
# User Guide, "NVSwitch Errors": the NVSwitches and GPUs reset, in practice a reboot).
_SXID_LINE = re.compile(r"nvidia-(nvswitch\d+): SXid \(PCI:([0-9A-Fa-f:.]+)\): (\d+), (Fatal|Non-fatal),?\s*(.*)")
KMSG = "/dev/kmsg"

Runner = Callable[..., subprocess.CompletedProcess]


def _value(text: str) -> str | None:
    text = text.strip()
    return None if text.lower() in _ABSENT else text


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _yes(text: str | None) -> bool:
    return (text or "").strip().lower() in ("yes", "1", "true", "enabled")


def bus_key(bus_id: str) -> tuple[int, int, int]:
    """(domain, bus, device) of a PCI address as nvidia-smi ("00000000:9B:00.0") or the kernel log ("0000:9b:00")
    write it, so that the two can be matched."""
    parts = bus_id.split(".")[0].split(":")
    try:
        return int(parts[-3], 16), int(parts[-2], 16), int(parts[-1], 16)
    except (IndexError, ValueError):
        return (-1, -1, -1)


def short_bus(bus_id: str) -> str:
    """A PCI address as the kernel writes it (0000:9b:00.0), from nvidia-smi's (00000000:9B:00.0) or the XID's."""
    domain, bus, device = bus_key(bus_id)
    return "%04x:%02x:%02x.0" % (domain, bus, device) if bus >= 0 else bus_id


def _smi(run: Runner, args: list[str]) -> tuple[int, str]:
    try:
        done = run(["nvidia-smi", *args], capture_output=True, text=True, check=False, timeout=60)
    except FileNotFoundError:
        return -1, ""
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -2, str(exc)
    return done.returncode, (done.stdout or "") + (done.stderr or "")


def _gpu_row(names: list[str], line: str) -> dict[str, Any]:
    values = [part.strip() for part in line.split(",")]
    raw = dict(zip(names, values))
    errors = sorted({value for value in values if value.lower() in GPU_ERROR_VALUES})
    row: dict[str, Any] = {"index": int(_number(raw.get("index")) or 0), "uuid": raw.get("uuid", ""),
                           "bus_id": raw.get("bus_id", ""), "name": raw.get("name", ""), "error": ", ".join(errors)}
    for key in ("temperature", "utilization", "memory_used", "memory_total", "power", "sm_clock", "sm_clock_max",
                "ecc_uncorrected", "pcie_width", "pcie_width_max"):
        row[key] = _number(_value(raw.get(key, "")))
    reasons = _value(raw.get("event_reasons", ""))
    try:
        row["event_reasons"] = int(reasons, 16) if reasons else None
    except ValueError:
        row["event_reasons"] = None
    for key in ("retired_pending", "remap_pending", "remap_failure"):
        row[key] = _yes(_value(raw.get(key, "")))
    for key in ("driver", "fabric_state", "fabric_status", "recovery_action"):
        row[key] = _value(raw.get(key, ""))
    return row


def query_gpus(run: Runner = subprocess.run) -> dict[str, Any]:
    """The GPUs nvidia-smi answers for (``gpus``), those it cannot reach (``lost``: bus id and error), and
    ``nvidia_smi``: False where it is not installed. A field this driver does not know is asked by its older name,
    else left out (its value None)."""
    fields = [field for _key, field in HEALTH_FIELDS]
    names = [key for key, _field in HEALTH_FIELDS]
    for _attempt in range(len(fields)):
        code, out = _smi(run, ["--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"])
        if code == -1:
            return {"nvidia_smi": False, "gpus": [], "lost": [], "error": ""}
        invalid = _INVALID_FIELD.search(out)
        if not invalid or invalid.group(1) not in fields:
            break
        position = fields.index(invalid.group(1))
        alias = FIELD_ALIASES.get(fields[position])
        if alias and alias not in fields:
            fields[position] = alias
        else:
            del fields[position], names[position]
    gpus, lost = [], []
    for line in out.splitlines():
        missing = _NO_HANDLE.search(line)
        if missing:
            lost.append({"bus_id": missing.group(1), "error": missing.group(2).strip()})
        elif line.count(",") == len(names) - 1 and re.match(r"\s*\d+\s*,", line):
            gpus.append(_gpu_row(names, line))
    error = "" if gpus or lost or code == 0 else (out.strip().splitlines() or ["exit %d" % code])[-1]
    return {"nvidia_smi": True, "gpus": gpus, "lost": lost, "error": error}


def process_user(pid: int, proc: str = "/proc") -> str:
    """The user a process runs as (its real uid's name), or '' where /proc does not show it (another PID
    namespace)."""
    try:
        with open(os.path.join(proc, str(pid), "status")) as handle:
            for line in handle:
                if line.startswith("Uid:"):
                    uid = int(line.split()[1])
                    try:
                        return pwd.getpwuid(uid).pw_name
                    except KeyError:
                        return str(uid)
    except (OSError, ValueError, IndexError):
        pass
    return ""


def compute_processes(run: Runner = subprocess.run, proc: str = "/proc") -> list[dict[str, Any]]:
    """The compute processes on the GPUs: bus id, pid, user, command and memory (MiB)."""
    code, out = _smi(run, ["--query-compute-apps=gpu_bus_id,pid,process_name,used_memory",
                           "--format=csv,noheader,nounits"])
    found = []
    for line in out.splitlines() if code == 0 else ():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 4 or not parts[1].isdigit():
            continue
        found.append({"bus_id": parts[0], "pid": int(parts[1]), "command": parts[2],
                      "memory": _number(_value(parts[3])), "user": process_user(int(parts[1]), proc)})
    return found


# nvidia-smi's line in place of the links of a GPU with none up ("NVLink", newer "Nvlink": nvidia_smi/README.md in the fixtures)
_ALL_INACTIVE = "all links are inactive"


def nvlink_states(run: Runner = subprocess.run) -> dict[str, dict[str, Any]]:
    """Per GPU index (a string, as JSON keys are), its NVLink links up (a count) and down (their numbers), from `nvidia-smi
    nvlink --status` ("Link 3: <inactive>" for one down), and "all_inactive" for a GPU with none up ("NVML: Unable to
    retrieve NVLink information as all links are inActive"); empty where the GPUs have no NVLink."""
    code, out = _smi(run, ["nvlink", "--status"])
    states: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for line in out.splitlines() if code == 0 else ():
        gpu = re.match(r"GPU (\d+):", line)
        link = re.match(r"\s*Link (\d+):\s*(.*)", line)
        if gpu:
            current = states.setdefault(gpu.group(1), {"up": 0, "down": []})
        elif current is not None and _ALL_INACTIVE in line.lower():
            current["all_inactive"] = True
        elif link and current is not None:
            if "inactive" in link.group(2).lower():
                current["down"].append(int(link.group(1)))
            else:
                current["up"] += 1
    return states


def xid_class(xid: int) -> str:
    """'application' for the XIDs an application causes, 'hardware' (a hardware or driver fault) for the rest."""
    return "application" if xid in APPLICATION_XIDS else "hardware"


def recovery_action(detail: str) -> str | None:
    """The action an XID 154 line says the driver now asks for ("GPU Reset Required", "Node Reboot Required",
    "Drain P2P", "None"), or None where the line says none."""
    found = _RECOVERY_CHANGE.search(detail)
    if not found:
        return None
    return found.group(2).strip() or ("None" if int(found.group(1), 16) == 0 else found.group(1))


def parse_xid(message: str) -> dict[str, Any] | None:
    """An XID event from one kernel log message: the GPU's bus id, the XID, its meaning and class, the detail (and
    for XID 154 the recovery action it names)."""
    found = _XID_LINE.search(message)
    if not found:
        return None
    xid = int(found.group(2))
    event = {"bus_id": found.group(1).lower(), "xid": xid, "meaning": XID_MEANINGS.get(xid, "XID %d" % xid),
             "class": xid_class(xid), "detail": found.group(3).strip()[:200]}
    if xid == 154:
        event["action"] = recovery_action(event["detail"])
    return event


def parse_sxid(message: str) -> dict[str, Any] | None:
    """An NVSwitch SXid event from one kernel log message, in parse_xid's shape: the switch's bus id, the SXid (under
    ``xid``, with ``sxid`` true), its class (a fatal one is a hardware fault, a non-fatal one is "non-fatal"), the
    switch's name and the detail; None for any other line, a continuation line of an SXid's too."""
    found = _SXID_LINE.search(message)
    if not found:
        return None
    return {"bus_id": found.group(2).lower(), "xid": int(found.group(3)), "sxid": True, "switch": found.group(1),
            "meaning": "NVSwitch %s error" % found.group(4).lower(),
            "class": "hardware" if found.group(4) == "Fatal" else "non-fatal", "detail": found.group(5).strip()[:200]}


def boot_time(proc: str = "/proc") -> float:
    """When the node booted (seconds since the epoch, /proc/stat's btime); kernel log times count from it."""
    try:
        with open(os.path.join(proc, "stat")) as handle:
            for line in handle:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0.0


def _kmsg_records(path: str) -> list[str]:
    """The records of /dev/kmsg (one per read) or of a file in its format (one per line), oldest first."""
    if not os.path.isfile(path):
        records = []
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            while True:
                try:
                    chunk = os.read(fd, 8192)
                except BlockingIOError:
                    break  # every record read
                except BrokenPipeError:
                    continue  # a record overwritten while reading: the next one follows
                if not chunk:
                    break
                records.append(chunk.decode("utf-8", "replace"))
        finally:
            os.close(fd)
        return records
    with open(path, errors="replace") as handle:
        return handle.read().splitlines()


def kernel_log_problem(path: str) -> str:
    """Why a kernel log path given in place of /dev/kmsg cannot be one ('' where it can): it must be a regular file
    in /dev/kmsg's record format or a character device. /dev/kmsg itself may be missing (journalctl is read then)."""
    if path == KMSG:
        return ""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return "%s: %s" % (path, exc.strerror or exc)
    if stat.S_ISREG(mode) or stat.S_ISCHR(mode):
        return ""
    return "%s is neither a file nor a character device" % path


def kernel_xids(kernel_log: str = KMSG, since: float = 0.0, proc: str = "/proc",
                run: Runner = subprocess.run) -> tuple[list[dict[str, Any]], str]:
    """The XID events in the kernel log since boot (only those at or after ``since``, seconds since the epoch, when
    given), each with its ``time``; and where they were read from, or why they could not be ("invalid: ..." for a
    path that cannot be a kernel log, "unreadable: ..." for one that cannot be read)."""
    problem = kernel_log_problem(kernel_log)
    if problem:
        return [], "invalid: %s" % problem
    booted = boot_time(proc)
    events = []
    try:
        records = _kmsg_records(kernel_log)
    except OSError as exc:
        if kernel_log != KMSG:
            return [], "unreadable: %s: %s" % (kernel_log, exc.strerror or exc)
        return _journal_xids(run, since, "%s: %s" % (kernel_log, exc.strerror or exc))
    for record in records:
        header, _sep, message = record.partition(";")
        line = message.split("\n", 1)[0]
        event = parse_xid(line) or parse_sxid(line)
        if event is None:
            continue
        try:
            event["time"] = booted + int(header.split(",")[2]) / 1e6
        except (IndexError, ValueError):
            event["time"] = booted
        if event["time"] >= since:
            events.append(event)
    return events, kernel_log


# journalctl -k of this boot; --grep (XID_GREP: the driver's XID and SXid lines) exits 1 both where nothing matched and
# where the kernel's journal cannot be read (systemd #32422: a user outside adm and systemd-journal sees no kernel line,
# and -q hides the hint), so exit 1 without entries is "no XID" only where the user can read the boot's last one.
JOURNAL = ["journalctl", "-k", "-b", "-q", "--no-pager", "-o", "short-unix"]
XID_GREP = ["--grep", "NVRM: Xid|SXid \\(PCI"]


def _journal(run: Runner, args: list[str]) -> subprocess.CompletedProcess:
    return run(JOURNAL + args, capture_output=True, text=True, check=False, timeout=60)


def _journal_xids(run: Runner, since: float, why: str) -> tuple[list[dict[str, Any]], str]:
    """The XIDs of this boot from journald's kernel messages: where /dev/kmsg is not readable (not root)."""
    try:
        done = _journal(run, XID_GREP)
        if done.returncode == 1 and not done.stdout.strip():
            last = _journal(run, ["-n", "1"])
            if last.returncode != 0 or not last.stdout.strip():
                return [], ("unreadable: %s; journalctl shows this user no kernel message of this boot (exit %d%s)"
                            % (why, last.returncode, ": " + last.stderr.strip()[-200:] if last.stderr.strip() else ""))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], "unreadable: %s; journalctl: %s" % (why, exc)
    if done.returncode not in (0, 1):
        return [], "unreadable: %s; journalctl exit %d: %s" % (why, done.returncode, (done.stderr or "").strip()[-200:])
    events = []
    for line in done.stdout.splitlines():
        event = parse_xid(line) or parse_sxid(line)
        stamp = _number(line.split(" ", 1)[0])
        if event is not None and stamp is not None and stamp >= since:
            event["time"] = stamp
            events.append(event)
    return events, "journalctl"


def read(kernel_log: str = KMSG, run: Runner = subprocess.run, proc: str = "/proc") -> dict[str, Any]:
    """Everything the gate and the report read of a node's GPUs, in one pass. Without nvidia-smi nothing else is
    read (``nvidia_smi`` False: a node without GPUs, or without a driver)."""
    found = query_gpus(run)
    if not found["nvidia_smi"]:
        return dict(found, processes=[], nvlink={}, xids=[], kernel_log="")
    found["processes"] = compute_processes(run, proc) if found["gpus"] else []
    found["nvlink"] = nvlink_states(run) if len(found["gpus"]) + len(found["lost"]) > 1 else {}
    found["xids"], found["kernel_log"] = kernel_xids(kernel_log, proc=proc, run=run)
    return found
