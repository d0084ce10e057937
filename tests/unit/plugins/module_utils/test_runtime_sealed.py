"""The node runtime (plugins/module_utils/_runtime) is sealed: its files import the standard library and each other,
nothing else, and every one of them is a part of the supervisor shipped to the nodes (supervisor_bundle.parts,
derived from supervisor.py's imports), but the bundler itself."""

import ast
import os
import sys

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import supervisor_bundle

RUNTIME_DIR = os.path.dirname(supervisor_bundle.__file__)
RUNTIME = supervisor_bundle.RUNTIME


def outside_imports(source: str) -> list[str]:
    """The modules a source imports, anywhere in it, that are neither the standard library nor the runtime's."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        found += [name for name in names if not name.startswith(RUNTIME)
                  and name.split(".")[0] not in sys.stdlib_module_names]
    return found


def runtime_files() -> list[str]:
    return sorted(name[:-3] for name in os.listdir(RUNTIME_DIR) if name.endswith(".py"))


def test_the_runtime_imports_nothing_outside_itself_and_the_standard_library():
    for name in runtime_files():
        with open(os.path.join(RUNTIME_DIR, name + ".py")) as handle:
            assert outside_imports(handle.read()) == [], name
    # What the check finds: a collection module outside the runtime, a package from PyPI.
    assert outside_imports("import json\nfrom ansible_collections.gpufleet.cluster.plugins.module_utils import node\n"
                           "def f():\n    import yaml\n") == [
        "ansible_collections.gpufleet.cluster.plugins.module_utils", "yaml"]


def test_every_runtime_file_is_shipped_and_nothing_else_is():
    """In the supervisor's one file, or as the launcher's entry point or the ranks' stack hook, a file of its own
    (which imports nothing of this folder: it runs with the job's Python)."""
    shipped = [part.__name__.rsplit(".", 1)[-1] for part in supervisor_bundle.parts()] + ["launcher_entry", "stack_hook"]
    assert sorted(shipped) == [name for name in runtime_files() if name != "supervisor_bundle"]
    assert not {"launcher_entry", "stack_hook"} & {part.__name__.rsplit(".", 1)[-1] for part in supervisor_bundle.parts()}
    for source in (supervisor_bundle.entry_source(), supervisor_bundle.hook_source()):
        assert outside_imports(source) == []
        assert "module_utils._runtime" not in source
    assert all(part.__name__.startswith(RUNTIME + ".") for part in supervisor_bundle.parts())
