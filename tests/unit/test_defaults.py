"""One home per default (issue 26): where a setting's default is written in more than one place - the playbooks'
-e mappings, the job role's defaults, the modules' documented defaults, job_states.Defaults - the places agree,
and every gpufleet_* inventory variable has one default wherever a role or playbook falls back on one and in
docs/inventory.md's table. Each test
names the setting and the places that differ.

What it does not check: a default that is a computation (``gpufleet_gpus`` falls back on Slurm's facts) and the
modules' own validation of the values."""

import collections
import glob
import importlib
import os
import re

import pytest
import yaml

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import launch_options
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import Defaults
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.restart_policy import DEFAULT_RESTART_ON

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_LAST_DEFAULT = re.compile(r"default\(([^()]*)\)\s*\)*\s*}}\s*$")
_DOC_ROW = re.compile(r"^\| `(gpufleet_\w+)` \| `([^`]*)` \|", re.MULTILINE)
_INVENTORY_DEFAULT = re.compile(r"\b(gpufleet_\w+)\s*\|\s*default\(([^()]*)\)")


def _literal(text: str) -> object:
    """A Jinja literal as a value ('x', 5, [], true, none)."""
    value = yaml.safe_load(text)
    return None if value == "none" else value


def _fallback(value: object) -> object:
    """The value a setting ends on when nothing is set: a template's last default(), or the value itself."""
    if isinstance(value, str) and "{{" in value:
        found = _LAST_DEFAULT.search(value.strip())
        return _literal(found.group(1)) if found else "<computed>"
    return value


def _role_defaults() -> dict:
    with open(os.path.join(ROOT, "roles", "job", "defaults", "main.yml")) as handle:
        return yaml.safe_load(handle)


def _module_defaults(name: str) -> dict:
    module = importlib.import_module("ansible_collections.gpufleet.cluster.plugins.modules." + name)
    options = yaml.safe_load(module.DOCUMENTATION).get("options") or {}
    return {option: spec.get("default") for option, spec in options.items()}


def _launch_default(path: str) -> object:
    spec = launch_options.argument_spec()
    group, _, option = path.rpartition(".")
    return (spec[group]["options"] if group else spec)[option].get("default")


# The job role's variable -> the other places its default is written.
HOMES = {
    "job_python": {"launch python": _launch_default("python"), "node_probe python": _module_defaults("node_probe")["python"]},
    "job_jobs_dir": {"Defaults.JOBS_DIR": Defaults.JOBS_DIR, "launch jobs_dir": _launch_default("jobs_dir")},
    "job_stop_grace_s": {"Defaults.GRACE_S": Defaults.GRACE_S, "launch supervision.grace_s": _launch_default("supervision.grace_s")},
    "job_hang_startup_s": {"Defaults.HANG_STARTUP_S": Defaults.HANG_STARTUP_S,
                           "launch supervision.hang_startup_s": _launch_default("supervision.hang_startup_s")},
    "job_heartbeat_s": {"Defaults.HEARTBEAT_S": Defaults.HEARTBEAT_S, "launch gang.heartbeat_s": _launch_default("gang.heartbeat_s")},
    "job_heartbeat_misses": {"Defaults.HEARTBEAT_MISSES": Defaults.HEARTBEAT_MISSES,
                             "launch gang.heartbeat_misses": _launch_default("gang.heartbeat_misses")},
    "job_launcher": {"launch launcher": _launch_default("launcher"), "job_plan launcher": _module_defaults("job_plan")["launcher"],
                     "node_probe launcher": _module_defaults("node_probe")["launcher"],
                     "job_export launcher": _module_defaults("job_export")["launcher"]},
    "job_scheduler": {"launch scheduler": _launch_default("scheduler"), "job_plan scheduler": _module_defaults("job_plan")["scheduler"]},
    "job_max_restarts": {"launch supervision.max_restarts": _launch_default("supervision.max_restarts"),
                         "job_plan max_restarts": _module_defaults("job_plan")["max_restarts"]},
    "job_restart_on": {"launch supervision.restart_on": _launch_default("supervision.restart_on"),
                       "restart_policy.DEFAULT_RESTART_ON": list(DEFAULT_RESTART_ON)},
    "job_group": {"job_plan group": _module_defaults("job_plan")["group"], "job_export group": _module_defaults("job_export")["group"]},
    "job_logs_dir": {"job_plan logs_dir": _module_defaults("job_plan")["logs_dir"]},
    "job_wait": {"job_plan wait": _module_defaults("job_plan")["wait"]},
    "job_poll_interval_s": {"job_wait poll_s": _module_defaults("job_wait")["poll_s"]},
    "job_progress_interval_s": {"job_wait progress_s": _module_defaults("job_wait")["progress_s"]},
    "job_container_engine": {"job_plan container_engine": _module_defaults("job_plan")["container_engine"]},
    "job_container_pull": {"job_plan container_pull": _module_defaults("job_plan")["container_pull"]},
}


@pytest.mark.parametrize("variable", sorted(HOMES))
def test_a_settings_default_is_the_same_in_every_place_it_is_written(variable):
    role = _fallback(_role_defaults()[variable])
    differ = {place: value for place, value in HOMES[variable].items() if value != role}
    assert differ == {}, "%s defaults to %r in roles/job/defaults/main.yml" % (variable, role)


def test_the_playbooks_fall_back_on_the_role_defaults():
    defaults = _role_defaults()
    differ, compared = {}, 0
    for path in sorted(glob.glob(os.path.join(ROOT, "playbooks", "*.yml"))):
        with open(path) as handle:
            plays = yaml.safe_load(handle) or []
        for play in plays:
            for task in play.get("tasks") or []:
                for variable, value in (task.get("vars") or {}).items():
                    compared += variable in defaults
                    if variable in defaults and _fallback(value) != _fallback(defaults[variable]):
                        differ["%s %s" % (os.path.basename(path), variable)] = (_fallback(value),
                                                                                 _fallback(defaults[variable]))
    assert compared > 20 and differ == {}


def test_each_inventory_variable_has_one_default_everywhere():
    found = collections.defaultdict(lambda: collections.defaultdict(list))
    paths = glob.glob(os.path.join(ROOT, "roles", "**", "*.yml"), recursive=True)
    paths += glob.glob(os.path.join(ROOT, "roles", "**", "*.j2"), recursive=True)
    paths += glob.glob(os.path.join(ROOT, "playbooks", "*.yml"))
    for path in paths:
        with open(path) as handle:
            text = handle.read()
        for match in _INVENTORY_DEFAULT.finditer(text):
            literal = match.group(2).strip()
            if re.match(r"^[A-Za-z_]\w*(\s|\.|\||$)", literal) and literal not in ("true", "false", "none"):
                continue  # a computed fallback (another variable, a fact)
            found[match.group(1)][repr(_literal(literal))].append(os.path.relpath(path, ROOT))
    assert len(found) > 15
    # docs/inventory.md's table, where its default is one literal (not "ansible_host, else the name").
    with open(os.path.join(ROOT, "docs", "inventory.md")) as handle:
        for row in _DOC_ROW.finditer(handle.read()):
            if row.group(1) in found:
                found[row.group(1)][repr(_literal(row.group(2)))].append("docs/inventory.md")
    assert sum("docs/inventory.md" in paths for values in found.values() for paths in values.values()) > 15
    assert {name: dict(values) for name, values in found.items() if len(values) > 1} == {}


def test_the_checks_see_a_difference():
    assert _fallback("{{ gpufleet_launcher | default('torchrun') }}") == "torchrun"
    assert _fallback("{{ launcher | default(gpufleet_launcher | default('deepspeed')) }}") == "deepspeed"
    assert _fallback("{{ nproc_per_node | default(none) }}") is None
    assert _fallback(5) == 5
