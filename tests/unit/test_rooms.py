"""The rooms and the directions between them: the node runtime (module_utils/_runtime) imports nothing of the
collection outside itself (test_runtime_sealed.py), the node facts (module_utils/_node) only the runtime, the node-side
job operations (module_utils/_job) the facts and the runtime, node-side code no controller code (plugin_utils), and
each controller room only the rooms below it. A new import against these directions
fails here, naming the file and the import. The maps that name the rooms' files (CONTRIBUTING.md, each room's README)
name files that exist."""

import ast
import glob
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGINS = "ansible_collections.gpufleet.cluster.plugins."
# What each place may import of the collection's own Python (prefixes after "plugins.").
ALLOWED = {
    "module_utils/_runtime": ("module_utils._runtime",),
    # Read-only node facts (packages, services, modules, GPUs, interfaces) need the runtime's GPU reader at most;
    # node-side job operations use the facts and the runtime they launch.
    "module_utils/_node": ("module_utils._runtime", "module_utils._node"),
    "module_utils/_job": ("module_utils._runtime", "module_utils._node", "module_utils._job"),
    "module_utils": ("module_utils",),
    "plugin_utils/_provision": ("plugin_utils._provision", "module_utils._node.packages"),
    "plugin_utils/_control": ("module_utils", "plugin_utils._control"),
    "plugin_utils/_postmortem": ("module_utils._runtime", "plugin_utils._postmortem"),
    "plugin_utils/_export": ("module_utils", "plugin_utils._control", "plugin_utils._export"),
    "plugin_utils/_verify": ("plugin_utils._control", "plugin_utils._provision", "plugin_utils._verify"),
    "plugin_utils": ("module_utils", "plugin_utils"),
}


def own_imports(source):
    """The collection's modules a source imports, as 'module_utils._job.jobs' (a package's modules named one by one)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PLUGINS):
            base = node.module[len(PLUGINS):]
            package = os.path.isdir(os.path.join(REPO, "plugins", *base.split(".")))
            found += ["%s.%s" % (base, alias.name) for alias in node.names] if package else [base]
        elif isinstance(node, ast.Import):
            found += [alias.name[len(PLUGINS):] for alias in node.names if alias.name.startswith(PLUGINS)]
    return found


def place_of(path):
    relative = os.path.relpath(os.path.dirname(path), os.path.join(REPO, "plugins"))
    return relative


def against(place, imports):
    allowed = ALLOWED[place]
    return [name for name in imports if not any(name == prefix or name.startswith(prefix + ".") for prefix in allowed)]


def test_each_room_imports_only_the_rooms_below_it():
    wrong = {}
    for folder in ("module_utils", "plugin_utils"):
        for root, _dirs, files in os.walk(os.path.join(REPO, "plugins", folder)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(root, name)
                    with open(path) as handle:
                        found = against(place_of(path), own_imports(handle.read()))
                    if found:
                        wrong[os.path.relpath(path, REPO)] = found
    assert wrong == {}


def test_the_check_finds_an_import_against_the_direction():
    runtime_to_node = "from ansible_collections.gpufleet.cluster.plugins.module_utils._job import jobs\n"
    facts_to_jobs = "from ansible_collections.gpufleet.cluster.plugins.module_utils._job.launchers import HOSTFILE\n"
    node_to_controller = "from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import plan\n"
    provision_to_runtime = "from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gpu_health import read\n"
    assert against("module_utils/_runtime", own_imports(runtime_to_node)) == ["module_utils._job.jobs"]
    assert against("module_utils/_job", own_imports(node_to_controller)) == ["plugin_utils._control.plan"]
    assert against("module_utils/_node", own_imports(facts_to_jobs)) == ["module_utils._job.launchers"]
    assert against("plugin_utils/_provision", own_imports(provision_to_runtime)) == ["module_utils._runtime.gpu_health"]
    assert against("plugin_utils/_control", own_imports(node_to_controller)) == []


ROOM_READMES = [os.path.join(folder, "README.md") for folder in
                glob.glob(os.path.join(REPO, "plugins", "module_utils", "_*")) +
                glob.glob(os.path.join(REPO, "plugins", "plugin_utils", "_*"))]


@pytest.mark.parametrize("path", [os.path.join(REPO, "CONTRIBUTING.md")] + sorted(ROOM_READMES),
                         ids=lambda path: os.path.relpath(path, REPO))
def test_every_file_the_maps_name_exists(path):
    """The layout and the rooms' maps name files by their paths: a move that leaves a map behind fails here."""
    with open(path) as handle:
        named = set(re.findall(r"`((?:plugins|roles|playbooks|tests|bench|scripts)/[A-Za-z0-9_./-]+\.(?:py|yml|md|sh))`",
                               handle.read()))
    assert sorted(name for name in named if not os.path.exists(os.path.join(REPO, name))) == []
