"""Every role documents its variables: meta/argument_specs.yml and defaults/main.yml agree."""

import os
import re

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLES = sorted(name for name in os.listdir(os.path.join(REPO, "roles")) if not name.startswith("."))


def load(role, *path):
    full = os.path.join(REPO, "roles", role, *path)
    if not os.path.exists(full):
        return None
    with open(full) as handle:
        return yaml.safe_load(handle) or {}


INVENTORY_DEFAULT = re.compile(r"^\{\{ (gpufleet_[a-z_]+) \| default\(([^()]+)\) \}\}$")


def documented_default(value, spec):
    """A number or boolean default taken from an inventory variable ("{{ gpufleet_x | default(5) }}") is documented as
    its fallback (5), which the docs schema (antsibull-docs) can read as the option's type, with the inventory variable
    named in the description. A string, list or dict default keeps the expression, which says where it comes from."""
    found = INVENTORY_DEFAULT.match(value) if isinstance(value, str) else None
    if not found or spec.get("type") not in ("int", "float", "bool"):
        return value
    description = " ".join(spec["description"]) if isinstance(spec["description"], list) else spec["description"]
    assert found.group(1) in description, "the description must name %s, where the default comes from" % found.group(1)
    return yaml.safe_load(found.group(2))


@pytest.mark.parametrize("role", ROLES)
def test_role_has_argument_specs(role):
    assert load(role, "meta", "argument_specs.yml") is not None, "%s has no meta/argument_specs.yml" % role


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_argument_specs_agree(role):
    defaults = load(role, "defaults", "main.yml") or {}
    specs = (load(role, "meta", "argument_specs.yml") or {}).get("argument_specs", {})
    options = {}
    for entry in specs.values():
        options.update(entry.get("options") or {})
    assert sorted(set(defaults) - set(options)) == [], "defaults without an argument spec"
    for name, spec in options.items():
        assert spec.get("description"), "%s: %s has no description" % (role, name)
        if name in defaults and defaults[name] is not None:
            assert spec.get("default") == documented_default(defaults[name], spec), "%s: %s default differs" % (
                role, name)
        if name not in defaults:
            assert "default" not in spec, "%s: %s has a spec default but no defaults/main.yml entry" % (role, name)
    prefix = role + "_"  # an internal role (_name) keeps its leading underscore: _name_*
    assert all(name.startswith(prefix) for name in defaults), "role variables must start with " + prefix


@pytest.mark.parametrize("role", ROLES)
def test_readme_documents_every_default(role):
    readme = os.path.join(REPO, "roles", role, "README.md")
    assert os.path.exists(readme), "%s has no README.md" % role
    text = open(readme).read()
    missing = [name for name in load(role, "defaults", "main.yml") or {} if "`%s`" % name not in text]
    assert missing == [], "%s README does not document %s" % (role, missing)
