# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A node's part of a job as Prometheus metrics, for the node exporter's textfile collector.

Each time the part's record (state.json) is written, state_file.py has this write the same facts as
``gpufleet_job_<user>_<job>.prom`` into the job's metrics folder (job_metrics_dir: the distribution's textfile directory,
/var/lib/prometheus/node-exporter, which monitor.yml's node_exporter role lets its writers' group write), so that
Prometheus reads them with the node's own samples, labelled with the node. The file is written whole and renamed
into place (the collector never reads half of it) and readable by all (the exporter runs as its own user). It is
left with the part's last state when the part ends: the alert rules (roles/prometheus/files/gpufleet.rules.yml)
look at how recent it is. The label ``gpufleet_job`` names the job (``job`` is Prometheus's own: the scrape job's),
``user`` the user who runs it: two users' jobs of one name on one node are two files and two series.
Shipped to the nodes as part of the supervisor; standard library only, Python 3.8+.
"""

from __future__ import annotations

import os
import pwd
import re
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import JobState

# The states a node's part of a job can be in (a record's, not the controller's own: lost, absent, unreachable).
PART_STATES = (JobState.QUEUED, JobState.STARTING, JobState.RUNNING, JobState.STOPPING, JobState.RESTARTING,
               JobState.STANDBY, JobState.UNUSED, JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED, JobState.HUNG)
METRICS_FILE = "gpufleet_job_%s_%s.prom"  # the user, the job
# (name, help, the value from a part's record); all gauges
_GAUGES = (
    ("gpufleet_job_attempt", "The attempt this node's part of the job is in (1, then one more a restart).",
     lambda record: record.get("attempt") or 1),
    ("gpufleet_job_restarts", "The restarts this job has used (of gpufleet_job_max_restarts).",
     lambda record: record.get("restarts_used") or 0),
    ("gpufleet_job_max_restarts", "The restarts this job may use.",
     lambda record: record.get("max_restarts") or 0),
    ("gpufleet_job_node_rank", "This node's node rank in the job's current attempt.",
     lambda record: record.get("node_rank") or 0),
    ("gpufleet_job_nodes", "The nodes the job's current attempt runs on.",
     lambda record: len(record.get("members") or []) or None),
    ("gpufleet_job_gpu_fault", "1 when one of this node's GPUs faulted during the job (an XID).",
     lambda record: 1 if record.get("gpu_fault") else 0),
    ("gpufleet_job_started_timestamp_seconds", "When this node's part of the job started.",
     lambda record: record.get("started_at")),
)


def metric_label(value: object) -> str:
    """A label's value as the text format writes it (backslash, newline and quote escaped)."""
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(job: str, user: str, record: dict, now: float) -> str:
    """The Prometheus text format of a node's part of a job, from its record (state.json's content)."""
    name = '%s",user="%s' % (metric_label(job), metric_label(user))  # the labels every series carries
    lines = ["# HELP gpufleet_job_state The state of this node's part of the job: 1 for the state it is in.",
             "# TYPE gpufleet_job_state gauge"]
    lines += ['gpufleet_job_state{gpufleet_job="%s",state="%s"} %d' % (name, state, int(record.get("state") == state))
              for state in PART_STATES]
    for metric, text, read in _GAUGES:
        value = read(record)
        if value is not None:
            lines += ["# HELP %s %s" % (metric, text), "# TYPE %s gauge" % metric,
                      '%s{gpufleet_job="%s"} %s' % (metric, name, metric_number(value))]
    lines += ["# HELP gpufleet_job_peer_lost A node this node's part of the job lost: 1 for each.",
              "# TYPE gpufleet_job_peer_lost gauge"]
    lines += ['gpufleet_job_peer_lost{gpufleet_job="%s",peer="%s"} 1' % (name, metric_label(peer))
              for peer in sorted(record.get("peers_lost") or {})]
    lines += ["# HELP gpufleet_job_updated_timestamp_seconds When this node's record of the job last changed.",
              "# TYPE gpufleet_job_updated_timestamp_seconds gauge",
              'gpufleet_job_updated_timestamp_seconds{gpufleet_job="%s"} %s' % (name, metric_number(round(now, 3)))]
    return "\n".join(lines) + "\n"


def metric_number(value: object) -> str:
    """A sample's value as the text format writes it (a whole number without its .0)."""
    number = float(value)  # type: ignore[arg-type]
    return str(int(number)) if number.is_integer() else repr(number)


class JobMetrics:
    """Where a job's metrics file goes, and its one writer. A folder that is missing is left alone (the node has no
    node exporter); one that cannot be written is said once in the part's events (problem), and the job goes on."""

    def __init__(self, folder: str | None, job: str) -> None:
        # No folder (no node exporter on the node): nothing to write, nothing to say.
        usable = bool(folder) and os.path.isdir(str(folder))
        self.user = _user()
        self.path = os.path.join(str(folder), METRICS_FILE % tuple(
            re.sub(r"[^A-Za-z0-9_.-]", "_", name) for name in (self.user, job))) if usable else None
        self.job = job
        self.problem: str | None = None

    def write(self, record: dict) -> str | None:
        """Write the record's metrics; the problem, the first time the folder fails (None otherwise)."""
        if self.path is None or self.problem is not None:
            return None
        try:
            replace_textfile(self.path, render(self.job, self.user, record, time.time()))
        except OSError as exc:
            self.problem = "job metrics not written to %s: %s (job_metrics_dir; monitor.yml's node_exporter role " \
                           "lets node_exporter_metrics_users write there)" % (os.path.dirname(self.path), exc.strerror)
            return self.problem
        return None


def replace_textfile(path: str, text: str) -> None:
    """Write a textfile collector's file whole: to a temporary name the collector does not read (not *.prom), then
    renamed into place, readable by all (the exporter runs as its own user); OSError, with nothing left behind."""
    temporary = "%s.%d.tmp" % (path, os.getpid())
    try:
        with open(temporary, "w") as handle:
            handle.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except OSError:
        try:
            os.remove(temporary)
        except OSError:
            pass
        raise


def _user() -> str:
    """The name of the user this process runs as (its uid where the name is unknown)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())
