# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The per-node summary table and the failure message of a job. Pure functions."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import FAILURE_STATES, JobState, STOPPED_FOR
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.rank_stacks import STACKS_FILE
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._postmortem import rank_lines, stack_groups

COLUMNS = (("node", "host"), ("rank", "node_rank"), ("state", "state"), ("exit", "exit"), ("attempts", "attempts"),
           ("duration", "duration"), ("log", "log"))
JOB_COLUMN = ("job", "job")
# Shown for jobs run by Slurm (scheduler=slurm): Slurm's id and state of the job, next to gpufleet's state.
SLURM_COLUMN = ("slurm", "slurm")
# Shown for jobs run in a container image: the image (and the first 12 digits of its ID) and the container's name.
CONTAINER_COLUMNS = (("image", "image"), ("container", "container"))


def _slurm(result: Mapping[str, Any]) -> str:
    slurm = result.get("slurm")
    if not isinstance(slurm, Mapping):
        return "-"
    job_id = slurm.get("job_id") or result.get("slurm_job_id") or "?"
    return "%s %s" % (job_id, slurm.get("state", "?"))


def _image(result: Mapping[str, Any]) -> str:
    if not result.get("container"):
        return "-"
    image_id = str(result.get("image_id") or "")
    return "%s (%s)" % (result.get("image") or "-", image_id[:12]) if image_id else str(result.get("image") or "-")


def _duration(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    seconds = int(round(value))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return "%d:%02d:%02d" % (hours, minutes, seconds) if hours else "%d:%02d" % (minutes, seconds)


def _exit(result: Mapping[str, Any]) -> str:
    """The exit code or signal that matters: the first failed worker's when torchrun reported one."""
    root = result.get("root_cause")
    source = root if isinstance(root, Mapping) else result
    if source.get("signal"):
        return str(source["signal"])
    code = source.get("exit_code")
    return "-" if code is None else str(code)


def _records_by_host(results: Sequence[Mapping[str, Any]], key: str) -> dict[str, Mapping[str, Any]]:
    """The members' records under key in state.json, by the host each is about, the first found."""
    found: dict[str, Mapping[str, Any]] = {}
    for result in results:
        for record in result.get(key) or []:
            found.setdefault(str(record.get("host")), record)
    return found


def replacements(results: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Each node a spare replaced, by host: what the members recorded (spares.py: node_rank, by, attempt, why, at)."""
    return _records_by_host(results, "replaced")


def replacements_said(results: Sequence[Mapping[str, Any]]) -> str:
    """'node3 replaced node1 (node_rank 1) from attempt 2, after: node1 lost; ...', or ''."""
    return "; ".join("%s replaced %s (node_rank %s) from attempt %s, after: %s" % (
        r.get("by"), host, r.get("node_rank"), r.get("attempt"), r.get("why")) for host, r in replacements(results).items())


def left_out(results: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Each node the gang went on without (min_nodes), by host: what the others recorded (spares.reshape: node_rank,
    attempt, why, at, nodes, hardware_fault)."""
    return _records_by_host(results, "left_out")


def left_out_said(results: Sequence[Mapping[str, Any]]) -> str:
    """'attempt 2 ran on 2 of 3 nodes, without node2 (node_rank 2), after: node2 lost; ...', per shrink, or ''."""
    by_attempt: dict[Any, list[tuple[str, Mapping[str, Any]]]] = {}
    for host, record in left_out(results).items():
        by_attempt.setdefault(record.get("attempt"), []).append((host, record))
    said = []
    for attempt, records in by_attempt.items():
        nodes = records[0][1].get("nodes")
        said.append("attempt %s ran on %s of %s nodes, without %s, after: %s" % (
            attempt, nodes, nodes + len(records) if isinstance(nodes, int) else "?",
            ", ".join("%s (node_rank %s)" % (host, r.get("node_rank")) for host, r in records), records[0][1].get("why")))
    return "; ".join(said)


def _current(results: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The results of the nodes that ran the job's last attempt: a node a spare replaced, or one the gang went on
    without, is not one of them."""
    gone = {**replacements(results), **left_out(results)}
    return [r for r in results if str(r.get("host")) not in gone]


def table_rows(results: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    rows = []
    replaced, left = replacements(results), left_out(results)
    for result in results:
        state = str(result.get("state", "?"))
        if str(result.get("host")) in replaced:
            state = "replaced by %s" % replaced[str(result.get("host"))].get("by")
        elif str(result.get("host")) in left:
            state = "left out (attempt %s)" % left[str(result.get("host"))].get("attempt")
        elif state == JobState.STOPPED and result.get("interrupted"):
            state = "stopped (Ctrl-C)"
        elif state == JobState.STOPPED and result.get(STOPPED_FOR):
            state = "stopped (gang)"
        elif result.get("gpu_fault"):  # a new hardware XID on this node while the job ran (gpu_watch.py)
            state = "%s (%s)" % (state, str(result["gpu_fault"]).rsplit(": ", 1)[-1].split(",")[0])
        attempts = result.get("attempts")
        rows.append(
            {
                "host": str(result.get("host", "?")),
                "job": str(result.get("job", "-")),
                "node_rank": str(result.get("node_rank", "-")),
                "state": state,
                "exit": _exit(result),
                "attempts": str(len(attempts)) if isinstance(attempts, list) and attempts else "-",
                "duration": _duration(result.get("duration_s")),
                "log": str(result.get("log") or result.get("log_path") or "-"),
                "slurm": _slurm(result),
                "image": _image(result),
                "container": str(result.get("container") or "-"),
            }
        )
    return rows


def table_columns(rows: Sequence[Mapping[str, str]], show_job: bool = False) -> tuple[tuple[str, str], ...]:
    """The table's columns (title, key) for these rows: the job's when asked, Slurm's and the container's when any
    row has them."""
    columns = COLUMNS[:1] + (JOB_COLUMN,) + COLUMNS[1:] if show_job else COLUMNS
    if any(row["slurm"] != "-" for row in rows):
        columns = columns[:-1] + (SLURM_COLUMN,) + columns[-1:]
    if any(row["container"] != "-" for row in rows):
        columns = columns[:-1] + CONTAINER_COLUMNS + columns[-1:]
    return columns


def format_table(results: Sequence[Mapping[str, Any]], show_job: bool = False) -> str:
    """A plain-text table, one line per node (and job), in the order given (rank order)."""
    rows = table_rows(results)
    columns = table_columns(rows, show_job)
    widths = {key: len(title) for title, key in columns}
    for row in rows:
        for _title, key in columns:
            widths[key] = max(widths[key], len(row[key]))
    out = ["  ".join(title.ljust(widths[key]) for title, key in columns).rstrip(),
           "  ".join("-" * widths[key] for _title, key in columns)]
    for row in rows:
        out.append("  ".join(row[key].ljust(widths[key]) for _title, key in columns).rstrip())
    return "\n".join(out)


def first_failure(results: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The node whose failure came first; stopped nodes are never the cause.

    A node's time is when the first process of its part exited (its supervisor watches them with pidfds), else
    when its launcher ended: when one rank dies, ranks on other nodes often fail a moment later in a collective,
    and their launchers may well end first. A lost or unreachable node's time is when the other nodes' supervisors
    last heard its heartbeat.
    """
    failed = [r for r in _current(results) if r.get("state") in FAILURE_STATES]
    if not failed:
        return None
    # A node whose GPU raised a hardware XID while the job ran is the cause, even when a rank elsewhere, failing in a
    # collective with that GPU gone, exited first.
    faulted = [r for r in failed if r.get("gpu_fault")]
    if faulted:
        return min(faulted, key=lambda r: (r.get("gpu_fault_at") or float("inf"), r.get("node_rank", 0)))
    # A node whose supervisor vanished, or that went silent, failed when the others last heard it: as recorded when
    # they counted it lost, else the latest time any of them heard it before ending.
    lost_at: dict[str, float] = {}
    heard_at: dict[str, float] = {}
    for result in results:
        for host, since in (result.get("peers_lost") or {}).items():
            lost_at[host] = min(since, lost_at.get(host, since))
        for host, since in (result.get("peers_last_heard") or {}).items():
            heard_at[host] = max(since, heard_at.get(host, since))

    def when(result: Mapping[str, Any]) -> float:
        host = str(result.get("host"))
        if result.get("state") in (JobState.LOST, JobState.UNREACHABLE) and (host in lost_at or host in heard_at):
            return lost_at.get(host, heard_at.get(host, float("inf")))
        return result.get("first_exit_at") or result.get("ended_at") or float("inf")

    return min(failed, key=lambda r: (when(r), r.get("node_rank", 0)))


def _launcher(result: Mapping[str, Any]) -> str:
    """What ran the node's part: its container (with a container image), else the launcher."""
    if result.get("container"):
        return "container %s (image %s)" % (result["container"], result.get("image") or result.get("image_id"))
    return "the launcher"


def restarts_said(results: Sequence[Mapping[str, Any]]) -> str:
    """'attempt 2 after: <why>; attempt 3 after: <why>' from the first node that recorded its restarts (every node
    decides them alike, from the same heartbeats), else ''."""
    restarts = next((r["restarts"] for r in results if r.get("restarts")), [])
    return "; ".join("attempt %d after: %s" % (number, why) for number, why in enumerate(restarts, 2))


def earlier_attempts_said(results: Sequence[Mapping[str, Any]], logs_dir: str) -> str:
    """'<logs_dir>/attempt1/ (stacks of 2 nodes, 4 flight recorder dumps); ...': what the attempts before a restart
    left on the nodes (job_status's earlier_attempts), fetched there with the logs (roles/job/tasks/collect.yml);
    '' when none left anything."""
    found: dict[int, list[int]] = {}
    for result in results:
        for kept in result.get("earlier_attempts") or []:
            files = [str(name) for name in kept.get("files") or []]
            counts = found.setdefault(int(kept["attempt"]), [0, 0])
            counts[0] += int(STACKS_FILE in files)
            counts[1] += sum(1 for name in files if name != STACKS_FILE)
    said = []
    for attempt, (stacks, dumps) in sorted(found.items()):
        what = (["stacks of %d node%s" % (stacks, "" if stacks == 1 else "s")] if stacks else []) + (
            ["%d flight recorder dump%s" % (dumps, "" if dumps == 1 else "s")] if dumps else [])
        said.append("%s/ (%s)" % (os.path.join(logs_dir, "attempt%d" % attempt), ", ".join(what)))
    return "; ".join(said)


def hung(results: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the job ended in a hang: every node that failed was found hung."""
    failed = [r for r in results if r.get("state") in FAILURE_STATES]
    return bool(failed) and all(r.get("state") == JobState.HUNG for r in failed)


def hang_cause(results: Sequence[Mapping[str, Any]]) -> dict[str, list[int]]:
    """The ranks the stacks name as the likely cause of a hang, by host; {} for a job that did not hang, or whose
    stacks name no rank (stack_groups.py)."""
    return stack_groups.likely_cause(results) if hung(results) else {}


def stacks_files(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each node's fetched stacks file beside its log (<logs>/<host>.stacks.txt), for the nodes whose run took
    stacks."""
    return [os.path.join(os.path.dirname(str(r["log"])), "%s.stacks.txt" % r.get("host")) for r in results
            if r.get("log") and isinstance(r.get("stacks"), Mapping) and r["stacks"].get("file")]


def where_ranks_were(results: Sequence[Mapping[str, Any]]) -> str:
    """'<where each rank was, and the likely cause>; every rank's stack: <files>' for a job whose nodes took stacks
    before it was stopped (stack_groups.py: on a hang, or on a stop that asked for them), else ''."""
    said = stack_groups.verdict(results)
    if said is None:
        return ""
    files = stacks_files(results)
    return "%s%s" % (said, "; every rank's stack: %s" % ", ".join(files) if files else "")


def _the_others(results: Sequence[Mapping[str, Any]], cause: Mapping[str, Any]) -> list[str]:
    """What the message says after the first failure: the nodes that failed after it, those stopped, and why the
    job was not restarted though restarts remained (a GPU fault says so beside the fault)."""
    said = []
    results = _current(results)
    later = [str(r.get("host")) for r in results if r is not cause and r.get("state") in FAILURE_STATES]
    if later:  # often a rank that failed in a collective because the first rank had gone
        said.append("; failed after it: %s" % ", ".join(later))
    stopped = [str(r.get("host")) for r in results if r.get("state") == JobState.STOPPED]
    if stopped:
        said.append("; stopped on the other nodes: %s" % ", ".join(stopped))
    refused = _refusal(results)
    if refused and not cause.get("gpu_fault"):
        said.append("; %s" % refused)
    return said


def _refusal(results: Sequence[Mapping[str, Any]]) -> str:
    """Why the job was not restarted though restarts remained (every node decides alike), else ''."""
    return next((str(r["no_restart"]) for r in results if r.get("no_restart")), "")


def failure_message(job: str, results: Sequence[Mapping[str, Any]], tail_lines: int = 30) -> str | None:
    """What went wrong, naming the host, its node_rank and the exit code, with the end of its log."""
    if any(r.get("interrupted") for r in results):
        return ("job %s was interrupted on the controller (Ctrl-C) and stopped on every node (%s); "
                "the logs were fetched." % (job, ", ".join("%s %s" % (r.get("host"), r.get("state")) for r in results)))
    cause = first_failure(results)
    if cause is None:
        return None
    if hung(results):
        said = [cause.get("stop_reason") or "no node wrote to its log for hang_timeout seconds",
                where_ranks_were(results), _refusal(results)]
        return "job %s hung and was stopped on every node: %s." % (job, "; ".join(part for part in said if part))
    host = cause.get("host")
    parts = ["job %s failed on %s (node_rank %s): " % (job, host, cause.get("node_rank"))]
    state = cause.get("state")
    root = cause.get("root_cause")
    if cause.get("gpu_fault"):
        parts.append(str(cause["gpu_fault"]))
        if cause.get("no_restart"):  # restarts remained (supervisor.py: gang_rules.no_restart_for)
            parts.append(" (not restarted: a restart on the same nodes would meet it again)")
    elif state == JobState.UNREACHABLE:
        parts.append("the node stopped answering")
    elif state == JobState.LOST:
        parts.append(str(cause.get("lost_reason") or "its supervisor vanished"))
    elif isinstance(root, Mapping):
        what = ("was killed by %s" % root["signal"]) if root.get("signal") else ("exited with code %s" % root.get("exit_code"))
        where = " on %s" % root["host"] if root.get("host") and root.get("host") != host else ""
        parts.append("global rank %s (local rank %s%s) %s" % (root.get("rank"), root.get("local_rank"), where, what))
        if root.get("error") and not root.get("signal"):
            parts.append(": %s" % root["error"])
    else:
        if cause.get("rank_ended_first"):  # before the news of another node's failure came: then it was stopped
            parts.append("a rank ended first, and then ")
        if cause.get("signal"):
            parts.append("%s was killed by %s" % (_launcher(cause), cause["signal"]))
        else:
            parts.append("%s exited with code %s" % (_launcher(cause), cause.get("exit_code")))
    if isinstance(root, Mapping) and cause.get("container") and state not in (JobState.UNREACHABLE, JobState.LOST):
        parts.append("; %s %s" % (_launcher(cause), ("was killed by %s" % cause["signal"]) if cause.get("signal")
                                  else "exited with code %s" % cause.get("exit_code")))
    parts.extend(_the_others(results, cause))
    lines = list(cause.get("log_tail") or [])[-tail_lines:]
    lines = rank_lines.failing_rank_first(lines, root.get("rank") if isinstance(root, Mapping) else None)
    where = cause.get("log") or cause.get("log_path")
    message = "".join(parts) + "."
    if lines:
        message += "\nLast %d lines of %s (%s):\n%s" % (len(lines), host, where, "\n".join(lines))
    return message
