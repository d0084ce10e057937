# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one writer of a node's record of its part of a job: state.json (its events inside it) and exit_code, and the
same record as Prometheus metrics where the launch names a folder for them (job_metrics.py).

The supervisor saves through it; the launch writes a queued part's first state and clears the last run's records;
a stop records the end of a part whose supervisor is gone. Each change of state is checked against TRANSITIONS, the
table JobState's docstring draws: a change outside it is a defect of gpufleet's own, said in the part's events (the
job's timeline) and written anyway, since a bookkeeping check must not take a user's job down; where
GPUFLEET_STRICT_STATES is set (the test suites), it raises instead. tests/unit/plugins/module_utils/test_state_file.py
checks the table and that no other file writes these files. Shipped to the nodes as part of the supervisor; standard
library only, Python 3.8+.
"""

from __future__ import annotations

import os
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_metrics import JobMetrics
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_processes import read_json, write_json_atomic
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import (
    ENDED_STATES,
    EXIT_CODE_FILE,
    STATE_FILE,
    STOP_REQUEST_FILE,
    JobState,
)

_ENDS = (JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED, JobState.HUNG)
# The states a part may go to from each (None: no record of this run yet). An active part may end in any way (a
# stop, a failure or a hang can come at any moment of it) or begin to stop; an ended part's record is final.
TRANSITIONS: dict = {
    # A stop may record the end of a part whose supervisor never wrote anything.
    None: (JobState.QUEUED, JobState.STARTING, JobState.STOPPED),
    JobState.QUEUED: (JobState.STARTING, JobState.STOPPED, JobState.FAILED),
    JobState.STARTING: (JobState.RUNNING, JobState.STANDBY, JobState.STOPPING) + _ENDS,
    JobState.RUNNING: (JobState.RESTARTING, JobState.STOPPING) + _ENDS,
    # Stopped for another node's failure, the gang may still launch again.
    JobState.STOPPING: (JobState.RESTARTING, JobState.UNUSED) + _ENDS,
    JobState.RESTARTING: (JobState.RUNNING, JobState.STOPPING) + _ENDS,
    # A spare: it takes a node's place (and runs), or the job ends without it.
    JobState.STANDBY: (JobState.RUNNING, JobState.STOPPING, JobState.UNUSED) + _ENDS,
}
for _ended in ENDED_STATES:
    TRANSITIONS.setdefault(_ended, ())
STRICT_ENV = "GPUFLEET_STRICT_STATES"


class StateTransitionError(RuntimeError):
    """A change of state outside TRANSITIONS (raised where GPUFLEET_STRICT_STATES is set)."""


def allowed(before: str | None, after: str) -> bool:
    """Whether a part's record may go from before to after (staying is always allowed)."""
    if before == after:
        return True
    return after in TRANSITIONS.get(before, ())  # a JobState is the string it names: "running" finds RUNNING


class StateFile:
    """A job folder's state.json and exit_code, written whole (atomically), each change of state checked."""

    def __init__(self, job_dir: str, run_id: str | None = None, metrics_dir: str = "") -> None:
        self.path = os.path.join(job_dir, STATE_FILE)
        # The same record as Prometheus metrics, where the node exporter reads them (job_metrics.py).
        self.metrics = JobMetrics(metrics_dir, os.path.basename(os.path.normpath(job_dir)))
        self.exit_code_path = os.path.join(job_dir, EXIT_CODE_FILE)
        on_disk = read_json(self.path) or {}
        # The state this run's record is in: none where the folder holds another run's (or none).
        same_run = run_id is None or on_disk.get("run_id") == run_id
        self.current: str | None = on_disk.get("state") if same_run else None

    def read(self) -> dict:
        return dict(read_json(self.path) or {})

    def write(self, state: dict) -> None:
        """Write the part's whole record; its "state" checked against the record's last."""
        after = state.get("state")
        if after is not None and not allowed(self.current, after):
            said = "state %s -> %s is not a change JobState allows (state_file.TRANSITIONS)" % (self.current, after)
            if os.environ.get(STRICT_ENV):
                raise StateTransitionError(said)
            state.setdefault("events", []).append([round(time.time(), 3), "gpufleet defect: %s" % said])
        problem = self.metrics.write(state)
        if problem:
            state.setdefault("events", []).append([round(time.time(), 3), problem])
        write_json_atomic(self.path, state)
        self.current = after if after is not None else self.current

    def write_exit_code(self, exit_code: int) -> None:
        """The part's exit status, written before its final state (whoever reads the final state finds it)."""
        with open(self.exit_code_path, "w") as handle:
            handle.write("%d\n" % exit_code)

    def record_stop(self, reason: str) -> None:
        """A stop's record of a part whose supervisor is gone or never started: stopped, with the reason."""
        state = self.read()
        state.update(state=JobState.STOPPED, stop_reason=reason, ended_at=time.time())
        self.write(state)


def clear_run(job_dir: str) -> None:
    """Remove the last run's records (state, exit code, stop request) before a new run is written."""
    for name in (STATE_FILE, EXIT_CODE_FILE, STOP_REQUEST_FILE):
        path = os.path.join(job_dir, name)
        if os.path.exists(path):
            os.remove(path)
