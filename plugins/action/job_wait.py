# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action gpufleet.cluster.job_wait: wait for a job on one node, failing fast with the gang.

Every node of the job runs this task at the same time (one fork each). Each
polls its own node with gpufleet.cluster.job_status and, after each poll,
writes its state into a folder on the controller that all of them share and
reads the others'. When another node has failed, stopped or stopped
answering, it stops its own node's part of the job with
gpufleet.cluster.job_stop, so no rank is left waiting in a collective. (The
nodes' supervisors do the same among themselves, with heartbeats, without the
controller; this is the controller's second line.)

When the gpufleet.cluster.interrupt callback has seen Ctrl-C, the file named
by GPUFLEET_INTERRUPT_FILE exists: each node's wait then stops its node's part
and returns, so that the play goes on to fetch the logs and report.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

GANG_TRIGGERS = ("failed", "lost", "unreachable", "stopped", "hung")
TERMINAL = ("succeeded", "failed", "stopped", "hung", "lost", "absent", "unreachable")
INTERRUPT_VAR = "GPUFLEET_INTERRUPT_FILE"


def interrupted() -> bool:
    """Whether Ctrl-C was pressed on the controller (see the gpufleet.cluster.interrupt callback)."""
    path = os.environ.get(INTERRUPT_VAR)
    return bool(path) and os.path.exists(str(path))


def sleep_unless_interrupted(seconds: float, step_s: float = 0.05) -> None:
    """Sleep, but wake as soon as Ctrl-C is pressed on the controller, so that the stop starts at once."""
    deadline = time.monotonic() + seconds
    while not interrupted():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(step_s, left))


def write_state(gang_dir: str, host: str, state: dict) -> None:
    os.makedirs(gang_dir, mode=0o700, exist_ok=True)
    tmp = os.path.join(gang_dir, ".%s.tmp" % host)
    with open(tmp, "w") as handle:
        json.dump(state, handle)
    os.replace(tmp, os.path.join(gang_dir, "%s.json" % host))


def peer_failure(gang_dir: str, host: str, peers: list[str]) -> dict | None:
    """The first peer (by end time) whose state ends the job for everyone, or None."""
    found = []
    for peer in peers:
        if peer == host:
            continue
        try:
            with open(os.path.join(gang_dir, "%s.json" % peer)) as handle:
                state = json.load(handle)
        except (OSError, ValueError):
            continue
        if state.get("state") in GANG_TRIGGERS and not state.get("stopped_for"):
            found.append(state)
    if not found:
        return None
    return min(found, key=lambda s: s.get("ended_at") or float("inf"))


class ActionModule(ActionBase):
    """Polls the node's job until it ends; stops it when another node's part failed."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(
        ("job", "jobs_dir", "node_rank", "hosts", "gang_dir", "poll_s", "progress", "progress_s", "max_misses", "tail")
    )

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        host = task_vars["inventory_hostname"]
        job = args["job"]
        jobs_dir = args.get("jobs_dir", "~/.gpufleet/jobs")
        poll_s = float(args.get("poll_s", 2))
        progress = bool(args.get("progress", False))
        progress_s = float(args.get("progress_s", 5))
        max_misses = int(args.get("max_misses", 3))
        gang_dir = args["gang_dir"]
        hosts = list(args.get("hosts") or [])
        status_args = {"job": job, "jobs_dir": jobs_dir}

        if progress and not os.environ.get(INTERRUPT_VAR):
            display.warning("Ctrl-C will leave job %s running on the nodes: enable the gpufleet.cluster.interrupt "
                            "callback (callbacks_enabled in ansible.cfg) to have it stop the job everywhere" % job)
        misses = 0
        stopped_for: dict | None = None
        was_interrupted = False
        attempt = 1
        last_shown = ""
        last_shown_at = 0.0
        started = time.monotonic()
        current: dict = {"state": "unknown"}
        while True:
            try:
                answer = self._execute_module("gpufleet.cluster.job_status", module_args=status_args, task_vars=task_vars)
            except AnsibleConnectionFailure as exc:
                answer = {"failed": True, "msg": str(exc)}
            if answer.get("failed") or answer.get("unreachable"):
                misses += 1
                if misses >= max_misses:
                    current = {"state": "unreachable", "ended_at": time.time(), "error": answer.get("msg")}
            else:
                misses = 0
                current = answer["jobs"][0]
            state = current.get("state")
            write_state(gang_dir, host, {"host": host, "node_rank": args.get("node_rank"), "state": state,
                                         "ended_at": current.get("ended_at"), "stopped_for": stopped_for})
            if state in TERMINAL:
                break
            if not was_interrupted and interrupted():
                was_interrupted = True
                display.display("  [%s] interrupted on the controller: stopping this node's part" % host)
                self._stop(job, jobs_dir, "stopped by gpufleet: interrupted on the controller (Ctrl-C)", task_vars)
                continue
            if progress and isinstance(current.get("attempt"), int) and current["attempt"] != attempt:
                attempt = current["attempt"]
                display.display("  [%s] the job failed; attempt %d of %s on master port %s" % (
                    host, attempt, int(current.get("max_restarts") or 0) + 1, current.get("master_port")))
            if progress and current.get("last_line") and current["last_line"] != last_shown:
                if time.monotonic() - last_shown_at >= progress_s:
                    last_shown, last_shown_at = current["last_line"], time.monotonic()
                    display.display("  [%s %4ds] %s" % (host, time.monotonic() - started, last_shown))
            if stopped_for is None:
                stopped_for = peer_failure(gang_dir, host, hosts)
                if stopped_for is not None:
                    reason = "stopped by gpufleet: %s (node_rank %s) %s" % (
                        stopped_for["host"], stopped_for.get("node_rank"), stopped_for["state"])
                    display.display("  [%s] %s; stopping this node's part" % (host, reason))
                    self._stop(job, jobs_dir, reason, task_vars)
                    continue
            sleep_unless_interrupted(poll_s)

        if current.get("state") != "unreachable":
            try:
                final = self._execute_module("gpufleet.cluster.job_status",
                                             module_args=dict(status_args, tail=int(args.get("tail", 30))),
                                             task_vars=task_vars)
                current = final["jobs"][0] if not final.get("failed") else current
            except AnsibleConnectionFailure:
                pass
        current.update(host=host, node_rank=args.get("node_rank"), job=job)
        if stopped_for is not None:
            current["stopped_for"] = stopped_for["host"]
        if was_interrupted:
            current["interrupted"] = True
        result.update(changed=False, job_result=current)
        return result

    def _stop(self, job: str, jobs_dir: str, reason: str, task_vars: dict) -> None:
        try:
            self._execute_module(
                "gpufleet.cluster.job_stop",
                module_args={"job": job, "jobs_dir": jobs_dir, "reason": reason},
                task_vars=task_vars,
            )
        except AnsibleConnectionFailure:
            pass  # the node is unreachable: its own supervisor is all that can act there
