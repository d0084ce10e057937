# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Callback gpufleet.cluster.preload: the Jinja2 plugins loaded once, before the first task forks a worker."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: preload
type: aggregate
short_description: Loads the filter and test plugins once in ansible-playbook's own process, before any task runs
version_added: 0.1.0
description:
  - Ansible runs each task of each host in a new process forked from C(ansible-playbook). A template that calls a
    collection's filter makes that process load every filter file of the collection (and the module_utils they
    import), and a test or a built-in filter loads Ansible's own files; the process then exits, and the next task
    loads them again.
  - This callback loads them in C(ansible-playbook)'s own process when the playbook starts, so that every forked
    process finds them loaded. On a provision.yml re-run that changes nothing, the loading was about a sixth of the
    controller's CPU (docs/scale).
  - It changes nothing that a playbook does or prints.
requirements:
  - Enabled with C(callbacks_enabled = gpufleet.cluster.preload) in C(ansible.cfg), as in gpufleet's own.
author:
  - gpufleet contributors (@gpufleet)
"""

from typing import Any

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader, test_loader
from ansible.utils.display import Display

display = Display()

# One plugin of each kind: looking one up loads every file of its kind (a collection's filter files are searched
# one by one for the name; Ansible's own filters and tests are loaded at once).
PRELOAD = ((filter_loader, "gpufleet.cluster.missing_packages"), (filter_loader, "ansible.builtin.bool"),
           (test_loader, "gpufleet.cluster.job_name"), (test_loader, "ansible.builtin.skipped"))


def preload(lookups: tuple = PRELOAD) -> list[str]:
    """Look each plugin up, so that its files stay loaded in this process; returns what could not be loaded."""
    failed = []
    for loader, name in lookups:
        try:
            if loader.get_with_context(name).object is None:
                failed.append(name)
        except Exception as ex:  # pylint: disable=broad-exception-caught  # a speed-up never fails a run
            failed.append("%s (%s)" % (name, ex))
    return failed


class CallbackModule(CallbackBase):
    """Loads the Jinja2 plugins at the start of the playbook."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpufleet.cluster.preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook: Any) -> None:
        for name in preload():
            display.vvv("gpufleet.cluster.preload: could not load %s; each task loads it itself" % name)
