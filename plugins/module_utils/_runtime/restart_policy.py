# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Restart by cause: the causes a failed attempt is put down to, which of them a job restarts on (``restart_on``),
and where a rank failed (the frame its traceback names), so that the script's own failure, met twice at the same
place with the same exit, is not retried.

The one home of the causes' names: the controller's plan and the launch module check ``restart_on`` with
``parse_restart_on``; the supervisor's restart decision (gang_rules.restart_decision) reads ``failure_cause`` and
``refused_by_policy``. Shipped to the nodes as part of the supervisor; standard library only, Python 3.8+.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, Optional, Sequence

# A rank's line in a node's log as the launchers that tag them write it, its rank captured (log_silence.py owns it);
# lines of a launcher that tags nothing have no tag.
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.log_silence import RANK_TAG

# Each cause, as restart_on names it, with how the decision says it.
CAUSES = {
    "node_lost": "a node lost",
    "hang": "a hang",
    "hardware_fault": "a GPU's hardware fault",
    "rank_exit": "a rank's failure",
}
# The default: the infrastructure's causes and a rank's failure (a rank failing twice in a row at the same place with
# the same exit is still not retried: repeated_failure).
DEFAULT_RESTART_ON = tuple(CAUSES)

# torch's own tag on a rank's uncaught exception once its process group is up ("[rank1]: Traceback ..."), inside the
# launcher's.
_TORCH_RANK_TAG = re.compile(r"^\[rank\d+\]: ")
_TRACEBACK_FRAME = re.compile(r'^\s+File "([^"]+)", line (\d+), in ')
_TRACEBACK_START = "Traceback (most recent call last):"
# Frames of the interpreter and of installed packages: where a script's failure surfaces, not where it is.
_NOT_THE_SCRIPT = re.compile(r"(^<)|/(site|dist)-packages/|/lib/python\d")
# How much of the end of an attempt's log is read for the failed rank's traceback.
TAIL_BYTES = 256 * 1024


def parse_restart_on(value: Any) -> tuple[str, ...]:
    """restart_on as given (a list, or a comma-separated string from ``-e restart_on=hang,node_lost``): each item a
    cause of CAUSES or an exit code from 1 to 255 (a rank's exit with that code; a rank killed by a signal exits with
    128 + the signal's number, as a shell says). The causes and codes as words; ValueError names what is wrong."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise ValueError("restart_on: must be a list of causes (%s) or exit codes from 1 to 255, got %r"
                         % (", ".join(CAUSES), value))
    found: list[str] = []
    for item in items:
        word = str(item).strip()
        if isinstance(item, bool) or (word not in CAUSES and not _is_exit_code(word)):
            raise ValueError("restart_on: %r is neither a cause (%s) nor an exit code from 1 to 255"
                             % (item, ", ".join(CAUSES)))
        found += [word] if word not in found else []
    return tuple(found)


def _is_exit_code(word: str) -> bool:
    return word.isdigit() and 1 <= int(word) <= 255


def exit_code_of(status: int) -> int:
    """A rank's wait status as a shell says it: its exit code, or 128 + the signal that ended it."""
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def refused_by_policy(restart_on: Sequence[str], cause: str, exit_code: Optional[int]) -> Optional[str]:
    """Why the cause of a failed attempt is not one the job restarts on, else None. A rank's failure is restarted
    on under rank_exit, or when its exit code is one of restart_on's codes."""
    if cause in restart_on or (cause == "rank_exit" and exit_code is not None and str(exit_code) in restart_on):
        return None
    said = CAUSES[cause] + (" (exit code %d)" % exit_code if cause == "rank_exit" and exit_code is not None else "")
    return "not restarting: %s is not among the causes this job restarts on (restart_on: %s)" % (
        said, ", ".join(restart_on))


def failed_at(log_text: str, rank: Optional[int], tagged: bool) -> tuple[Optional[int], Optional[str]]:
    """Which rank failed and where, by the log ("train.py:88"): the innermost frame of the rank's last traceback in
    the script's own files (not the interpreter's or an installed package's), else its innermost frame; no place
    without a traceback. Under a launcher that tags its ranks' lines (tagged), the rank's lines are those tagged with
    its number; when its supervisor could not tell which rank failed (its launcher reaped it first), the rank of
    the first tagged traceback (the untagged ones are the launcher's own). Else the untagged lines."""
    if tagged and rank is None:
        first = next((tag for tag in (RANK_TAG.match(line) for line in log_text.splitlines()
                                      if _TRACEBACK_START in line) if tag), None)
        if first is None:
            return None, None
        rank = int(first.group(1) or first.group(2))
    frames: list[tuple[str, str]] = []
    inside = False
    for line in log_text.splitlines():
        text = _rank_own_line(line, rank if tagged else None)
        if text is None:
            continue
        if text.startswith(_TRACEBACK_START):
            frames, inside = [], True
            continue
        frame = _TRACEBACK_FRAME.match(text) if inside else None
        if frame:
            frames.append((frame.group(1), frame.group(2)))
        elif inside and text and not text.startswith(" "):
            inside = False  # the exception's own line ends the traceback
    return rank, _frame_place(frames)


def _rank_own_line(line: str, rank: Optional[int]) -> Optional[str]:
    """The line without its tag when it is the rank's (rank None: when it is untagged), else None."""
    tag = RANK_TAG.match(line)
    if tag is None:
        own = line if rank is None else None
    else:
        own = line[tag.end():] if int(tag.group(1) or tag.group(2)) == rank else None
    return None if own is None else _TORCH_RANK_TAG.sub("", own, count=1)


def _frame_place(frames: Iterable[tuple[str, str]]) -> Optional[str]:
    found = list(frames)
    if not found:
        return None
    own = [frame for frame in found if not _NOT_THE_SCRIPT.search(frame[0])]
    path, line = (own or found)[-1]
    return "%s:%s" % (os.path.basename(path), line)


def read_tail(path: str, start: int) -> str:
    """The log from ``start`` (the attempt's first byte) on, at most its last TAIL_BYTES; '' when unreadable."""
    try:
        with open(path, "rb") as handle:
            end = handle.seek(0, os.SEEK_END)
            handle.seek(max(start, end - TAIL_BYTES))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
