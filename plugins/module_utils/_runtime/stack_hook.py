# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Each rank's own stack dump, for nodes where py-spy may not read the ranks (Ubuntu's kernel.yama.ptrace_scope=1:
a process may trace only its own descendants, and the ranks are not py-spy's; a container without SYS_PTRACE).

Shipped into the job folder as ``stack_hook/sitecustomize.py`` (supervisor_bundle.hook_source); the launch script
puts that folder first on PYTHONPATH, so every Python process of the run imports it as it starts (site.py imports
``sitecustomize``), and the user's script is not changed. In a rank (LOCAL_RANK set, as every launcher sets it) it
registers Python's faulthandler on a real-time signal, every thread, into ``<GPUFLEET_STACK_DIR>/<pid>.txt``, whose
first line names the signal. faulthandler's handler runs in C the moment the signal comes, also while the rank
waits in a collective. The supervisor sends the signal only to a rank whose /proc status shows it caught
(rank_stacks.hooked_signal), so a process without the hook is never ended by it. Then it runs the ``sitecustomize``
it hides (the distribution's or the environment's), as site.py would have.

Run by the job's Python, not the supervisor's: standard library only, Python 3.8+; nothing here raises into the
rank. Only Python frames are seen (py-spy, where it may read, also sees native ones, and stays the first choice).
"""

import os
import sys

# The environment variable naming the folder of the dumps (the launch script sets it).
STACK_DIR_VAR = "GPUFLEET_STACK_DIR"
# The dump file's first line, with the signal's number.
HEADER = "gpufleet stack hook: signal %d\n"
_KEPT = []  # the dump file stays open for the process's life: faulthandler writes to its descriptor


def _register() -> None:
    folder = os.environ.get(STACK_DIR_VAR)
    if not folder or "LOCAL_RANK" not in os.environ:
        return
    import faulthandler  # pylint: disable=import-outside-toplevel
    import signal  # pylint: disable=import-outside-toplevel

    signum = signal.SIGRTMIN + 6
    handle = open(os.path.join(folder, "%d.txt" % os.getpid()), "w")  # pylint: disable=consider-using-with
    handle.write(HEADER % signum)
    handle.flush()
    faulthandler.register(signum, file=handle, all_threads=True, chain=False)
    _KEPT.append(handle)


def _run_hidden() -> None:
    """The sitecustomize this file hides on sys.path, run as site.py would have run it."""
    import importlib.machinery  # pylint: disable=import-outside-toplevel
    import importlib.util  # pylint: disable=import-outside-toplevel

    here = os.path.dirname(os.path.abspath(__file__))
    path = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


if __name__ == "sitecustomize":  # as the job folder's copy, imported by site.py; not when the collection imports it
    try:
        _register()
    except (OSError, ValueError, RuntimeError, AttributeError):
        pass  # no dump for this rank; py-spy, where it may read, still does
    _run_hidden()
