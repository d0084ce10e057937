# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read-only facts about a node that a launch depends on: the training Python, free ports, environment files.

GPUs are counted by nvidia_node.nvidia_smi_gpus, the one reader of nvidia-smi's GPU list."""

from __future__ import annotations

import errno
import json
import os
import random
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterable

PORT_RANGE = (29500, 29999)


def port_in_use(port: int, host: str = "") -> bool:
    """True when a TCP listener could not bind port on host (all addresses by default)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def pick_free_port(
    candidates: Iterable[int] | None = None,
    in_use: Callable[[int], bool] = port_in_use,
    rng: random.Random | None = None,
) -> int:
    """A port of the torchrun range that nothing listens on, tried in random order.

    Random order keeps two jobs launched at the same moment from picking the
    same port before either has bound it.
    """
    ports = list(candidates if candidates is not None else range(PORT_RANGE[0], PORT_RANGE[1] + 1))
    (rng or random.Random()).shuffle(ports)
    for port in ports:
        if not in_use(port):
            return port
    raise RuntimeError("no free TCP port in %d-%d" % (min(ports), max(ports)) if ports else "no candidate ports")


def pick_free_ports(
    count: int,
    exclude: Iterable[int | None] = (),
    in_use: Callable[[int], bool] = port_in_use,
    rng: random.Random | None = None,
) -> list[int]:
    """count different free ports of the torchrun range, none of them in exclude."""
    picked: list[int] = []
    skip = {port for port in exclude if port is not None}
    for _index in range(count):
        candidates = [p for p in range(PORT_RANGE[0], PORT_RANGE[1] + 1) if p not in skip and p not in picked]
        picked.append(pick_free_port(candidates, in_use, rng))
    return picked


# Run by the training Python: finds torch, DeepSpeed and Horovod without importing them (seconds, not minutes),
# and reads torch's version from its installed metadata.
PYTHON_CHECK = """
import importlib.util, json, sys
try:
    from importlib.metadata import version
except ImportError:
    version = None
def installed(name):
    return importlib.util.find_spec(name) is not None
def version_of(name):
    try:
        return version(name) if version and installed(name) else None
    except Exception:
        return None
print(json.dumps({'executable': sys.executable, 'version': '%d.%d.%d' % sys.version_info[:3],
                  'torch': installed('torch'), 'torch_version': version_of('torch'),
                  'deepspeed': installed('deepspeed'), 'horovod': installed('horovod')}))
"""


def launcher_missing(launcher: str, python: dict, which: Callable[[str], str | None] = shutil.which) -> str:
    """What this node lacks for the launcher ('' when nothing): checked before anything is changed."""
    if launcher == "deepspeed" and python.get("found") and not python.get("deepspeed"):
        return "needs DeepSpeed in gpufleet_python (%s); install it there (python_env_packages)" % python.get("path")
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


def env_file_names(paths: Iterable[str]) -> list[str]:
    """The variable names that the readable ones of these shell environment files assign, sorted."""
    names: set[str] = set()
    for path in paths:
        try:
            with open(os.path.expanduser(path), errors="replace") as handle:
                names.update(match.group(1) for match in map(_ENV_ASSIGNMENT.match, handle) if match)
        except OSError:
            continue
    return sorted(names)
