"""The supervisor is shipped to the nodes as one file (supervisor_bundle.shipped_source: job_states, job_processes,
free_ports, containers, gang, gang_rules, attempt and supervisor) and runs there on the node's python3: standard
library only, Python 3.8 syntax and calls. These tests fail when it stops being so."""

import ast
import inspect
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import supervisor_bundle

VERMIN = os.path.join(os.path.dirname(sys.executable), "vermin")


def imported_modules(source: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.add(str(node.module).split(".")[0])
    return found


def outside_stdlib(source: str) -> set[str]:
    return {name for name in imported_modules(source) if name not in sys.stdlib_module_names}


def vermin_violations(path: str) -> subprocess.CompletedProcess:
    return subprocess.run([VERMIN, "-t=3.8-", "--violations", "--no-tips", path], capture_output=True, text=True,
                          check=False)


@pytest.fixture(name="shipped")
def fixture_shipped(tmp_path):
    path = tmp_path / "supervisor.py"
    path.write_text(supervisor_bundle.shipped_source())
    return path


def test_the_shipped_supervisor_imports_only_the_standard_library(shipped):
    assert outside_stdlib(shipped.read_text()) == set()
    assert outside_stdlib("import json\nfrom ansible.module_utils.basic import AnsibleModule\n") == {"ansible"}


def test_the_shipped_supervisor_is_python_3_8_syntax(shipped):
    ast.parse(shipped.read_text(), feature_version=(3, 8))
    with pytest.raises(SyntaxError):  # the check sees newer syntax: a match statement is 3.10
        ast.parse("match x:\n    case 1:\n        pass\n", feature_version=(3, 8))


def test_the_shipped_supervisor_calls_nothing_newer_than_python_3_8(tmp_path, shipped):
    done = vermin_violations(str(shipped))
    assert done.returncode == 0, done.stdout + done.stderr
    newer = tmp_path / "newer.py"
    newer.write_text("import math\nprint(math.lcm(4, 6))\n")  # math.lcm is 3.9
    assert vermin_violations(str(newer)).returncode != 0


def test_the_shipped_file_runs_alone(shipped, tmp_path):
    """With nothing of the collection importable: its usage line, from a folder of its own."""
    done = subprocess.run([sys.executable, "-I", str(shipped)], capture_output=True, text=True, cwd=tmp_path,
                          check=False)
    assert done.returncode == 2 and done.stderr == "usage: supervisor.py JOB_DIR | supervisor.py --pick-ports N\n", \
        done.stderr
    # The ports Slurm's first step picks on node 0 (scheduler=slurm): different, free, in torchrun's range.
    picked = subprocess.run([sys.executable, "-I", str(shipped), "--pick-ports", "3"], capture_output=True, text=True,
                            cwd=tmp_path, check=True).stdout.strip().split(",")
    assert len(set(picked)) == 3 and all(29500 <= int(port) <= 29999 for port in picked), picked
    # Each part after the parts it imports (supervisor_bundle.parts, derived from the imports), supervisor.py last.
    parts = supervisor_bundle.parts()
    for index, part in enumerate(parts):
        before = {earlier.__name__ for earlier in parts[:index]}
        assert set(supervisor_bundle.part_imports(part)) <= before, part.__name__
    assert parts[-1].__name__.endswith("._runtime.supervisor")


def _defined(source: str) -> set:
    """The top-level names a part defines (functions, classes, assignments), not those it imports."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_no_two_parts_of_the_shipped_file_define_one_name():
    """In the one file, a later part's name would silently replace an earlier part's."""
    owners = {}
    for part in supervisor_bundle.parts():
        for name in _defined(inspect.getsource(part)):
            owners.setdefault(name, []).append(part.__name__.rsplit(".", 1)[-1])
    assert {name: parts for name, parts in owners.items() if len(parts) > 1} == {}
    assert _defined("def cancel():\n    pass\nX = 1\nimport os\n") == {"cancel", "X"}
