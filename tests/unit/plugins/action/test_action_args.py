"""Every action plugin validates its arguments against the options its documentation shows."""

import importlib
import os
from unittest import mock

import pytest
from ansible.errors import AnsibleActionFail
from ansible.playbook.task import Task

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import action_args

# (action, its boolean options, the arguments it requires)
ACTIONS = [
    ("job_wait", ["progress"], {"job": "j"}),
    ("job_report", ["show_job", "fail_on_error"], {"job": "j", "results": []}),
    ("job_plan", ["script_on_nodes", "wait"], {"script": "train.py"}),
    ("job_nodes", ["force"], {"plan": {"hosts": []}}),
    ("maintenance", ["stop_jobs"], {"step": "plan", "logs_dir": "/tmp/r"}),
]
REQUIRED = {name: required for name, _, required in ACTIONS}
REQUIRED.update(nccl_report={"output": "", "report_dir": "/tmp/r"}, stack_report={"results": {}},
                fleet_history={"logs_dir": "/tmp/r", "nodes": []}, health_check={"hosts": [], "logs_dir": "/tmp/r"},
                job_export={"format": "sbatch", "script": "t.py"})
ALL_ACTIONS = sorted(REQUIRED)
# The actions of a module that runs on the node (the light path, plugin_utils/_control/cached_run.py): they validate
# against the module's own argument spec, which carries no_log and apply_defaults, and which ansible-test's
# validate-modules holds to the documentation (test_cached_run.py tests them).
LIGHT_ACTIONS = ["launch", "node_probe"]


def test_every_action_plugin_is_checked_here():
    folder = os.path.dirname(importlib.import_module("ansible_collections.gpufleet.cluster.plugins.action.job_plan").__file__)
    found = sorted(name[:-3] for name in os.listdir(folder) if name.endswith(".py") and name != "__init__.py")
    assert found == sorted(ALL_ACTIONS + LIGHT_ACTIONS)


@pytest.mark.parametrize("name", LIGHT_ACTIONS)
def test_each_light_path_action_validates_against_its_modules_spec(name):
    source = open(importlib.import_module("ansible_collections.gpufleet.cluster.plugins.action.%s" % name).__file__).read()
    assert "cached_run.action_run(self, \"gpufleet.cluster.%s\"" % name in source
    assert "self._task.args" not in source and "_VALID_ARGS" not in source


def action(name, args):
    task = Task()
    task.args = args
    module = importlib.import_module("ansible_collections.gpufleet.cluster.plugins.action.%s" % name)
    return module.ActionModule(task, mock.Mock(), mock.Mock(), loader=None, templar=None, shared_loader_obj=None)


def documentation(name):
    return importlib.import_module("ansible_collections.gpufleet.cluster.plugins.modules.%s" % name).DOCUMENTATION


@pytest.mark.parametrize("name, booleans, required", ACTIONS)
@pytest.mark.parametrize("word", ["false", "no", "0", "False", "off"])
def test_false_strings_are_false(name, booleans, required, word):
    args = action_args.validated(action(name, dict(required, **{option: word for option in booleans})),
                                 documentation(name))
    assert all(args[option] is False for option in booleans)


@pytest.mark.parametrize("name, booleans, required", ACTIONS)
def test_a_word_that_is_not_a_boolean_is_refused_naming_the_option(name, booleans, required):
    with pytest.raises(AnsibleActionFail, match="argument '%s' is of type str" % booleans[0]):
        action_args.validated(action(name, dict(required, **{booleans[0]: "maybe"})), documentation(name))


@pytest.mark.parametrize("name", ALL_ACTIONS)
def test_unknown_options_are_refused(name):
    with pytest.raises(AnsibleActionFail, match="Unsupported parameters.*no_such_option"):
        action_args.validated(action(name, dict(REQUIRED[name], no_such_option=1)), documentation(name))


@pytest.mark.parametrize("name", ALL_ACTIONS)
def test_each_action_plugin_validates_against_its_documentation(name):
    """No action plugin reads self._task.args by hand (the spec comes from the documentation, via action_args)."""
    source = open(importlib.import_module("ansible_collections.gpufleet.cluster.plugins.action.%s" % name).__file__).read()
    assert "action_args.validated(self, documentation.DOCUMENTATION)" in source
    assert "self._task.args" not in source and "_VALID_ARGS" not in source


def test_the_spec_follows_the_documentation_suboptions_included():
    spec = action_args.spec_from_documentation("""
options:
  a: {description: x, type: bool, default: false}
  b: {description: y, type: list, elements: dict, required: true, suboptions: {c: {description: z, type: int}}}
""")
    assert spec == {"a": {"type": "bool", "default": False},
                    "b": {"type": "list", "elements": "dict", "required": True, "options": {"c": {"type": "int"}}}}


def test_options_of_the_collections_fragments_are_part_of_the_spec():
    from ansible_collections.gpufleet.cluster.plugins.modules import job_wait

    spec = action_args.spec_from_documentation(job_wait.DOCUMENTATION)
    assert spec["jobs_dir"] == {"type": "path", "default": "~/.gpufleet/jobs"}  # from gpufleet.cluster.job_folder
    assert "check_mode" not in spec  # ansible.builtin's attribute fragments carry no options
