# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Callback gpufleet.cluster.interrupt: Ctrl-C during a job's wait stops the job on every node."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: interrupt
type: aggregate
short_description: Ctrl-C while train.yml waits stops the job on every node and fetches its logs
version_added: 0.1.0
description:
  - Without it, Ctrl-C ends C(ansible-playbook) at once, and an attached job goes on running on the nodes as if
    it had been launched detached (C(status.yml) and C(stop.yml) still reach it).
  - With it, the first Ctrl-C while M(gpufleet.cluster.job_wait) runs is passed to the waits instead of ending
    the run. Each node's wait stops its node's part of the job, and the play goes on to fetch every node's log
    and report the job as interrupted (a failed run). A second Ctrl-C ends C(ansible-playbook) at once.
  - Ctrl-C at any other time behaves as usual.
  - It tells the waits through a file named in the environment variable C(GPUFLEET_INTERRUPT_FILE), which the
    worker processes inherit. The waits of the nodes tell each other that a node's part changed through a second
    one, C(GPUFLEET_WAKE_FILE), so that the nodes other than the master are polled less often while their parts
    run steadily (M(gpufleet.cluster.job_wait)). Both are in a folder of the run's own, private to its user,
    removed at the end of the run.
requirements:
  - Enabled with C(callbacks_enabled = gpufleet.cluster.interrupt) in C(ansible.cfg), as in gpufleet's own.
author:
  - gpufleet contributors (@gpufleet)
"""

import os
import shutil
import signal
import tempfile
from typing import Any

from ansible.plugins.callback import CallbackBase

WAIT_ACTIONS = ("gpufleet.cluster.job_wait", "job_wait")


class CallbackModule(CallbackBase):
    """Turns the first Ctrl-C during a job's wait into a stop of the job."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpufleet.cluster.interrupt"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._folder: str | None = None
        self._flag = ""
        self._waiting = False
        self._previous: Any = None

    def v2_playbook_on_start(self, playbook: Any) -> None:
        """The run's folder, before any worker process is forked (they inherit the environment): its own (mkdtemp:
        0700, a new name), since a name in the shared temporary folder could be another user's link to a file of
        ours, which the waits would append to."""
        if self._folder is None:
            self._folder = tempfile.mkdtemp(prefix="gpufleet-run-%d-" % os.getpid())
            self._flag = os.path.join(self._folder, "interrupt")
            os.environ["GPUFLEET_INTERRUPT_FILE"] = self._flag
            os.environ["GPUFLEET_WAKE_FILE"] = os.path.join(self._folder, "wake")

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        waiting = task.action in WAIT_ACTIONS
        if waiting and not self._waiting:
            # Ansible's own handler (installed before callbacks load) is kept for the second Ctrl-C.
            self._previous = signal.signal(signal.SIGINT, self._on_interrupt)
        elif not waiting and self._waiting:
            self._restore()
        self._waiting = waiting

    def _on_interrupt(self, signum: int, frame: Any) -> None:
        fd = os.open(self._flag, os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
        self._display.display("\nInterrupted: stopping the job on every node and fetching its logs "
                              "(Ctrl-C again to quit at once and leave it running).", stderr=True)
        self._restore()

    def _restore(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def v2_playbook_on_stats(self, stats: Any) -> None:
        self._restore()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
