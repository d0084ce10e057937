"""Every role documents its variables: meta/argument_specs.yml and defaults/main.yml agree."""

import os

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
            assert spec.get("default") == defaults[name], "%s: %s default differs" % (role, name)
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
