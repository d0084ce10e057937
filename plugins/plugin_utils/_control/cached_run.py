# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The controller's half of a node operation's light path (module_utils/_job/cached_runner.py, the node's half):
the module_utils tree and its digest, the one shell command and its request, and the answer read back.

An action runs an operation as ``run(execute, python, entry, args, ...)``: one shell command on the node, the runner
and the arguments on standard input; where the node lacks this digest's tree, a second with the tree. None means the light path gave no
answer of its own (no Python at that path, a shell that printed something else, a connection that cannot pass
standard input): the action then runs the module as Ansible always would."""

from __future__ import annotations

import base64
import functools
import hashlib
import inspect
import json
import os
import shlex
import zlib
from typing import Any

from ansible.errors import AnsibleError
from ansible.module_utils.common.parameters import remove_values
from ansible.utils.display import Display

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import cached_runner
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import supervisor_bundle

# The tree as the node holds it: module_utils under its import path, an __init__.py in each package (a regular
# package: a namespace package of the same name elsewhere on the node's sys.path does not mix with it).
_PACKAGE = ("ansible_collections", "gpufleet", "cluster", "plugins", "module_utils")
display = Display()

MODULE_UTILS = os.path.dirname(os.path.dirname(os.path.abspath(cached_runner.__file__)))


@functools.lru_cache(maxsize=None)
def tree() -> tuple[str, str]:
    """(digest, files as JSON) of this checkout's module_utils: every .py file, and the packages' __init__.py."""
    files: dict[str, str] = {}
    for depth in range(1, len(_PACKAGE) + 1):
        files["/".join(_PACKAGE[:depth] + ("__init__.py",))] = ""
    for folder, dirs, names in os.walk(MODULE_UTILS):
        dirs[:] = sorted(name for name in dirs if name != "__pycache__")
        relative = os.path.relpath(folder, MODULE_UTILS)
        prefix = "/".join(_PACKAGE + (() if relative == "." else tuple(relative.split(os.sep))))
        files.setdefault(prefix + "/__init__.py", "")
        for name in sorted(names):
            if name.endswith(".py"):
                with open(os.path.join(folder, name), encoding="utf-8") as handle:
                    files["%s/%s" % (prefix, name)] = handle.read()
    text = json.dumps(files, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24], text


def packed_tree() -> str:
    """The tree as a request carries it (base64 of zlib of its JSON: cached_runner.unpack()); made only for a node
    that lacks it, since compressing it costs each fork of the controller more than reading it. With the tree, the
    supervisor's one file as built from it (supervisor_bundle.SHIPPED_FILE), which the digest of the tree names too:
    a launch there reads it rather than build it."""
    files = json.loads(tree()[1])
    files["/".join(_PACKAGE + ("_runtime", supervisor_bundle.SHIPPED_FILE))] = supervisor_bundle.build_source()
    return base64.b64encode(zlib.compress(json.dumps(files, sort_keys=True).encode("utf-8"), 6)).decode("ascii")


# The command line: the runner's source comes on standard input's first line (a JSON string), the request after
# it; a short line in ps and at -vvv, and nothing of the request in it.
BOOT = "import json,sys;exec(json.loads(sys.stdin.buffer.readline()))"


def command(python: str) -> str:
    """The shell command. The interpreter is written as Ansible writes it into a module's first line: as given,
    so that ``/usr/bin/env python3`` works."""
    return "%s -c %s" % (python, shlex.quote(BOOT))


def request(entry: str, args: dict, check_mode: bool, diff: bool, with_tree: bool,
            environment: dict | None = None) -> bytes:
    """Standard input: cached_runner.py's source, then the request (with the tree where the node lacks it). The
    task's environment (its ``environment`` keyword) comes here too, as a module run has it in its payload: its
    values may be secrets, and never are in a command line."""
    body: dict[str, Any] = {"digest": tree()[0], "entry": entry, "args": args, "check_mode": check_mode, "diff": diff,
                            "environment": {str(name): str(value) for name, value in (environment or {}).items()}}
    if with_tree:
        body["files"] = packed_tree()
    return ("%s\n%s" % (json.dumps(inspect.getsource(cached_runner)), json.dumps(body))).encode("utf-8")


def parse(stdout: str) -> dict | None:
    """The answer after the mark, or None where the output has none."""
    _before, mark, after = (stdout or "").rpartition("\n%s\n" % cached_runner.MARK)
    if not mark:
        return None
    try:
        answer = json.loads(after.strip().splitlines()[0])
    except (ValueError, IndexError):
        return None
    return answer if isinstance(answer, dict) else None


def run(execute: Any, python: str, entry: str, args: dict, check_mode: bool, diff: bool,
        environment: dict | None = None) -> dict | None:
    """The operation's answer, through execute (an action's _low_level_execute_command), or None (see above)."""
    for with_tree in (False, True):
        done = execute(command(python), sudoable=True,
                       in_data=request(entry, args, check_mode, diff, with_tree, environment))
        answer = parse(done.get("stdout") or "")
        if answer is None:
            display.vvv("the light path's command ended with rc %s and no answer; its output: %r" % (
                done.get("rc"), ((done.get("stdout") or "")[-500:] + (done.get("stderr") or "")[-500:])))
            return None
        if not answer.get("missing"):
            return answer
    return None


def controller_spec(spec: dict) -> dict:
    """The spec with each path (and list of paths) a plain string: Ansible's validator would expand ``~`` and
    ``$VAR`` on the controller, while AnsibleModule expands them on the node (light_args.expand_paths does)."""
    converted = {}
    for name, option in spec.items():
        option = dict(option)
        if option.get("type") == "path":
            option["type"] = "str"
        if option.get("elements") == "path":
            option["elements"] = "str"
        if "options" in option:
            option["options"] = controller_spec(option["options"])
        converted[name] = option
    return converted


def known_python(action: Any, module: str, task_vars: dict, discover: bool) -> str | None:
    """The node's Python as a module run of this task would use it: set (ansible_python_interpreter), discovered
    by an earlier module run of this play, or, with discover, found as Ansible finds it for the module (its
    interpreter discovery, one shell command, its fact returned by the action as a module run returns it). None
    for a delegated or async task, which run the module."""
    if action._task.delegate_to or action._task.async_val:  # pylint: disable=protected-access
        return None
    explicit = task_vars.get("ansible_python_interpreter")
    if explicit is not None:
        value = str(action._templar.template(explicit)).strip()  # pylint: disable=protected-access
        if value and not value.startswith("auto"):
            return value
    found = (task_vars.get("ansible_facts") or {}).get("discovered_interpreter_python")
    if found:
        return str(found)
    if not discover:
        return None
    built, _path = action._configure_module(module, {}, task_vars)  # pylint: disable=protected-access
    shebang = (built.shebang or "").strip()
    return shebang[2:].strip() if shebang.startswith("#!") and "python" in shebang else None


def action_run(action: Any, module: str, entry: str, spec: dict, task_vars: dict, discover: bool = False) -> dict:
    """An action's result for its module's task: the options validated here against the module's spec, the
    operation run by its light path where it can (run() above), the module run as Ansible would otherwise."""
    host = task_vars.get("inventory_hostname")
    validation, args = action.validate_argument_spec(argument_spec=controller_spec(spec))
    python = known_python(action, module, task_vars, discover)
    answer = None
    if python is not None:
        environment: dict = {}
        action._compute_environment_string(environment)  # pylint: disable=protected-access  # templated, as for a module
        try:
            answer = run(action._low_level_execute_command, python, entry, args,  # pylint: disable=protected-access
                         bool(action._task.check_mode), bool(action._task.diff),  # pylint: disable=protected-access
                         environment)
        except AnsibleError as exc:  # a connection that cannot pass standard input, say
            display.vvv("%s: the light path of %s failed: %s" % (host, module, exc))
        if answer is None:
            display.warning("%s: the light path of %s gave no answer of its own; the module runs instead (-vvv "
                            "shows why)" % (host, module))
    if answer is None:
        return action._execute_module(module, module_args=action._task.args,  # pylint: disable=protected-access
                                      task_vars=task_vars)
    # As AnsibleModule does: no value of a no_log option (secret_env, the gang key) in what is returned.
    answer = remove_values(answer, validation._no_log_values)  # pylint: disable=protected-access
    key = action._discovered_interpreter_key  # pylint: disable=protected-access
    if key:  # as _execute_module returns it: the next tasks of the play use the same Python
        answer.setdefault("ansible_facts", {})[key] = action._discovered_interpreter  # pylint: disable=protected-access
    return answer
