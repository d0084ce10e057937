"""The light path of the launch and the probe (plugin_utils/_control/cached_run.py on the controller,
module_utils/_job/cached_runner.py on the node): the runner is run for real, as the node's shell would run the
command, with its cache under a temporary HOME; the action is the real ActionModule with the connection replaced by
that shell."""

import json
import os
import stat
import subprocess
import sys
from types import SimpleNamespace

import pytest
from ansible.errors import AnsibleActionFail
from ansible.module_utils.testing import patch_module_args
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.gpufleet.cluster.plugins.action import launch as launch_action
from ansible_collections.gpufleet.cluster.plugins.action import node_probe as probe_action
from ansible_collections.gpufleet.cluster.plugins.module_utils._job import cached_runner, launch_options, light_args
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import supervisor_bundle
from ansible_collections.gpufleet.cluster.plugins.modules import launch as launch_module
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import cached_run


class Node:
    """The node's shell: runs the command with this HOME (the cache's place) and records each run."""

    def __init__(self, home):
        self.home = str(home)
        self.runs = []

    def env(self):
        env = {key: value for key, value in os.environ.items() if key != "XDG_CACHE_HOME"}
        env.update(HOME=self.home, PYTHONDONTWRITEBYTECODE="1")  # as on some nodes: compiled files are still kept
        return env

    def execute(self, cmd, sudoable=True, in_data=None):
        done = subprocess.run(["/bin/sh", "-c", cmd], input=in_data, env=self.env(), capture_output=True,
                              timeout=120, check=False)
        self.runs.append(json.loads(in_data.split(b"\n", 1)[1]))
        return {"rc": done.returncode, "stdout": done.stdout.decode(), "stderr": done.stderr.decode()}

    def cache(self):
        return os.path.join(self.home, ".cache", "gpufleet", "runtime")


def launch_args(tmp_path, **extra):
    args = {"job": "light", "node_rank": 0, "nnodes": 1, "nproc_per_node": 1, "master_addr": "192.0.2.10",
            "master_port": 29500, "python": sys.executable, "script": "train.py", "jobs_dir": "~/jobs",
            "workdir": str(tmp_path)}
    args.update(extra)
    return args


def validated(args, spec):
    """The options as the action validates them (cached_run.controller_spec: paths not expanded)."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    outcome = ArgumentSpecValidator(cached_run.controller_spec(spec)).validate(args)
    assert not outcome.error_messages, outcome.error_messages
    return outcome.validated_parameters


def test_the_first_run_asks_for_the_tree_installs_it_compiled_and_later_runs_use_it(tmp_path):
    node = Node(tmp_path / "home")
    args = validated(launch_args(tmp_path), launch_options.argument_spec())
    answer = cached_run.run(node.execute, sys.executable, launch_action.ENTRY, args, True, True)
    assert [("files" in run) for run in node.runs] == [False, True]  # asked, then sent once
    assert answer["changed"] is True and answer["state"] == "absent"  # check mode: nothing started
    digest = cached_run.tree()[0]
    home = os.path.join(node.cache(), digest)
    compiled = [name for _root, _dirs, names in os.walk(home) for name in names if name.endswith(".pyc")]
    assert len(compiled) >= 40  # compiled where installed, though PYTHONDONTWRITEBYTECODE is set
    assert stat.S_IMODE(os.stat(node.cache()).st_mode) == 0o700
    again = cached_run.run(node.execute, sys.executable, launch_action.ENTRY, args, True, True)
    assert [("files" in run) for run in node.runs] == [False, True, False]  # the cached tree, no resend
    assert again["job_dir"] == answer["job_dir"] == os.path.join(node.home, "jobs", "light")  # the node's ~


def test_the_light_answer_is_the_modules_for_the_same_options(tmp_path, capsys, monkeypatch):
    node = Node(tmp_path / "home")
    monkeypatch.setenv("HOME", node.home)
    options = launch_args(tmp_path, env={"A": "1"}, script_args=["--x", "y z"])
    light = cached_run.run(node.execute, sys.executable, launch_action.ENTRY,
                           validated(options, launch_options.argument_spec()), True, True)
    with patch_module_args(dict(options, _ansible_check_mode=True, _ansible_diff=True)):
        with pytest.raises(SystemExit):
            launch_module.main()
    module = json.loads(capsys.readouterr().out)
    for key in ("run_id", "invocation"):
        light.pop(key, None)
        module.pop(key, None)
    assert light == module


def test_a_tree_folder_others_may_write_is_not_used_and_the_run_leaves_no_copy(tmp_path, monkeypatch):
    node = Node(tmp_path / "home")
    args = validated(launch_args(tmp_path), launch_options.argument_spec())
    cached_run.run(node.execute, sys.executable, launch_action.ENTRY, args, True, False)
    home = os.path.join(node.cache(), cached_run.tree()[0])
    os.chmod(home, 0o777)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    node.runs.clear()
    answer = cached_run.run(node.execute, sys.executable, launch_action.ENTRY, args, True, False)
    assert [("files" in run) for run in node.runs] == [False, True]  # not trusted: asked for the tree again
    assert answer["state"] == "absent"
    assert os.listdir(temporary) == []  # ran from a private copy, removed after


def test_a_refusal_and_a_crash_are_answers_not_silence(tmp_path):
    node = Node(tmp_path / "home")
    bad = validated(launch_args(tmp_path, job="no/slash"), launch_options.argument_spec())
    refused = cached_run.run(node.execute, sys.executable, launch_action.ENTRY, bad, True, False)
    assert refused["failed"] is True and "job: 'no/slash' is not a valid job name" in refused["msg"]
    crashed = cached_run.run(node.execute, sys.executable, launch_action.ENTRY + "_missing", {}, True, False)
    assert crashed["failed"] is True and "ModuleNotFoundError" in crashed["msg"]
    assert "Traceback" in crashed["exception"]


def test_the_answer_is_read_after_a_login_scripts_output_and_nothing_else_is_taken_for_one():
    answer = {"changed": False, "x": 1}
    noise = "Welcome to node1\n{\"changed\": true}\n"
    assert cached_run.parse(noise + "\n%s\n%s\n" % (cached_runner.MARK, json.dumps(answer))) == answer
    assert cached_run.parse(noise) is None
    assert cached_run.parse("\n%s\nnot json\n" % cached_runner.MARK) is None
    assert cached_run.parse("") is None


def test_paths_are_expanded_on_the_node_not_validated_as_paths_on_the_controller():
    spec = {"a": {"type": "path"}, "b": {"type": "list", "elements": "path"},
            "g": {"type": "dict", "options": {"c": {"type": "path"}, "d": {"type": "str"}}}}
    controller = cached_run.controller_spec(spec)
    assert controller == {"a": {"type": "str"}, "b": {"type": "list", "elements": "str"},
                          "g": {"type": "dict", "options": {"c": {"type": "str"}, "d": {"type": "str"}}}}
    assert spec["a"]["type"] == "path"  # the module's own spec is left as it is
    home = os.path.expanduser("~")
    expanded = light_args.expand_paths({"a": "~/x", "b": ["~/y", "/z"], "g": {"c": "~/w", "d": "~/v"}}, spec)
    assert expanded == {"a": home + "/x", "b": [home + "/y", "/z"], "g": {"c": home + "/w", "d": "~/v"}}


def test_the_tree_holds_every_module_utils_file_under_its_import_path_and_a_change_changes_its_digest(
        tmp_path, monkeypatch):
    digest = cached_run.tree()[0]
    files = cached_runner.unpack(cached_run.packed_tree())
    prefix = "ansible_collections/gpufleet/cluster/plugins/module_utils/"
    shipped = {name[len(prefix):] for name in files if name.startswith(prefix) and not name.endswith("__init__.py")}
    on_disk = {os.path.relpath(os.path.join(root, name), cached_run.MODULE_UTILS)
               for root, _dirs, names in os.walk(cached_run.MODULE_UTILS) for name in names if name.endswith(".py")}
    # And the supervisor's one file as built from them (supervisor_bundle.SHIPPED_FILE), which a launch there reads.
    assert shipped == on_disk | {"_runtime/" + supervisor_bundle.SHIPPED_FILE}
    for package in ("ansible_collections", "ansible_collections/gpufleet", prefix + "_job", prefix + "_runtime"):
        assert package.rstrip("/") + "/__init__.py" in files
    copy = tmp_path / "module_utils"
    (copy / "_job").mkdir(parents=True)
    (copy / "_job" / "one.py").write_text("A = 1\n")
    monkeypatch.setattr(cached_run, "MODULE_UTILS", str(copy))
    cached_run.tree.cache_clear()
    try:
        first = cached_run.tree()[0]
        (copy / "_job" / "one.py").write_text("A = 2\n")
        cached_run.tree.cache_clear()
        assert cached_run.tree()[0] != first
    finally:
        cached_run.tree.cache_clear()
    assert digest != first


def test_a_tree_file_outside_the_tree_is_refused(tmp_path):
    with pytest.raises(ValueError, match="outside the tree"):
        cached_runner.write_tree(str(tmp_path / "t"), {"../escape.py": ""})
    assert not (tmp_path / "escape.py").exists()


# The action: the real ActionModule, the connection replaced by the node's shell (or by one that answers nothing).

def action(module_class, args, node, facts=None, **task):
    task_fields = dict(args=args, delegate_to=None, async_val=0, check_mode=True, diff=False, environment=None)
    task_fields.update(task)
    connection = SimpleNamespace(_shell=SimpleNamespace(tmpdir=None, env_prefix=lambda **values: ""))
    instance = module_class(task=SimpleNamespace(**task_fields), connection=connection, play_context=SimpleNamespace(),
                            loader=DataLoader(), templar=Templar(loader=DataLoader()), shared_loader_obj=None)
    instance._low_level_execute_command = node.execute
    instance.modules = []
    instance._execute_module = lambda name, module_args, task_vars: instance.modules.append(name) or {"from": name}
    task_vars = {"inventory_hostname": "node1", "ansible_facts": dict(facts or {})}
    return instance, task_vars


class Silent:
    """A node whose shell answers nothing of the runner's (no Python at that path)."""

    runs = 0

    def execute(self, cmd, sudoable=True, in_data=None):
        self.runs += 1
        return {"rc": 127, "stdout": "", "stderr": "sh: 1: /nowhere/python3: not found"}


def test_the_action_answers_by_the_light_path_where_the_play_knows_the_nodes_python(tmp_path):
    node = Node(tmp_path / "home")
    instance, task_vars = action(launch_action.ActionModule, launch_args(tmp_path), node,
                                 facts={"discovered_interpreter_python": sys.executable})
    result = cached_run.action_run(instance, "gpufleet.cluster.launch", launch_action.ENTRY,
                                   launch_options.argument_spec(), task_vars)
    assert instance.modules == [] and result["state"] == "absent" and len(node.runs) == 2


def test_the_module_runs_where_the_light_path_gives_no_answer_or_the_python_is_not_known(tmp_path, capsys):
    silent = Silent()
    instance, task_vars = action(launch_action.ActionModule, launch_args(tmp_path), silent,
                                 facts={"discovered_interpreter_python": "/nowhere/python3"})
    result = cached_run.action_run(instance, "gpufleet.cluster.launch", launch_action.ENTRY,
                                   launch_options.argument_spec(), task_vars)
    assert result == {"from": "gpufleet.cluster.launch"} and silent.runs == 1
    assert "light path of gpufleet.cluster.launch gave no answer" in capsys.readouterr().err
    unknown, task_vars = action(launch_action.ActionModule, launch_args(tmp_path), silent)  # no Python known yet
    cached_run.action_run(unknown, "gpufleet.cluster.launch", launch_action.ENTRY, launch_options.argument_spec(),
                          task_vars)
    delegated, task_vars = action(launch_action.ActionModule, launch_args(tmp_path), silent, delegate_to="other",
                                  facts={"discovered_interpreter_python": "/usr/bin/python3"})
    cached_run.action_run(delegated, "gpufleet.cluster.launch", launch_action.ENTRY, launch_options.argument_spec(),
                          task_vars)
    assert unknown.modules == delegated.modules == ["gpufleet.cluster.launch"] and silent.runs == 1


def test_the_action_refuses_a_bad_option_on_the_controller_naming_it(tmp_path):
    silent = Silent()
    instance, task_vars = action(launch_action.ActionModule, launch_args(tmp_path, node_rank="first"), silent,
                                 facts={"discovered_interpreter_python": "/usr/bin/python3"})
    with pytest.raises(AnsibleActionFail, match="node_rank"):
        cached_run.action_run(instance, "gpufleet.cluster.launch", launch_action.ENTRY,
                              launch_options.argument_spec(), task_vars)
    unknown, task_vars = action(probe_action.ActionModule, {"no_such_option": 1}, silent,
                                facts={"discovered_interpreter_python": "/usr/bin/python3"})
    with pytest.raises(AnsibleActionFail, match="Unsupported parameters.*no_such_option"):
        unknown.run(task_vars=task_vars)
    assert silent.runs == 0 and instance.modules == unknown.modules == []


def test_no_value_of_a_no_log_option_comes_back_in_the_answer(tmp_path):
    secret = "s3cr3t-value-never-shown"
    node = Node(tmp_path / "home")
    # A refusal that quotes the variable's value would carry it; the action masks it as AnsibleModule does.
    instance, task_vars = action(launch_action.ActionModule,
                                 launch_args(tmp_path, job=secret + "/x", secret_env={"TOKEN": secret}), node,
                                 facts={"discovered_interpreter_python": sys.executable})
    result = cached_run.action_run(instance, "gpufleet.cluster.launch", launch_action.ENTRY,
                                   launch_options.argument_spec(), task_vars)
    assert result["failed"] is True and "is not a valid job name" in result["msg"]
    assert secret not in json.dumps(result)


def test_the_probe_finds_the_python_as_ansible_would_and_returns_the_discovered_fact(tmp_path):
    node = Node(tmp_path / "home")
    instance, task_vars = action(probe_action.ActionModule, {"python": sys.executable, "jobs_dir": "~/jobs"}, node,
                                 check_mode=False)

    def configure(module_name, module_args, task_vars):
        instance._discovered_interpreter_key = "discovered_interpreter_python"
        instance._discovered_interpreter = sys.executable
        return SimpleNamespace(shebang="#!" + sys.executable), "/path/of/" + module_name

    instance._configure_module = configure
    result = instance.run(task_vars=task_vars)
    assert instance.modules == [] and result["jobs_dir"] == os.path.join(node.home, "jobs")
    assert result["python"]["found"] is True and result["changed"] is False
    assert result["ansible_facts"] == {"discovered_interpreter_python": sys.executable}


def test_a_run_as_another_user_with_this_users_home_leaves_nothing_in_it(tmp_path, monkeypatch):
    # As become with the login user's HOME would: the home is not the running user's own.
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(str(tmp_path)).st_uid + 1)
    assert not cached_runner.creatable(str(tmp_path / ".cache" / "gpufleet" / "runtime"))
    with pytest.raises(OSError, match="not in this user's own folder"):
        cached_runner.install(str(tmp_path / ".cache" / "gpufleet" / "runtime"), "d", {"a.py": ""})
    assert os.listdir(str(tmp_path)) == []


def test_the_tasks_environment_reaches_the_operation_and_never_the_command_line(tmp_path):
    import base64
    import inspect
    import zlib

    node = Node(tmp_path / "home")
    files = {"ansible_collections/__init__.py": "",
             "envcheck.py": "import os\n\ndef light_main(args, check_mode, diff):\n"
                            "    return {'seen': os.environ.get('GPUFLEET_T')}\n"}
    body = {"digest": "test", "entry": "envcheck", "args": {}, "environment": {"GPUFLEET_T": "env-secret-1"},
            "files": base64.b64encode(zlib.compress(json.dumps(files).encode())).decode()}
    stdin = ("%s\n%s" % (json.dumps(inspect.getsource(cached_runner)), json.dumps(body))).encode()
    done = node.execute(cached_run.command(sys.executable), in_data=stdin)
    assert cached_run.parse(done["stdout"]) == {"seen": "env-secret-1"}
    assert "env-secret-1" not in cached_run.command(sys.executable)
    # The action passes the task's environment keyword (templated, as for a module) in the request.
    instance, task_vars = action(launch_action.ActionModule, launch_args(tmp_path), node,
                                 facts={"discovered_interpreter_python": sys.executable},
                                 environment=[{"GPUFLEET_T": "env-secret-2"}])
    cached_run.action_run(instance, "gpufleet.cluster.launch", launch_action.ENTRY, launch_options.argument_spec(),
                          task_vars)
    assert node.runs[-1]["environment"] == {"GPUFLEET_T": "env-secret-2"}


def test_a_cached_tree_missing_a_file_is_asked_for_again_and_replaced_once(tmp_path):
    node = Node(tmp_path / "home")
    args = validated(launch_args(tmp_path), launch_options.argument_spec())
    cached_run.run(node.execute, sys.executable, launch_action.ENTRY, args, True, False)
    home = os.path.join(node.cache(), cached_run.tree()[0])
    os.remove(os.path.join(home, "ansible_collections/gpufleet/cluster/plugins/module_utils/_job/launch_run.py"))
    for folder, _dirs, names in os.walk(home):
        for name in names:
            if name.startswith("launch_run.") and name.endswith(".pyc"):
                os.remove(os.path.join(folder, name))
    node.runs.clear()
    answer = cached_run.run(node.execute, sys.executable, launch_action.ENTRY, args, True, False)
    assert [("files" in run) for run in node.runs] == [False, True]
    assert answer["state"] == "absent", answer
    assert os.path.isfile(os.path.join(home, "ansible_collections/gpufleet/cluster/plugins/module_utils/_job/launch_run.py"))
    node.runs.clear()
    assert cached_run.run(node.execute, sys.executable, launch_action.ENTRY, args, True, False)["state"] == "absent"
    assert [("files" in run) for run in node.runs] == [False]  # the new tree serves again


def test_the_tree_holds_the_supervisors_one_file_which_a_launch_there_reads_rather_than_builds(tmp_path):
    """Built on the controller when the tree is sent (cached_run.packed_tree): the node's launch reads it, without
    importing the supervisor's parts or parsing their source."""
    node = Node(tmp_path / "home")
    args = validated(launch_args(tmp_path), launch_options.argument_spec())
    cached_run.run(node.execute, sys.executable, launch_action.ENTRY, args, True, False)
    home = os.path.join(node.cache(), cached_run.tree()[0])
    shipped = os.path.join(home, *cached_run._PACKAGE, "_runtime", supervisor_bundle.SHIPPED_FILE)  # pylint: disable=protected-access
    with open(shipped, encoding="utf-8") as handle:
        assert handle.read() == supervisor_bundle.build_source()
    probe = ("import json, sys; sys.path.insert(0, %r)\n"
             "from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import supervisor_bundle\n"
             "source = supervisor_bundle.shipped_source()\n"
             "print(json.dumps([supervisor_bundle.__file__.startswith(%r), len(source),"
             " [name for name in sys.modules if name.endswith('._runtime.supervisor')]]))" % (home, home))
    done = subprocess.run([sys.executable, "-c", probe], env=node.env(), cwd=str(tmp_path), capture_output=True,
                          text=True, timeout=60, check=True)
    assert json.loads(done.stdout) == [True, len(supervisor_bundle.build_source()), []], done.stderr
    # Where the tree has no such file (a module's zip, this checkout), the one file is built: the same text.
    assert supervisor_bundle.shipped_source() == supervisor_bundle.build_source()
