# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Each rank's output kept once: in the node's log, not a second time in the launcher's own per-rank files.

Both launchers that tag their ranks' lines do it through a file per rank: torchrun's ``--tee`` has each worker write
``<log dir>/<run>_<random>/attempt_0/<local rank>/stdout.log`` (and ``stderr.log``) and a thread of its agent reads
them into the node's log (torch/distributed/elastic/multiprocessing/api.py, DefaultLogsSpecs and TailLog); under
DeepSpeed the supervisor itself copies each rank's file into the log (rank_output.py). A week-long job's output would
take its disk twice. So the supervisor frees what the log already holds:

- while an attempt runs, once a minute, the part of each file that is in the log is punched out of it
  (``fallocate(FALLOC_FL_PUNCH_HOLE)``): the disk blocks are freed, the file keeps its size and every offset, so the
  writer appending and the reader following it go on as before. DeepSpeed's files: up to what rank_output.py has
  copied. torchrun's: up to the size each file had at the pass before, a minute earlier (its agent reads them every
  0.1 s). A file system without hole punching (said once in the log) keeps them whole until the attempt ends;
- when an attempt has ended (every process of the run gone: nothing writes or reads them any more), its files are
  removed. torchrun's ``error.json`` (the error a script records with ``@record``) stays.

Only files that appeared since this supervisor started are touched: an earlier run's are its own. Shipped with the
supervisor; standard library only, Python 3.8+.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import time
from typing import Callable

# torchrun's --log-dir in the job folder (launchers.torchrun_command).
TORCHELASTIC_DIR = "torchelastic"
TEE_FILES = ("stdout.log", "stderr.log")
PASS_S = 60.0
# linux/falloc.h
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
BLOCK = 4096


@functools.lru_cache(maxsize=None)
def _fallocate() -> Callable[..., int] | None:
    """libc's fallocate(2), looked up once; None where there is none."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        found = libc.fallocate64 if hasattr(libc, "fallocate64") else libc.fallocate
    except (OSError, AttributeError):
        return None
    found.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    return found


def punch(path: str, upto: int) -> int:
    """Free the disk blocks of path's first upto bytes (down to a whole 4 KiB block), its size and contents past
    them unchanged (the freed part reads as zeros). Returns the errno of a failure (EOPNOTSUPP: the file system
    cannot), 0 when done or nothing to do."""
    length = upto - upto % BLOCK
    if length <= 0:
        return 0
    fallocate = _fallocate()
    if fallocate is None:
        return errno.ENOSYS
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as exc:
        return exc.errno or errno.EIO
    try:
        if fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, length) != 0:
            return ctypes.get_errno() or errno.EIO
        return 0
    finally:
        os.close(fd)


class OutputOnce:
    """Frees the per-rank files' copies of what the node's log holds (``tick`` each turn of the supervisor's loop,
    ``attempt_ended`` after each attempt)."""

    def __init__(self, job_dir: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.folder = os.path.join(job_dir, TORCHELASTIC_DIR)
        self.clock = clock
        self.earlier = set(self._tee_files())  # an earlier run's: left as they are
        self.seen: dict[str, int] = {}  # each file's size at the last pass
        self.next_pass = clock() + PASS_S
        self.unsupported = False

    def _tee_files(self) -> list[str]:
        found = []
        for top, _dirs, names in os.walk(self.folder):
            found += [os.path.join(top, name) for name in names if name in TEE_FILES]
        return found

    def tick(self, copied: Callable[[], dict[str, int]]) -> str:
        """Once a minute, punch out what the log holds: each torchrun file up to its size at the last pass, each of
        copied (DeepSpeed's files, by path: the bytes copied). A line to log the first time the file system cannot."""
        if self.unsupported or self.clock() < self.next_pass:
            return ""
        self.next_pass = self.clock() + PASS_S
        upto = copied()
        for path in self._tee_files():
            if path in self.earlier:
                continue
            if path in self.seen:
                upto[path] = self.seen[path]
            try:
                self.seen[path] = os.path.getsize(path)
            except OSError:
                self.seen.pop(path, None)
        for path, size in upto.items():
            failed = punch(path, size)
            if failed in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                self.unsupported = True
                return ("the ranks' own files (%s) keep a copy of their output until the attempt ends: this file "
                        "system cannot free a file's start (%s)" % (os.path.dirname(path), os.strerror(failed)))
        return ""

    def attempt_ended(self, copied: dict[str, int]) -> str:
        """Remove the ended attempt's per-rank files (torchrun's tee files; copied, DeepSpeed's): every line is in the
        log. What was removed, for the log, or ''."""
        gone, size = 0, 0
        for path in [p for p in self._tee_files() if p not in self.earlier] + list(copied):
            try:
                size += os.path.getsize(path)
                os.remove(path)
                gone += 1
            except OSError:
                continue
        self.seen.clear()
        if not gone:
            return ""
        return "removed the ranks' own copies of their output (%d files, %.1f MiB): every line of them is in this log" % (
            gone, size / 1048576.0)
