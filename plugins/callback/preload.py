# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Callback gpufleet.cluster.preload: ansible-playbook's process made ready to fork a worker per host and task: the
Jinja2 plugins loaded once, and the objects that exist at a task's start kept out of the workers' garbage
collection."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: preload
type: aggregate
short_description: Readies ansible-playbook's process for the worker it forks per host and task (plugins, garbage collector)
version_added: 0.1.0
description:
  - Ansible runs each task of each host in a new process forked from C(ansible-playbook). A template that calls a
    collection's filter makes that process load every filter file of the collection (and the module_utils they
    import), and a test or a built-in filter loads Ansible's own files; the process then exits, and the next task
    loads them again.
  - This callback loads them in C(ansible-playbook)'s own process when the playbook starts, so that every forked
    process finds them loaded. On a provision.yml re-run that changes nothing, the loading was about a sixth of the
    controller's CPU (docs/scale).
  - A forked process shares the parent's memory until it writes to a page. Python's garbage collector, when a
    worker runs a full collection, visits (and so writes to) every object the worker inherited, and the kernel copies
    each page it writes to. At the start of each task this callback
    moves the objects that exist then out of the collector's generations (C(gc.freeze)), so that the workers
    forked for the task do not visit them. At the first task and every 100 tasks they are given back to the
    collector and collected (C(gc.unfreeze), C(gc.collect)), so that cyclic garbage among them is still freed in a
    long playbook. On a provision.yml re-run that changes nothing at 2 nodes this saved about 7 % of the
    controller's CPU (docs/scale).
  - It changes nothing that a playbook does or prints.
requirements:
  - Enabled with C(callbacks_enabled = gpufleet.cluster.preload) in C(ansible.cfg), as in gpufleet's own.
author:
  - gpufleet contributors (@gpufleet)
"""

import gc
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


# Tasks between two full collections: objects frozen at a task's start that became cyclic garbage since are freed
# at the next one (gc.unfreeze, gc.collect, then gc.freeze again).
UNFREEZE_EVERY = 100


class CallbackModule(CallbackBase):
    """Loads the Jinja2 plugins at the start of the playbook; freezes the garbage collector's objects at each task's
    start, and collects them every UNFREEZE_EVERY tasks."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpufleet.cluster.preload"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self.tasks = 0

    def v2_playbook_on_start(self, playbook: Any) -> None:
        for name in preload():
            display.vvv("gpufleet.cluster.preload: could not load %s; each task loads it itself" % name)

    def freeze(self) -> None:
        """The workers of the task that starts are forked after this: what exists now is frozen for them. At the first
        task and every UNFREEZE_EVERY tasks, the frozen objects are given back and collected first."""
        if self.tasks % UNFREEZE_EVERY == 0:
            gc.unfreeze()
            gc.collect()
        self.tasks += 1
        gc.freeze()

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        self.freeze()

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        self.freeze()
