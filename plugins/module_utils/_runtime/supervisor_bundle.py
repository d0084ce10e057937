# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The supervisor as it is shipped to the nodes: one file, standard library only, Python 3.8+.

Its parts are the modules of this folder (module_utils/_runtime) that supervisor.py imports, directly or through
another part, each read and tested as a module of its own; the launch writes them into the job folder as one file,
each after the parts it imports (``parts``, derived from the imports, not kept by hand), with the imports between
them removed, so that the node runs it with its own python3 and nothing of the collection installed
(``python3 supervisor.py JOB_DIR``). No two parts define one top-level name (a unit test checks): in the one file,
the later would replace the earlier. One file rather than a zipapp: a person reading a job folder finds the code
that runs it in plain text. This module itself is not a part: it runs where the launch module runs.

The runtime's other shipped files are ``launcher_entry.py`` (entry_source), run by the job's Python, not the
supervisor's, as the launcher's entry point, and ``stack_hook.py`` (hook_source), each rank's own stack dump, as
``stack_hook/sitecustomize.py``; they import nothing of this folder.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import os
from types import ModuleType

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import launcher_entry, stack_hook

RUNTIME = "ansible_collections.gpufleet.cluster.plugins.module_utils._runtime"
_OWN_PACKAGE = "ansible_collections."
# The one file as the light path's copy of module_utils on a node holds it beside this module (built on the
# controller when the tree is sent: plugin_utils/_control/cached_run.py packed_tree), so that a launch there reads it
# instead of importing and parsing every part (38 of a launch's ~150 ms of CPU on a bench node). Not a .py file:
# nothing imports or compiles it. A checkout or a module's zip has none, and builds it.
SHIPPED_FILE = "supervisor.shipped"


@functools.lru_cache(maxsize=None)
def _top_imports(module: ModuleType) -> tuple[tuple[str, tuple[str, ...], int, int], ...]:
    """A part's top-level `from X import ...` statements (X, the names, first and last line), from one parse of its
    source for part_imports() and shipped_source() both: parsing the runtime twice was a fifth of the launch module's
    own CPU on a node. Only these few tuples are kept, not the syntax tree, whose hundreds of thousands of objects the
    garbage collector would walk for the rest of the run."""
    return tuple((node.module or "", tuple(alias.name for alias in node.names), node.lineno,
                  node.end_lineno or node.lineno)
                 for node in ast.parse(inspect.getsource(module)).body if isinstance(node, ast.ImportFrom))


def part_imports(module: ModuleType) -> list[str]:
    """The runtime modules a part imports, by full name, in the order its source names them."""
    found: list[str] = []
    for source_module, imported, _first, _last in _top_imports(module):
        if not source_module.startswith(RUNTIME):
            continue
        names = [source_module] if source_module != RUNTIME else ["%s.%s" % (RUNTIME, name) for name in imported]
        found += [name for name in names if name not in found]
    return found


def parts(root: ModuleType | None = None) -> list[ModuleType]:
    """root (the supervisor by default) and every runtime module it imports, directly or not, each after those it
    imports (a cycle is an error: the one file could not define both parts before each other)."""
    if root is None:
        # Here, not at the top: a node module that imports this one only for entry_source and hook_source (job_stop,
        # through _job.jobs) then does not import the whole supervisor on every run, which an AnsiballZ module pays
        # for by compiling each file from its zip (0.42 -> 0.35 CPU s of node_probe's imports when it still came this
        # way; node_probe and job_status now read jobs through _job.job_read, without this module). Ansible still
        # ships the supervisor with job_stop: its finder reads every import statement, a function's too.
        from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import supervisor

        root = supervisor
    order: list[ModuleType] = []

    def visit(module: ModuleType, path: tuple[str, ...]) -> None:
        if module in order:
            return
        if module.__name__ in path:
            raise ImportError("the runtime's parts import each other in a cycle: %s" % " -> ".join(
                name.rsplit(".", 1)[-1] for name in path + (module.__name__,)))
        for name in part_imports(module):
            visit(importlib.import_module(name), path + (module.__name__,))
        order.append(module)

    visit(root, ())
    return order


def shipped_source() -> str:
    """The one file: as the node's copy of module_utils holds it (SHIPPED_FILE), else built (build_source)."""
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), SHIPPED_FILE), encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return build_source()


def build_source() -> str:
    """The one file: each part's source, without the imports of the collection's own modules, and without a
    `from __future__` line after the first part (Python allows it only at the top)."""
    chunks = []
    for index, module in enumerate(parts()):
        source = inspect.getsource(module)
        dropped: set[int] = set()
        for source_module, _names, first, last in _top_imports(module):
            if source_module.startswith(_OWN_PACKAGE) or (index and source_module == "__future__"):
                dropped.update(range(first, last + 1))
        kept = [line for number, line in enumerate(source.splitlines(), 1) if number not in dropped]
        chunks.append("# ---- gpufleet %s ----\n%s" % (module.__name__.rsplit(".", 1)[-1], "\n".join(kept)))
    return "\n\n\n".join(chunks) + "\n"


def entry_source() -> str:
    """launcher_entry.py as the job folder holds it: the module's own source, unchanged."""
    return inspect.getsource(launcher_entry)


def hook_source() -> str:
    """stack_hook.py as the job folder holds it (stack_hook/sitecustomize.py): the module's own source, unchanged."""
    return inspect.getsource(stack_hook)
