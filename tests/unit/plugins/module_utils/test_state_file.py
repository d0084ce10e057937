"""The one writer of a node's record of its job (module_utils/_runtime/state_file.py): each change of state checked
against the transitions JobState's docstring draws, and no other file writing state.json or exit_code."""

import json
import os
import re

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import state_file
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import ENDED_STATES, JobState
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.state_file import (
    StateFile,
    StateTransitionError,
    allowed,
    clear_run,
)

HERE = os.path.dirname(os.path.abspath(__file__))
PLUGINS = os.path.join(HERE, "..", "..", "..", "..", "plugins")


@pytest.mark.parametrize("path", [
    [None, "starting", "running", "succeeded"],
    [None, "queued", "starting", "running", "stopping", "stopped"],  # Slurm, then a stop
    [None, "starting", "running", "stopping", "restarting", "running", "failed"],  # stopped for a peer, restarted
    [None, "starting", "running", "restarting", "running", "hung"],
    [None, "starting", "standby", "running", "succeeded"],  # a spare that took a place
    [None, "starting", "standby", "unused"],
    [None, "starting", "failed"],  # could not join the gang
    [None, "queued", "stopped"],  # stopped before Slurm started it
    [None, "stopped"],  # a stop recorded where the supervisor never wrote anything
])
def test_the_paths_a_part_takes_are_transitions(path):
    assert all(allowed(before, after) for before, after in zip(path, path[1:])), path


@pytest.mark.parametrize("before, after", [
    ("succeeded", "running"),  # an ended record is final
    ("failed", "restarting"),
    ("stopped", "stopping"),
    ("unused", "running"),
    (None, "running"),  # no run starts running without starting
    ("queued", "running"),
    ("running", "standby"),
    ("running", "queued"),
])
def test_changes_outside_the_table_are_refused(before, after):
    assert not allowed(before, after)


def test_every_state_is_in_the_table_and_ended_ones_lead_nowhere():
    assert set(state_file.TRANSITIONS) >= {None} | {state for state in JobState
                                                    if state not in (JobState.LOST, JobState.ABSENT, JobState.UNREACHABLE)}
    assert all(state_file.TRANSITIONS[state] == () for state in ENDED_STATES)


def test_a_wrong_change_raises_where_strict_and_is_said_in_the_events_elsewhere(tmp_path, monkeypatch):
    record = StateFile(str(tmp_path), "r1")
    record.write({"run_id": "r1", "state": "starting"})
    record.write({"run_id": "r1", "state": "succeeded"})
    monkeypatch.setenv(state_file.STRICT_ENV, "1")
    with pytest.raises(StateTransitionError, match="succeeded -> running"):
        record.write({"run_id": "r1", "state": "running"})
    monkeypatch.delenv(state_file.STRICT_ENV)
    record.write({"run_id": "r1", "state": "running"})
    saved = json.loads((tmp_path / "state.json").read_text())
    assert saved["state"] == "running" and "gpufleet defect: state succeeded -> running" in saved["events"][-1][1]


def test_a_new_run_starts_from_no_record_and_a_stop_is_recorded_over_a_gone_supervisor(tmp_path):
    first = StateFile(str(tmp_path), "r1")
    first.write({"run_id": "r1", "state": "starting"})
    first.write({"run_id": "r1", "state": "succeeded"})
    StateFile(str(tmp_path), "r2").write({"run_id": "r2", "state": "starting"})  # another run's record is no past
    StateFile(str(tmp_path)).record_stop("stopped by the user")
    saved = json.loads((tmp_path / "state.json").read_text())
    assert saved["state"] == "stopped" and saved["stop_reason"] == "stopped by the user" and saved["run_id"] == "r2"
    StateFile(str(tmp_path)).write_exit_code(143)
    assert (tmp_path / "exit_code").read_text() == "143\n"
    clear_run(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == []


# Writing the records: state_file.py alone names them for writing (read elsewhere, written here).
WRITES = re.compile(r"(write_json_atomic|write_atomic)\([^)]*(STATE_FILE|EXIT_CODE_FILE)|open\([^)]*(STATE_FILE|"
                    r"EXIT_CODE_FILE)[^)]*[\"'][wa]|os\.remove\([^)]*(STATE_FILE|EXIT_CODE_FILE)")


def test_no_other_file_writes_state_json_or_the_exit_code():
    found = []
    for root, _dirs, files in os.walk(PLUGINS):
        for name in files:
            if not name.endswith(".py") or name == "state_file.py":
                continue
            with open(os.path.join(root, name)) as handle:
                text = handle.read()
            found += ["%s: %s" % (name, match.group(0)) for match in WRITES.finditer(text)]
    assert not found, found
