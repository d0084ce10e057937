# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A module of the collection written to a node as one program that runs there without the collection (Slurm's
HealthCheckProgram, slurm_health.py): the module and every module of the collection it imports, directly or not,
each as its own source text, loaded under its own name by a few lines at the top of the file, dependencies first;
then the module's ``main()`` is the program's exit status. The node needs its python3 (3.8 or newer) and nothing
else: a module that imports anything of Ansible is refused here.

Unlike the supervisor's one file (module_utils/_runtime/supervisor_bundle.py, whose parts are written one after the
other), each module keeps its own namespace: the gate's modules have private names in common (``_utc``,
``_number``), which one shared namespace would let the later replace. Each source line is one line of the file, as
a string: a person reading the program on a node finds the code that runs in plain text."""

from __future__ import annotations

import ast
import importlib
import inspect
from types import ModuleType

OWN = "ansible_collections.gpufleet.cluster.plugins"

LOADER = '''import sys
import types


def _load(name, lines):
    """The module under its own name, its packages made as needed, so that its imports of the others work."""
    parts = name.split(".")
    for end in range(1, len(parts) + 1):
        prefix = ".".join(parts[:end])
        if prefix not in sys.modules:
            made = types.ModuleType(prefix)
            if end < len(parts):
                made.__path__ = []
            sys.modules[prefix] = made
            if end > 1:
                setattr(sys.modules[".".join(parts[:end - 1])], parts[end - 1], made)
    module = sys.modules[name]
    module.__file__ = __file__
    exec(compile("".join(lines), "%s (%s)" % (__file__, name), "exec"), module.__dict__)

'''


class ProgramError(ValueError):
    """A module cannot be shipped as a program: the message names it and what it imports."""


def own_imports(module: ModuleType) -> list[str]:
    """The collection's modules a module imports, by full name, in the order its source names them; anything of
    Ansible outside the collection is refused."""
    found: list[str] = []
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith(OWN):
                package = importlib.import_module(node.module)
                names = (["%s.%s" % (node.module, alias.name) for alias in node.names]
                         if hasattr(package, "__path__") else [node.module])
            elif node.module.split(".")[0] in ("ansible", "ansible_collections"):
                names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names if alias.name.split(".")[0] in ("ansible", "ansible_collections")]
        for name in names:
            if not name.startswith(OWN):
                raise ProgramError("%s imports %s: a node program runs without Ansible" % (module.__name__, name))
            if name not in found:
                found.append(name)
    return found


def modules(root: ModuleType) -> list[ModuleType]:
    """root and every module of the collection it imports, directly or not, each after those it imports."""
    order: list[ModuleType] = []

    def visit(module: ModuleType, path: tuple[str, ...]) -> None:
        if module in order:
            return
        if module.__name__ in path:
            raise ProgramError("the modules import each other in a cycle: %s" % " -> ".join(path + (module.__name__,)))
        for name in own_imports(module):
            visit(importlib.import_module(name), path + (module.__name__,))
        order.append(module)

    visit(root, ())
    return order


def source(root: ModuleType, python: str = "/usr/bin/python3") -> str:
    """The program's text: the interpreter line, the loader, each module's lines, then root's main()."""
    chunks = ["#!%s\n# Written by gpufleet from %s and the modules it imports; runs with nothing of the collection "
              "installed.\n" % (python, root.__name__), LOADER]
    for module in modules(root):
        lines = inspect.getsource(module).splitlines(keepends=True)
        chunks.append("_load(%r, [\n%s])\n" % (module.__name__, "".join("    %r,\n" % line for line in lines)))
    chunks.append("\nsys.exit(sys.modules[%r].main())\n" % root.__name__)
    return "\n".join(chunks)
