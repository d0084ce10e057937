# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Log forensics: what a node's job log says about why it failed (torchrun's and Open MPI's reports, the workers'
error files), and the log's last lines. Reads files only; job_read.status() calls these."""

from __future__ import annotations

import os
import re

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_processes import read_json, signal_name

_ROOT_CAUSE_RE = re.compile(
    r"Root Cause \(first observed failure\):.*?rank\s*:\s*(?P<rank>\d+)\s*\(local_rank:\s*(?P<local>\d+)\)"
    r".*?exitcode\s*:\s*(?P<code>-?\d+)(?:\s*\(pid:\s*\d+\))?",
    re.S,
)


# torchrun's agent logs this line first when a worker fails; its traceback and summary follow.
_AGENT_REPORT_RE = re.compile(r"torch/distributed/elastic/multiprocessing/api\.py:\d+\] failed \(exitcode")


def tail_lines(path: str, count: int, max_bytes: int = 65536) -> list[str]:
    """The last count lines of a text file (reading at most max_bytes from its end)."""
    if count <= 0:
        return []
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            data = handle.read()
    except OSError:
        return []
    return split_tail(data.decode("utf-8", "replace"), cut=size > max_bytes)[-count:]


def split_tail(text: str, cut: bool) -> list[str]:
    """The lines of a file's end; with cut (the file is longer than what was read), without the first line read,
    which is probably part of a line."""
    lines = text.splitlines()
    return lines[1:] if cut and lines else lines


def torchrun_root_cause(lines: list[str]) -> dict | None:
    """The first failed worker from torchrun's ChildFailedError summary: global rank, local rank, exit code."""
    match = None
    for match in _ROOT_CAUSE_RE.finditer("\n".join(lines)):
        pass
    if match is None:
        return None
    code = int(match.group("code"))
    cause: dict = {"rank": int(match.group("rank")), "local_rank": int(match.group("local")), "exit_code": code}
    if code < 0:
        cause["signal"] = signal_name(-code)
    rest = "\n".join(lines)[match.end():].split("=" * 20, 1)[0]
    error_file = re.search(r"^\s*error_file\s*:\s*(\S+)", rest, re.M)
    if error_file and error_file.group(1) != "<N/A>":
        cause["error_file"] = error_file.group(1)
    traceback = rest.split("traceback :", 1)[1].strip().splitlines() if "traceback :" in rest else []
    if traceback and not traceback[0].startswith("To enable traceback"):
        cause["error"] = traceback[-1].strip()
    return cause


_MPIRUN_FIRST_RE = re.compile(
    r"The first process to do so was:\s*Process name:\s*\[\[\d+,\d+\],(?P<rank>\d+)\]\s*Exit code:\s*(?P<code>-?\d+)")


_MPIRUN_SIGNAL_RE = re.compile(
    r"mpirun noticed that process rank (?P<rank>\d+) with PID \d+ on node \S+ exited on signal (?P<signal>\d+)")


def mpirun_root_cause(lines: list[str], manifest: dict | None = None) -> dict | None:
    """The first failed rank from Open MPI's report (exit code or signal), and its node (from the rank manifest)."""
    text = "\n".join(lines)
    match = None
    for match in _MPIRUN_FIRST_RE.finditer(text):
        pass
    if match is not None:
        rank = int(match.group("rank"))
        cause: dict = {"rank": rank, "exit_code": int(match.group("code"))}
    else:
        for match in _MPIRUN_SIGNAL_RE.finditer(text):
            pass
        if match is None:
            return None
        rank, signum = int(match.group("rank")), int(match.group("signal"))
        cause = {"rank": rank, "exit_code": 128 + signum, "signal": signal_name(signum)}
    for node in (manifest or {}).get("nodes", []):
        first, last = node.get("ranks", [0, -1])
        if first <= rank <= last:
            cause.update(host=node.get("host"), local_rank=rank - first)
    return cause


def error_file_message(path: str) -> str | None:
    """The exception a worker recorded in its TORCHELASTIC_ERROR_FILE (scripts whose entry point uses @record)."""
    data = read_json(path)
    message = data.get("message") if data else None
    if isinstance(message, dict):
        message = message.get("message")
    return str(message).strip() or None if message else None


def without_agent_report(lines: list[str]) -> list[str]:
    """The log up to torchrun's own failure report, which torchrun_root_cause() already sums up."""
    for index, line in enumerate(lines):
        if _AGENT_REPORT_RE.search(line):
            return lines[:index]
    return lines
