# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Runs one of the collection's node-side operations on a node without an Ansible module run: the light path of
the launch (plugins/action/launch.py), whose module run cost the node about 0.44 CPU s at 8 nodes sharing two cores
(docs/scale, issue 50), most of it Ansible's module code and the collection's compiled from source out of the
AnsiballZ zip on every run.

The controller runs this file's source on the node's Python (plugin_utils/_control/cached_run.py: ``python3 -c
BOOT``, which reads the source from standard input's first line and runs it), then writes one JSON request after
it: the digest of the collection's ``module_utils`` tree, the operation (a module of that tree with
``light_main(args, check_mode, diff)``), its arguments and the task's environment, and, when the node said it lacks
that tree, the tree itself. The tree is kept under ``$XDG_CACHE_HOME/gpufleet/runtime/<digest>`` (``~/.cache`` by
default), compiled once where it is installed, so that each later run imports compiled code: this node's own copy
of the code the module would have shipped, named by its content. A folder there that is not this user's own, or
that others may write, is not used: the run then installs the tree into a private temporary folder, removed after
it. The answer is one JSON object after ``MARK`` on standard output (a login script's output before it is not
read); ``{"missing": true}`` asks for the tree.

Standard library only, Python 3.8+, and nothing of the collection: it runs before the tree is on ``sys.path``.
Arguments come on standard input, never in the command line (secret_env, the gang key).
"""

from __future__ import annotations

import base64
import compileall
import importlib
import json
import os
import shutil
import stat
import sys
import tempfile
import time
import traceback
import zlib

MARK = "__gpufleet_cached_run__"
# How many trees (collection versions) a node keeps; the oldest beyond it go when another is installed.
KEEP_TREES = 4
_INSTALLING = ".install-"


def cache_root() -> str:
    """Where this user's trees are kept on the node."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gpufleet", "runtime")


def private(path: str) -> bool:
    """A folder (not a link) of this user's that no one else may write."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o022


def cached_tree(root: str, digest: str) -> str | None:
    """The installed tree of this digest, where it may be trusted."""
    home = os.path.join(root, digest)
    if private(root) and private(home) and os.path.isdir(os.path.join(home, "ansible_collections")):
        return home
    return None


def unpack(packed: str) -> dict:
    """The tree's files (relative path: text) from the request's packed form (base64 of zlib of JSON)."""
    return json.loads(zlib.decompress(base64.b64decode(packed)).decode("utf-8"))


def write_tree(folder: str, files: dict) -> None:
    for relative, text in files.items():
        path = os.path.normpath(os.path.join(folder, relative))
        if not path.startswith(folder + os.sep):
            raise ValueError("a tree file outside the tree: %r" % relative)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)


def creatable(path: str) -> bool:
    """Whether path exists, or its nearest existing folder is this user's own: a run as another user (become,
    with the login user's HOME) leaves nothing of its own in that user's home."""
    while not os.path.lexists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent
    try:
        return os.stat(path).st_uid == os.geteuid()
    except OSError:
        return False


def install(root: str, digest: str, files: dict) -> str:
    """The tree written and compiled under a temporary name, then renamed into place (a reader never sees half a
    tree; where another run installed it first, that one is kept)."""
    if not creatable(root):
        raise OSError("%s is not in this user's own folder" % root)
    os.makedirs(root, mode=0o700, exist_ok=True)
    if not private(root):
        raise OSError("%s is not this user's own folder" % root)
    staging = tempfile.mkdtemp(prefix=_INSTALLING, dir=root)
    try:
        write_tree(staging, files)
        # py_compile writes the compiled files whatever PYTHONDONTWRITEBYTECODE says; imports then read them.
        compileall.compile_dir(staging, quiet=1)
        os.rename(staging, os.path.join(root, digest))
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if cached_tree(root, digest) is None:
            raise
    prune(root, digest)
    return os.path.join(root, digest)


def prune(root: str, keep: str) -> None:
    """The trees beyond the newest KEEP_TREES go, and installs that were left half-done over an hour ago."""
    try:
        names = os.listdir(root)
    except OSError:
        return
    trees = []
    for name in names:
        path = os.path.join(root, name)
        try:
            mtime = os.lstat(path).st_mtime
        except OSError:
            continue
        if name.startswith(_INSTALLING):
            if mtime < time.time() - 3600:
                shutil.rmtree(path, ignore_errors=True)
        elif name != keep:
            trees.append((mtime, path))
    for _mtime, path in sorted(trees, reverse=True)[KEEP_TREES - 1:]:
        shutil.rmtree(path, ignore_errors=True)


def run(request: dict) -> dict:
    """The operation's answer, from the cached tree (installed from the request where the node lacks it). A cached
    tree the operation cannot be imported from (a file of it removed) is asked for again and replaced, once."""
    root = cache_root()
    home = cached_tree(root, request["digest"])
    temporary = None
    # The task's environment keyword, as a module run has it (plugin_utils/_control/cached_run.py request()).
    os.environ.update(request.get("environment") or {})
    try:
        if home is not None:
            try:
                return _call(home, request)
            except ImportError:
                if "files" in request:  # else asked for below, then replaced
                    set_aside(root, request["digest"])
        if "files" not in request:
            return {"missing": True}
        files = unpack(request["files"])
        try:
            home = install(root, request["digest"], files)
        except OSError:
            temporary = tempfile.mkdtemp(prefix="gpufleet-run-")
            write_tree(temporary, files)
            home = temporary
        return _call(home, request)
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)


def _call(home: str, request: dict) -> dict:
    if home not in sys.path:
        sys.path.insert(0, home)
    importlib.invalidate_caches()  # a tree installed anew where a broken one was
    operation = importlib.import_module(request["entry"])
    return operation.light_main(request["args"], bool(request.get("check_mode")), bool(request.get("diff")))


def set_aside(root: str, digest: str) -> None:
    """A broken tree renamed out of the way (prune() removes it within the hour), so that it can be installed anew."""
    try:
        os.rename(os.path.join(root, digest),
                  os.path.join(root, "%sbroken-%d-%d" % (_INSTALLING, os.getpid(), int(time.time() * 1000))))
    except OSError:
        pass


def main() -> None:
    try:
        answer = run(json.loads(sys.stdin.buffer.read().decode("utf-8")))
    except Exception as exc:  # pylint: disable=broad-except  # every failure is the task's, with its traceback
        answer = {"failed": True, "msg": "%s: %s" % (type(exc).__name__, exc), "exception": traceback.format_exc()}
    sys.stdout.write("\n%s\n%s\n" % (MARK, json.dumps(answer, default=str)))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
