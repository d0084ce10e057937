"""The bounds the plugins keep so that a reader can hold each piece (issue 26): no file over 400 lines, no
function over 60, no module with more than 25 options (its doc fragments' counted). Each test names what is over."""

import ast
import glob
import importlib
import os

import yaml

PLUGINS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "plugins")
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_MODULE_OPTIONS = 25


def _sources() -> list[str]:
    return sorted(glob.glob(os.path.join(PLUGINS, "**", "*.py"), recursive=True))


def _name(path: str) -> str:
    return os.path.relpath(path, PLUGINS)


def test_no_plugin_file_is_over_400_lines():
    lines = {_name(path): open(path).read().count("\n") for path in _sources()}
    assert len(lines) > 50
    assert {name: count for name, count in lines.items() if count > MAX_FILE_LINES} == {}


def _long_functions(source: str) -> dict[str, int]:
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found[node.name] = length
    return found


def test_no_plugin_function_is_over_60_lines():
    long = {}
    for path in _sources():
        long.update({"%s %s" % (_name(path), name): n for name, n in _long_functions(open(path).read()).items()})
    assert long == {}


def test_the_function_check_counts_a_long_function():
    body = "".join("    x%d = %d\n" % (i, i) for i in range(60))
    assert _long_functions("def f():\n" + body) == {"f": 61}
    assert _long_functions("def f():\n" + body[: body.rindex("    x")]) == {}


def _option_count(path: str) -> int:
    source = open(path).read()
    doc = yaml.safe_load(source.split('DOCUMENTATION = r"""', 1)[1].split('"""', 1)[0])
    options = set(doc.get("options") or {})
    for name in doc.get("extends_documentation_fragment") or []:
        if not name.startswith("gpufleet.cluster."):
            continue
        module_name, _, variable = name[len("gpufleet.cluster."):].partition(".")
        fragment = importlib.import_module("ansible_collections.gpufleet.cluster.plugins.doc_fragments." + module_name)
        text = getattr(fragment.ModuleDocFragment, (variable or "documentation").upper())
        options |= set(yaml.safe_load(text).get("options") or {})
    return len(options)


def test_no_module_has_more_than_25_options():
    modules = [path for path in glob.glob(os.path.join(PLUGINS, "modules", "*.py")) if not path.endswith("__init__.py")]
    counts = {os.path.basename(path): _option_count(path) for path in modules}
    assert counts["launch.py"] == 25  # its doc fragment's 24 (with the health group) and jobs_dir's fragment's one
    assert {name: count for name, count in counts.items() if count > MAX_MODULE_OPTIONS} == {}
