# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action gpufleet.cluster.job_report: print the per-node table of a job and fail when a node failed."""

from __future__ import annotations

import os
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpufleet.cluster.plugins.modules import job_report as documentation
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import action_args
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import history
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._postmortem import (
    flight_recorder,
    gpu_report,
    rank_lines,
    report,
    report_page,
    timeline,
)

display = Display()


def _write_timeline(logs_dir: str, results: list[dict]) -> str:
    """logs_dir/events.log from the nodes' events (plugin_utils/_postmortem/timeline.py); '' when no node had any."""
    if not any(r.get("events") for r in results) or not os.path.isdir(logs_dir):
        return ""
    path = os.path.join(logs_dir, "events.log")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(timeline.merge(results)) + "\n")
    return path


def _record_faults(logs_root: str, job: str, results: list[dict]) -> None:
    """Append the faults the results show that the fleet's history does not hold yet; a history that cannot be read
    is said, and left as it is."""
    path = history.path_of(logs_root)
    try:
        faults = history.add(path, history.job_faults(job, results, report.replacements(results),
                                                      hung=report.hang_cause(results), left_out=report.left_out(results)),
                             history.not_yet_recorded)
    except history.HistoryError as exc:
        display.warning("the job's faults were not recorded: %s" % exc)
        return
    if faults:
        display.display("Recorded in the fleet's history (%s): %s" % (path, history.said(faults)))


def _results(args: dict, logs_dir: str) -> list[dict]:
    """Each node's result with its host and node rank (from hosts, in rank order) and its fetched log's path."""
    hosts = list(args.get("hosts") or [])
    results = []
    for index, found in enumerate(args.get("results") or []):
        entry = dict(found or {})
        if index < len(hosts):
            entry.setdefault("host", hosts[index])
            entry.setdefault("node_rank", index)
        if logs_dir:
            entry["log"] = os.path.join(logs_dir, "%s.log" % entry.get("host"))
        results.append(entry)
    return results


SPARES = "Spares"
FEWER = "Fewer nodes"
EARLIER = "Kept from the attempts before a restart"


def _sections(results: list[dict], logs_dir: str) -> dict[str, str]:
    """The restarts, the spares and what earlier attempts left, each said in the terminal and kept for the page."""
    sections = {"Restarts": report.restarts_said(results),
                EARLIER: report.earlier_attempts_said(results, logs_dir) if logs_dir else "",  # stacks and dumps
                SPARES: report.replacements_said(results),
                FEWER: report.left_out_said(results)}
    for title, text in sections.items():
        if text:
            display.display("%s: %s" % (title, text))
    return sections


class ActionModule(ActionBase):
    """Runs once, on the controller, after every node's result is known."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        args = action_args.validated(self, documentation.DOCUMENTATION)
        logs_dir = str(args["logs_dir"]) if args.get("logs_dir") else ""
        results = _results(args, logs_dir)
        job = str(args["job"])
        table = report.format_table(results, show_job=args["show_job"])
        display.display("%s\n%s" % (args.get("title") or "job %s" % job, table))
        samples_dir = args.get("samples_dir") or args.get("logs_dir")
        gpus = gpu_report.job_gpus(str(samples_dir), results) if samples_dir else {"lines": []}
        if gpus["lines"]:
            display.display("GPUs over the job (%s):\n%s" % (gpus["picture"], "\n".join(gpus["lines"])))
        rank_logs = rank_lines.split_by_rank([str(r["log"]) for r in results if r.get("log")],
                                             logs_dir) if logs_dir else []
        if rank_logs:
            display.display("Each rank's lines, untagged: %s/rank<N>.log (%d ranks)" % (
                os.path.dirname(rank_logs[0]), len(rank_logs)))
        events_log = _write_timeline(logs_dir, results) if logs_dir else ""
        if events_log:
            display.display("Every node's events in time order: %s" % events_log)
        sections = _sections(results, logs_dir)
        if logs_dir:  # the nodes' faults, in the fleet's history (history.py: quarantine)
            _record_faults(os.path.dirname(logs_dir), job, results)
        message = report.failure_message(job, results)
        recorder = flight_recorder.summary(logs_dir, results) if logs_dir else {"said": ""}
        if recorder["said"]:
            display.display("PyTorch's flight recorder: %s" % recorder["said"])
            if not message:  # else part of the message, as the page's failure shows it
                sections["PyTorch's flight recorder"] = recorder["said"]
            message = message and "%s\nPyTorch's flight recorder: %s" % (message, recorder["said"])
        stacks = report.where_ranks_were(results)
        if stacks and stacks not in (message or ""):  # taken before a stop that asked for them, not on a hang
            display.display("Where each rank was when the job was stopped: %s" % stacks)
            sections["Where each rank was when the job was stopped"] = stacks
        last_from, last = rank_lines.last_words(rank_logs, str(results[0].get("log") or "") if results else None)
        page = ""
        if samples_dir and os.path.isdir(str(samples_dir)):  # the same story as one page, beside the logs it links
            page = report_page.write(report_page.Story(
                job, results, str(samples_dir), message, args["show_job"], sections, gpus["lines"],
                gpus.get("picture", ""), last_from, last, rank_logs, events_log))
            display.display("The job's story as one page: %s" % page)
        if last:  # the script's own last word (its result, or where it stopped) ends the summary
            display.display("The master rank's last lines (%s):\n%s"
                            % (last_from, "\n".join("  " + line for line in last)))
        result.update(changed=False, table=table.splitlines(), gpus=gpus, rank_logs=rank_logs, events_log=events_log,
                      stacks=stacks, flight_recorder=recorder, replaced=sections.get(SPARES, ""),
                      left_out=sections.get(FEWER, ""),
                      earlier_attempts=sections.get(EARLIER, ""), last_lines=last, page=page)
        if message and args["fail_on_error"]:
            result.update(failed=True, msg=message)
        elif message:
            result["warning"] = message
        return result
