# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How a node's launcher is started: ``python launcher_entry.py MODULE ARG...`` runs MODULE as ``python -m MODULE
ARG...`` does, then ends the process at once with the module's exit status, without the interpreter's teardown.

Why: torchrun imports torch, and a Python process that has imported torch spends about 0.3 CPU seconds on its way
out after its work is done (the final garbage collection over torch's objects, then its modules' and libraries'
teardown; measured with perf on torch 2.13: 60 % of it in gc_collect_main). Every node's torchrun pays that at the
end of every job and every gang stop, all at the same moment; on nodes that share cores that is what the last node
waits for. What the launcher prints is kept: as at a normal exit, non-daemon threads are waited for, the atexit
handlers run, logging is flushed and closed, and stdout and stderr are flushed; an exception the module raises is
printed by sys.excepthook (its traceback starts at the module, as with ``-m``) and exits 1, SystemExit keeps its
meaning, and a KeyboardInterrupt ends the process by SIGINT, as Python's own exit does.

Shipped as a file of its own into the job folder (supervisor_bundle.entry_source) and run by the job's Python, not
the supervisor's: standard library only, Python 3.8+. The ranks are the launcher's children and end as they would.
"""

from __future__ import annotations

import atexit
import os
import runpy
import signal
import sys
import threading
from types import TracebackType


def _from_module(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from the module's own frames on: this file's and runpy's are left out."""
    while tb is not None and (tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__)
                              or tb.tb_frame.f_code.co_filename.startswith("<frozen runpy")):
        tb = tb.tb_next
    return tb


def run_module(module: str, args: list[str]) -> int:
    """Run module as __main__ with args as its sys.argv[1:]; its exit status, -SIGINT for a KeyboardInterrupt."""
    sys.argv = [sys.argv[0]] + args
    sys.path[0] = os.getcwd()  # as with -m: the current folder first, not this file's
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        sys.stderr.write("%s\n" % exc.code)
        return 1
    except KeyboardInterrupt as exc:
        _said(exc)
        return -signal.SIGINT
    except BaseException as exc:  # pylint: disable=broad-except  # printed as the interpreter would, then exit 1
        _said(exc)
        return 1
    return 0


def _said(exc: BaseException) -> None:
    """The exception printed as the interpreter prints one it did not catch (sys.excepthook), from the module's
    frames on (the hook reads the exception's own traceback)."""
    trimmed = _from_module(exc.__traceback__)
    sys.excepthook(type(exc), exc.with_traceback(trimmed), trimmed)


def wind_up() -> None:
    """What a normal exit does that can matter to the output: wait for non-daemon threads, run the atexit handlers,
    flush and close logging, flush the standard streams."""
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)  # CPython's own, as its exit calls it
    if run_exitfuncs is not None:
        run_exitfuncs()
    logging = sys.modules.get("logging")
    if logging is not None:
        logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


def main(argv: list[str]) -> int:
    """Run the module, wind up, and return its exit status (-SIGINT: the process is to end by SIGINT)."""
    if len(argv) < 2:
        sys.stderr.write("usage: launcher_entry.py MODULE [ARG...]\n")
        return 2
    status = run_module(argv[1], argv[2:])
    wind_up()
    return status


def end(status: int) -> None:
    """End the process now, with status: the point of this file, no interpreter teardown."""
    if status == -signal.SIGINT:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        status = 128 + signal.SIGINT
    os._exit(status & 0xFF)


if __name__ == "__main__":
    end(main(sys.argv))
