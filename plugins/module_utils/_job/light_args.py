# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A light path's options on the node (cached_runner.py): validated on the controller, where a path option is a
plain string (plugin_utils/_control/cached_run.py controller_spec), then expanded here as AnsibleModule expands a
path: ``~`` and ``$VAR`` are the node's."""

from __future__ import annotations

import os


def expand_paths(params: dict, spec: dict) -> dict:
    """params with each option of type path (and each list of paths) expanded, suboptions too."""
    expanded = dict(params)
    for name, option in spec.items():
        value = expanded.get(name)
        if value is None:
            continue
        if option.get("type") == "path":
            expanded[name] = _expand(value)
        elif option.get("type") == "list" and option.get("elements") == "path":
            expanded[name] = [_expand(item) for item in value]
        elif option.get("options") and isinstance(value, dict):
            expanded[name] = expand_paths(value, option["options"])
    return expanded


def _expand(value: str) -> str:
    return os.path.expanduser(os.path.expandvars(value))
