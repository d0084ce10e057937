# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""logs/<job>/report.html: a job's story as one page, from what the report says in the terminal.

First what failed first and why (the report's failure message), then the summary table, the restarts and spares,
where the ranks were, the GPUs over the job, the master rank's last lines, every node's events in time order, and
links to every log. Self-contained: no script, no style sheet or font from elsewhere, the GPUs' picture inline as a
data: URI, the logs linked by paths relative to the page (it sits beside them), so that it opens from the file on a
laptop without a network. Pure functions; the action writes the file.
"""

from __future__ import annotations

import base64
import html
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_processes import write_atomic
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import JobState
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._postmortem import report

PAGE = "report.html"
# A timeline longer than this shows its first and last lines, and links the whole of events.log.
TIMELINE_LINES = 400

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 1.5em auto; max-width: 72em; padding: 0 1em; color: #1d1d1f; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
.ok { color: #1a7f37; } .bad { color: #b42318; }
.failure { border-left: 5px solid #b42318; background: #fdf1f0; padding: .4em 1em; }
pre { background: #f6f8fa; padding: .6em .8em; overflow-x: auto; font-size: 13px; white-space: pre-wrap; }
table { border-collapse: collapse; margin-top: 1em; } th, td { border: 1px solid #d0d7de; padding: .25em .6em; text-align: left; }
th { background: #f6f8fa; } td.failed, td.hung, td.lost { color: #b42318; font-weight: 600; }
img { max-width: 100%; border: 1px solid #d0d7de; }
"""


@dataclass
class Story:
    """What the page tells, as the report computed it for the terminal (plugins/action/job_report.py)."""

    job: str
    results: Sequence[Mapping[str, Any]]
    logs_dir: str
    message: str | None = None
    show_job: bool = False
    sections: dict[str, str] = field(default_factory=dict)  # title -> what the terminal said under it
    gpu_lines: list[str] = field(default_factory=list)
    picture: str = ""
    last_from: str = ""
    last_lines: list[str] = field(default_factory=list)
    rank_logs: list[str] = field(default_factory=list)
    events_log: str = ""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _link(path: str, logs_dir: str) -> str:
    """A link to a file beside or below the page, by its path relative to it; a path elsewhere, as text."""
    if not path or path == "-":
        return _e(path or "-")
    relative = os.path.relpath(path, logs_dir) if os.path.isabs(path) else path
    if relative.startswith(".."):
        return _e(path)
    return '<a href="%s">%s</a>' % (_e(relative), _e(relative))


def outcome(results: Sequence[Mapping[str, Any]], message: str | None) -> tuple[str, bool]:
    """The headline's words for the job (how it ended, and where first when it failed) and whether it went well."""
    if message and report.hung(results):  # a hang is the whole job's: the rank its stacks name, where they do
        cause = report.hang_cause(results)
        named = "; ".join("rank%s %s on %s" % ("s" if len(ranks) > 1 else "", ", ".join(map(str, ranks)), host)
                          for host, ranks in cause.items())
        return "hung%s" % (" (the stacks name %s)" % named if named else ""), False
    first = report.first_failure(results) if message else None
    if first is not None:
        return "%s on %s (node_rank %s)" % (first.get("state"), first.get("host"), first.get("node_rank", "?")), False
    states = sorted({str(r.get("state", "?")) for r in results})
    return ", ".join(states) or "no node reported", states == [JobState.SUCCEEDED] and not message


def table(story: Story) -> str:
    rows = report.table_rows(story.results)
    columns = report.table_columns(rows, story.show_job)
    head = "".join("<th>%s</th>" % _e(title) for title, _key in columns)
    body = []
    for row in rows:
        cells = []
        for _title, key in columns:
            value = _link(row[key], story.logs_dir) if key == "log" else _e(row[key])
            cells.append('<td class="%s">%s</td>' % (_e(row["state"].split(" ")[0]) if key == "state" else "", value))
        body.append("<tr>%s</tr>" % "".join(cells))
    return "<table><tr>%s</tr>%s</table>" % (head, "".join(body))


def _picture(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            data = base64.b64encode(handle.read()).decode()
    except OSError:
        return ""
    return ('<img alt="GPU utilisation and memory over the job, one line per node" src="data:image/png;base64,%s">'
            % data)


def _timeline(story: Story) -> str:
    if not story.events_log:
        return ""
    try:
        with open(story.events_log, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return ""
    if len(lines) > TIMELINE_LINES:
        half = TIMELINE_LINES // 2
        lines = lines[:half] + ["... %d lines more in events.log ..." % (len(lines) - 2 * half)] + lines[-half:]
    return "<h2>Every node's events in time order (%s)</h2><pre>%s</pre>" % (
        _link(story.events_log, story.logs_dir), _e("\n".join(lines)))


def _logs(story: Story) -> str:
    links = [_link(str(r["log"]), story.logs_dir) for r in story.results if r.get("log")]
    links += [_link(path, story.logs_dir) for path in story.rank_logs + report.stacks_files(story.results)]
    return "<h2>Logs</h2><ul>%s</ul>" % "".join("<li>%s</li>" % link for link in links) if links else ""


def page(story: Story) -> str:
    """The page's HTML."""
    said, good = outcome(story.results, story.message)
    parts = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             "<title>job %s: %s</title><style>%s</style></head><body>" % (_e(story.job), _e(said), STYLE),
             '<h1>job %s: <span class="%s">%s</span></h1>' % (_e(story.job), "ok" if good else "bad", _e(said))]
    if story.message:
        parts.append('<section class="failure"><h2>What failed first, and why</h2><pre>%s</pre></section>'
                     % _e(story.message))
    parts.append(table(story))
    for title, text in story.sections.items():
        if text:
            parts.append("<h2>%s</h2><pre>%s</pre>" % (_e(title), _e(text)))
    if story.gpu_lines or story.picture:
        parts.append("<h2>GPUs over the job</h2>%s<pre>%s</pre>"
                     % (_picture(story.picture), _e("\n".join(story.gpu_lines))))
    if story.last_lines:
        parts.append("<h2>The master rank's last lines (%s)</h2><pre>%s</pre>" % (
            _link(story.last_from, story.logs_dir), _e("\n".join(story.last_lines))))
    parts.extend([_timeline(story), _logs(story), "</body></html>\n"])
    return "\n".join(part for part in parts if part)


def write(story: Story) -> str:
    """logs_dir/report.html, written whole (job_processes.write_atomic), readable by all as the logs are; its path."""
    path = os.path.join(story.logs_dir, PAGE)
    write_atomic(path, page(story), 0o644)
    return path
