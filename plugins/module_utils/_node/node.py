# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read-only facts about a node that a launch depends on: the training Python, environment files (its free ports:
free_ports.py).

GPUs are counted by nvidia_node.nvidia_smi_gpus, the one reader of nvidia-smi's GPU list."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterable, Iterator

# Run by the training Python: finds torch, DeepSpeed and Horovod without importing them (seconds, not minutes),
# and reads torch's version from its installed metadata: the one <name>-<version>.dist-info beside the package, as
# importlib.metadata would find it there, or importlib.metadata itself where there is not exactly one (an egg, an
# editable install, two left by an upgrade). Importing importlib.metadata is half of this check's CPU (23 of 50 ms on
# the bench's nodes: it imports email, zipfile, csv), and every launch's probe runs it on every node.
PYTHON_CHECK = """
import importlib.util, json, os, sys
def installed(name):
    return importlib.util.find_spec(name) is not None
def beside(name):
    spec = importlib.util.find_spec(name)
    folders = list(spec.submodule_search_locations or []) if spec else []
    if len(folders) != 1:
        return None
    root = os.path.dirname(folders[0])
    prefix = name.lower() + '-'
    found = [entry for entry in os.listdir(root) if entry.lower().startswith(prefix) and entry.endswith('.dist-info')
             and entry[len(prefix):len(prefix) + 1].isdigit() and '-' not in entry[len(prefix):-len('.dist-info')]]
    if len(found) != 1:
        return None
    with open(os.path.join(root, found[0], 'METADATA'), errors='replace') as handle:
        for line in handle:
            if line.startswith('Version:'):
                return line.split(':', 1)[1].strip()
            if not line.strip():
                return None
    return None
def version_of(name):
    try:
        if not installed(name):
            return None
        found = beside(name)
        if found:
            return found
        from importlib.metadata import version
        return version(name)
    except Exception:
        return None
print(json.dumps({'executable': sys.executable, 'version': '%d.%d.%d' % sys.version_info[:3],
                  'torch': installed('torch'), 'torch_version': version_of('torch'),
                  'deepspeed': installed('deepspeed'), 'horovod': installed('horovod')}))
"""


def launcher_missing(launcher: str, python: dict, which: Callable[[str], str | None] = shutil.which) -> str:
    """What this node lacks for the launcher ('' when nothing): checked before anything is changed."""
    if launcher == "deepspeed" and python.get("found") and not python.get("deepspeed"):
        return "needs DeepSpeed in gpufleet_python (%s); install it there (python_env_extra_packages)" % python.get("path")
    if launcher == "mpirun" and not which("mpirun"):
        return "needs Open MPI's mpirun on the node's PATH (the mpi role installs it)"
    if launcher == "horovodrun":
        if python.get("found") and not python.get("horovod"):
            return "needs Horovod in gpufleet_python (%s)" % python.get("path")
        if not which("horovodrun"):
            return "needs horovodrun on the node's PATH"
    return ""


def python_info(python: str, run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> dict:
    """Where the training Python is, its version, whether it can import torch (found, not imported) and torch's
    version: the one probe of the training Python, for the launch (node_probe) and for verify (stack_facts)."""
    path = python if os.sep in python else shutil.which(python)
    if not path or not os.access(path, os.X_OK):
        return {"found": False, "python": python}
    try:
        done = run([path, "-c", PYTHON_CHECK], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"found": False, "python": python, "error": str(exc)}
    if done.returncode != 0:
        return {"found": False, "python": python, "error": done.stderr.strip()[-500:]}
    info = json.loads(done.stdout.strip().splitlines()[-1])
    info.update(found=True, python=python, path=path)
    return info


_ENV_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=")


def _assignments(paths: Iterable[str]) -> Iterator[tuple[str, str]]:
    """Each assignment in the readable ones of these shell environment files, in order: its name and the rest of
    its line after the '='."""
    for path in paths:
        try:
            with open(os.path.expanduser(path), errors="replace") as handle:
                for line in handle:
                    match = _ENV_ASSIGNMENT.match(line)
                    if match:
                        yield match.group(1), line[match.end():]
        except OSError:
            continue


def env_file_names(paths: Iterable[str]) -> list[str]:
    """The variable names that the readable ones of these shell environment files assign, sorted."""
    return sorted({name for name, _value in _assignments(paths)})


def env_file_value(paths: Iterable[str], name: str) -> str | None:
    """The value the last readable assignment of name in these shell environment files gives it, in the order the
    launch script sources them (the later file's wins); None where none assigns it."""
    found = None
    for assigned, rest in _assignments(paths):
        if assigned == name:
            try:
                words = shlex.split(rest, comments=True)
            except ValueError:
                continue
            found = words[0] if words else ""
    return found
