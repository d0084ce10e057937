"""Every module of the collection documents itself: ansible-doc renders it, with examples and return values."""

import importlib
import json
import re
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import health_check, standing_metrics

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def plugin_files(kind):
    """The plugin files of plugins/<kind>, by name without .py."""
    return sorted(name[:-3] for name in os.listdir(os.path.join(REPO, "plugins", kind))
                  if name.endswith(".py") and name != "__init__.py")


def ansible_doc(*args):
    """ansible-doc --json of the venv that runs the tests, from the checkout (its ansible.cfg finds the collection)."""
    return subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-doc"), "--json", *args],
                          cwd=REPO, capture_output=True, text=True, check=False)


MODULES = plugin_files("modules")


@pytest.mark.parametrize("module", MODULES)
def test_ansible_doc_renders(module):
    done = ansible_doc("gpufleet.cluster.%s" % module)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)["gpufleet.cluster.%s" % module]
    assert doc["doc"]["short_description"] and doc["examples"].strip() and doc["return"]
    assert "gpufleet.cluster.%s:" % module in doc["examples"]  # examples use the FQCN


OTHER_PLUGINS = [(kind, name) for kind in ("callback", "inventory") for name in plugin_files(kind)]


@pytest.mark.parametrize("kind,name", OTHER_PLUGINS)
def test_ansible_doc_renders_the_other_plugins(kind, name):
    done = ansible_doc("-t", kind, "gpufleet.cluster.%s" % name)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["gpufleet.cluster.%s" % name]["doc"]["short_description"]


def jinja_plugins(kind):
    """(file, the names it defines) for each filter or test plugin file: what ansible-doc must render."""
    found = []
    for name in plugin_files(kind):
        module = importlib.import_module("ansible_collections.gpufleet.cluster.plugins.%s.%s" % (kind, name))
        names = module.FilterModule().filters() if kind == "filter" else module.TestModule().tests()
        found.append((kind, name + ".py", sorted(names)))
    return found


JINJA_PLUGINS = jinja_plugins("filter") + jinja_plugins("test")


@pytest.mark.parametrize("kind,path,names", JINJA_PLUGINS, ids=["%s/%s" % (kind, path) for kind, path, _n in JINJA_PLUGINS])
def test_ansible_doc_renders_every_filter_and_test(kind, path, names):
    """A filter file's DOCUMENTATION that does not parse (a ': ' in a plain YAML scalar) leaves every filter of the
    file without documentation, and no test that runs the filter notices."""
    done = ansible_doc("-t", kind, *["gpufleet.cluster.%s" % name for name in names])
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
    docs = json.loads(done.stdout)
    undocumented = [name for name in names
                    if not (docs.get("gpufleet.cluster.%s" % name, {}).get("doc") or {}).get("short_description")]
    assert names and not undocumented, (path, undocumented)


DOCS = sorted(
    [os.path.join(REPO, name) for name in ("README.md", "CONTRIBUTING.md")]
    + [os.path.join(folder, name) for folder, _dirs, names in os.walk(os.path.join(REPO, "docs"))
       for name in names if name.endswith(".md")]
    + [os.path.join(REPO, "roles", role, "README.md") for role in os.listdir(os.path.join(REPO, "roles"))])
# A command that runs one of the collection's playbooks: by its path in a checkout or by its FQCN.
PLAYBOOK_COMMAND = re.compile(r"ansible-playbook\b(?P<args>[^`\n]*?)\b(playbooks/[a-z_]+\.yml|gpufleet\.cluster\.[a-z_]+)")


def playbook_commands(text):
    """Each ansible-playbook command line that names a playbook, with its continuation lines."""
    found = []
    for match in re.finditer(r"ansible-playbook\b[^\n]*(?:\\\n[^\n]*)*", text):
        if PLAYBOOK_COMMAND.search(match.group(0).replace("\\\n", " ")):
            found.append(match.group(0))
    return found


@pytest.mark.parametrize("path", DOCS, ids=lambda path: os.path.relpath(path, REPO))
def test_every_command_for_servers_names_the_inventory(path):
    with open(path) as handle:
        commands = playbook_commands(handle.read())
    assert [command for command in commands if not re.search(r"(^|\s)-i\s", command)] == []


def test_the_check_finds_a_command_without_inventory():
    assert playbook_commands("run `ansible-playbook playbooks/train.yml -e script=x.py` now")
    assert playbook_commands("    ansible-playbook gpufleet.cluster.verify \\\n        -e pairwise=true\n")
    assert not re.search(r"(^|\s)-i\s", playbook_commands("ansible-playbook playbooks/stop.yml -e job=x")[0])


def table_names(path, pattern):
    """The first column's names of the Markdown tables in path that match pattern."""
    with open(os.path.join(REPO, path)) as handle:
        return set(re.findall(r"^\| `%s` \|" % pattern, handle.read(), re.M))


def test_the_readme_lists_every_playbook():
    playbooks = {name for name in os.listdir(os.path.join(REPO, "playbooks")) if name.endswith(".yml")}
    assert table_names("README.md", r"([a-z_]+\.yml)") == playbooks


def test_the_contributor_guide_lists_every_module():
    assert table_names("CONTRIBUTING.md", r"([a-z_]+)") >= set(MODULES)
    listed = re.findall(r"^\| `([a-z_]+)` \| (?:node|controller) \|", open(os.path.join(REPO, "CONTRIBUTING.md")).read(), re.M)
    assert sorted(listed) == MODULES


def node_metric_names():
    """The names standing_metrics.py writes: its files' stems and every metric of a check with NVLink links down."""
    check = health_check.NodeCheck(health_check.REFUSED, {"gpu": [], "network": []}, 1, "")
    probe = {"gpu_health": {"nvlink": {"0": {"up": 1, "down": [2]}}}}
    text = standing_metrics.standing({"state": "quarantined", "faults": []}, 3) + standing_metrics.health(check, 1.0,
                                                                                                           probe)
    names = set(re.findall(r"^# TYPE (gpufleet_\w+) ", text, re.M))
    assert "gpufleet_node_nvlink_links_down" in names
    return names | {name[:-len(".prom")] for name in (standing_metrics.STANDING_FILE, standing_metrics.HEALTH_FILE)}


def test_the_inventory_page_lists_every_gpufleet_variable_the_collection_reads():
    read = set()
    for top in ("roles", "playbooks", "plugins"):
        for folder, _dirs, names in os.walk(os.path.join(REPO, top)):
            for name in names:
                if name.endswith((".yml", ".py", ".j2")):
                    with open(os.path.join(folder, name)) as handle:
                        read.update(re.findall(r"\b(gpufleet_[a-z0-9_]+)", handle.read()))
    # gpufleet_job and gpufleet_job_*: the Prometheus label and metric names job_metrics.py writes, not variables;
    # nor the metric and file names standing_metrics.py writes (gpufleet_node_state, gpufleet_node_health.prom).
    read = {name for name in read if not re.match(r"gpufleet_job(_|$)", name)} - node_metric_names()
    assert read, "no gpufleet_* variable found: the scan is broken"
    assert table_names("docs/inventory.md", r"(gpufleet_[a-z0-9_]+)") == read
