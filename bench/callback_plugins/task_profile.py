# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A benchmark's profile of a playbook: how long each task took, from its start until its last host answered.

Enabled by bench/scale.py only (ANSIBLE_CALLBACK_PLUGINS=bench/callback_plugins,
ANSIBLE_CALLBACKS_ENABLED=task_profile); writes JSON to GPUFLEET_TASK_PROFILE. Not part of the collection.
"""

from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: task_profile
type: aggregate
short_description: Per-task wall time of a playbook, as JSON (benchmarks only)
description:
  - Records each task's start and the moment its last host result arrived, and writes them to the file named
    by the environment variable E(GPUFLEET_TASK_PROFILE) at the end of the playbook.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_profile"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._tasks: list[dict] = []
        self._started = time.time()

    def _start(self, task) -> None:
        now = time.time()
        self._tasks.append({"name": task.get_name(), "action": task.action, "start": now, "end": now, "hosts": 0})

    def v2_playbook_on_task_start(self, task, is_conditional) -> None:
        self._start(task)

    def v2_playbook_on_handler_task_start(self, task) -> None:
        self._start(task)

    def _result(self, result, **_kwargs) -> None:
        if self._tasks:
            self._tasks[-1]["end"] = time.time()
            self._tasks[-1]["hosts"] += 1

    v2_runner_on_ok = v2_runner_on_failed = v2_runner_on_skipped = v2_runner_on_unreachable = _result

    def v2_playbook_on_stats(self, stats) -> None:
        path = os.environ.get("GPUFLEET_TASK_PROFILE")
        if not path:
            return
        tasks = [dict(task, seconds=round(task["end"] - task["start"], 3),
                      start=round(task["start"] - self._started, 3)) for task in self._tasks]
        for task in tasks:
            del task["end"]
        with open(path, "w") as handle:
            json.dump({"total_s": round(time.time() - self._started, 3), "tasks": tasks}, handle, indent=1)
