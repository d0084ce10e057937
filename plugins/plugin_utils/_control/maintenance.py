# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Rolling maintenance (playbooks/maintain.yml): where its batches, its refusals and its record are decided.

maintain.yml runs provision.yml's node play over the spares, then the nodes, ``maintain_batch`` nodes at a time
(Ansible's ``serial``, which this module's batches() reproduces to say the plan before any change). Each node of a
batch is taken out of service (a ``maintenance`` record in the fleet's history, history.py, which train.yml reads
as it reads a quarantine: a spare takes the node's place, or the launch is refused naming why; under Slurm, drained
too), waits for its jobs to end (or stops them), is changed and rebooted where needed, checked by the launch's gate
(health_check.py), and put back in service; a node that fails its check stays out with the reason, and the run
stops before the next batch. Pure functions: the action (plugins/action/maintenance.py) reads and writes."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import ACTIVE_STATES, JobState
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import history
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control.tables import text_table

NOT_REACHED = "not reached"


class MaintenanceError(ValueError):
    """A maintenance that cannot start; the message names the variable or node and why. Nothing was changed."""


def batch_size(value: Any, count: int) -> int:
    """maintain_batch as Ansible's serial reads it: a number of nodes, or a whole percentage of them (rounded down,
    at least one); MaintenanceError for 0, more than the nodes, or anything else."""
    text = str(value).strip()
    percent = text.endswith("%")
    try:
        size = int(text[:-1] if percent else text)
    except ValueError:
        size = -1
    if size < 0 or (percent and not 0 < size <= 100):
        raise MaintenanceError("maintain_batch=%s is neither a number of nodes nor a whole percentage of them "
                               "(1, 2, 25%%); nothing was changed" % (value,))
    if percent:
        size = max(1, int(size / 100.0 * count))
    if not 1 <= size <= count:
        raise MaintenanceError("maintain_batch=%s: a batch takes 1 to %d node(s) (the inventory's %d node(s) and "
                               "spares); nothing was changed" % (value, count, count))
    return size


REBOOTS = ("auto", "always", "never")


def reboot_choice(value: Any) -> str:
    """maintain_reboot: auto (where the change needs it), always or never; MaintenanceError for anything else."""
    text = str(value).strip()
    if text not in REBOOTS:
        raise MaintenanceError("maintain_reboot=%s must be auto, always or never; nothing was changed" % (value,))
    return text


def wait_seconds(value: Any) -> int:
    """maintain_wait_s: how long a node's jobs are waited for, in whole seconds; MaintenanceError otherwise."""
    text = str(value).strip()
    if not (text.isascii() and text.isdigit()):  # not isdigit() alone: it also takes '²', which int() refuses
        raise MaintenanceError("maintain_wait_s=%s must be a whole number of seconds; nothing was changed" % (value,))
    return int(text)


def order(nodes: Sequence[str], spares: Sequence[str]) -> list[str]:
    """The order nodes are maintained in: the spares first, so that a job keeps its capacity, then the nodes."""
    seen: list[str] = []
    for host in list(spares) + list(nodes):
        if host not in seen:
            seen.append(host)
    return seen


def batches(hosts: Sequence[str], size: int) -> list[list[str]]:
    return [list(hosts[start:start + size]) for start in range(0, len(hosts), size)]


def active_jobs(status: Any) -> list[dict[str, Any]]:
    """The jobs of a node's job_status result that still hold it (any active state; a spare's standby too)."""
    if not isinstance(status, Mapping):
        return []
    return [dict(entry) for entry in status.get("jobs") or []
            if isinstance(entry, Mapping) and entry.get("state") in ACTIVE_STATES]


def refusals(spares: Iterable[str], jobs: Mapping[str, Any]) -> list[str]:
    """A spare that stands in for a lost node (it runs a job's part, not standby) cannot be maintained: its job
    would lose that node a second time."""
    said = []
    for spare in spares:
        for job in active_jobs(jobs.get(spare)):
            if job.get("state") != JobState.STANDBY:
                said.append("%s (gpu_spares) stands in for a lost node in job %s (%s): maintain it once that job has "
                            "ended, or leave it out (--limit '!%s')" % (spare, job.get("job"), job.get("state"), spare))
    return said


def plan_lines(groups: Sequence[Sequence[str]], spares: Iterable[str], jobs: Mapping[str, Any], stop_jobs: bool,
               what: str) -> list[str]:
    """What each batch will do, one line per batch and node."""
    spare_set = set(spares)
    lines = ["maintain.yml: %s, %d batch(es) of at most %d node(s), spares first" % (
        what, len(groups), max((len(group) for group in groups), default=0))]
    for number, group in enumerate(groups, 1):
        lines.append("batch %d of %d: %s" % (number, len(groups), ", ".join(group)))
        for host in group:
            held = active_jobs(jobs.get(host))
            doing = ("no job: taken out of service at once" if not held else "%s job(s) %s: %s" % (
                len(held), ", ".join("%s (%s)" % (job.get("job"), job.get("state")) for job in held),
                "stopped (logs kept), then changed" if stop_jobs else "waits for them to end, then changed"))
            lines.append("  %s%s: %s; checked by the launch's gate, then back in service" % (
                host, " (spare)" if host in spare_set else "", doing))
    return lines


def taken_out(hosts: Iterable[str], what: str, run: str, at: float | None = None) -> list[dict[str, Any]]:
    return [dict(history.maintenance(host, history.OUT, "out of service for maintenance: %s" % what, at=at), run=run)
            for host in hosts]


def put_back(hosts: Iterable[str], refused: Mapping[str, str], what: str, run: str, at: float | None = None
             ) -> list[dict[str, Any]]:
    """BACK for each host its check passed; FAILED, with the check's refusal, for each it did not (left out)."""
    return [dict(history.maintenance(host, history.FAILED, "failed its check after maintenance (%s): %s" % (
        what, refused[host]), at=at) if host in refused else history.maintenance(
            host, history.BACK, "back in service after maintenance: %s" % what, at=at), run=run) for host in hosts]


def run_id(at: float | None = None) -> str:
    return "maintain-" + time.strftime("%Y%m%dT%H%M%S", time.localtime(time.time() if at is None else at))


def table(hosts: Sequence[str], records: Sequence[Mapping[str, Any]], run: str) -> str:
    """One row per node of the run: its last step in this run (back in service, failed its check, out of service
    while it changes), or not reached."""
    rows = []
    for host in hosts:
        last = next((entry for entry in reversed(records) if entry.get("node") == host and entry.get("run") == run
                     and entry.get("kind") == "maintenance"), None)
        outcome = {history.BACK: "back in service", history.FAILED: "failed: left out of service",
                   history.OUT: "out of service"}.get(str((last or {}).get("result")), NOT_REACHED)
        rows.append([host, outcome, str(last.get("time")) if last else "-", str(last.get("fact")) if last else "-"])
    return text_table(["node", "outcome", "since", "fact"], rows)
