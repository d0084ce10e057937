# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""An action plugin's arguments, validated against the options its documentation shows.

Each of gpufleet's action plugins is documented by a file of the same name in plugins/modules/ (what ansible-doc
reads). The argument spec is made from that documentation, so the two cannot disagree, and Ansible's own validator
applies it: types are converted ("false", "no" and "0" are false for a bool), defaults filled in, unknown and
missing required options refused with Ansible's message.
"""

from __future__ import annotations

from typing import Any

import importlib

import yaml

# Option keys that mean something to the validator; the rest (description, version_added) are documentation.
_SPEC_KEYS = ("type", "required", "default", "elements", "choices", "no_log", "aliases")


def spec_from_documentation(documentation: str) -> dict[str, dict[str, Any]]:
    """The argument spec the DOCUMENTATION string's options describe (suboptions included), with the options of
    the collection's own documentation fragments it extends (gpufleet.cluster.job_folder)."""
    doc = yaml.safe_load(documentation)
    options: dict[str, dict[str, Any]] = {}
    for fragment in doc.get("extends_documentation_fragment") or []:
        options.update(_fragment_options(str(fragment)))
    options.update(doc.get("options") or {})
    return _spec(options)


def _fragment_options(name: str) -> dict[str, dict[str, Any]]:
    """The options of one of this collection's fragments (another collection's fragments carry none we use)."""
    prefix = "gpufleet.cluster."
    if not name.startswith(prefix):
        return {}
    module, attribute = (name[len(prefix):].split(".", 1) + [""])[:2]
    fragments = importlib.import_module("ansible_collections.gpufleet.cluster.plugins.doc_fragments." + module)
    text = getattr(fragments.ModuleDocFragment, attribute.upper() or "DOCUMENTATION")
    return yaml.safe_load(text).get("options") or {}


def _spec(options: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    spec = {}
    for name, option in options.items():
        entry = {key: option[key] for key in _SPEC_KEYS if key in option}
        if "suboptions" in option:
            entry["options"] = _spec(option["suboptions"])
        spec[name] = entry
    return spec


def validated(action: Any, documentation: str) -> dict[str, Any]:
    """The task's arguments, validated and converted (raises AnsibleActionFail, naming the option, when wrong)."""
    _result, args = action.validate_argument_spec(argument_spec=spec_from_documentation(documentation))
    return args
