"""One vocabulary of job states (job_states.JobState): the controller side imports it and keeps no copy."""

import ast
import dataclasses
import glob
import json
import os

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import (
    ACTIVE_STATES,
    ENDED_STATES,
    FAILURE_STATES,
    GANG_FAILURE_STATES,
    HeartbeatPhase,
    JobState,
    PartOutcome,
    STOPPED_FOR,
    StopReason,
    WAIT_ENDED_STATES,
)

PLUGINS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "plugins")
STATES = {state.value for state in JobState}
PHASES = {phase.value for phase in HeartbeatPhase}
# Modules whose words are another program's, not the job's: DCGM's results, systemctl's unit states, Ansible's file
# and service states (node_state: "absent", "stopped").
OTHER_VOCABULARIES = ("dcgm_diag.py", "nvidia_node.py", "verify.py", "node_state.py")
CONTROLLER_SIDE = (glob.glob(os.path.join(PLUGINS, "action", "*.py")) + glob.glob(os.path.join(PLUGINS, "plugin_utils", "*.py"))
                   + [os.path.join(PLUGINS, "module_utils", "_job", "jobs.py")])


def copied_state_sets(source: str) -> list[list[str]]:
    """Tuple, list and set literals of two or more strings that are all job states."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) >= 2:
            values = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if len(values) == len(node.elts) and set(values) <= STATES:
                found.append(values)
    return found


def test_the_controller_side_holds_no_copy_of_a_set_of_states():
    copies = {os.path.relpath(path, PLUGINS): copied_state_sets(open(path).read()) for path in CONTROLLER_SIDE}
    assert {path: sets for path, sets in copies.items() if sets} == {}
    # The check finds a copy when there is one.
    assert copied_state_sets('TERMINAL = ("succeeded", "failed", "lost")\n') == [["succeeded", "failed", "lost"]]


def spelled_states(source: str) -> list[tuple[int, str]]:
    """(line, word) of each string literal that is a job state or a heartbeat phase, other than a key (of a dict,
    a subscript, or the first argument of get, pop and setdefault): the vocabulary module's members say them."""
    tree = ast.parse(source)
    keys = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys.update(id(key) for key in node.keys if key is not None)
        elif isinstance(node, ast.Subscript):
            keys.add(id(node.slice))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args
              and node.func.attr in ("get", "pop", "setdefault")):
            keys.add(id(node.args[0]))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in STATES | PHASES
            and id(node) not in keys]


def test_no_module_spells_a_state_or_a_phase_itself():
    paths = [path for path in glob.glob(os.path.join(PLUGINS, "**", "*.py"), recursive=True)
             if os.path.basename(path) not in ("job_states.py",) + OTHER_VOCABULARIES]
    spelled = {os.path.relpath(path, PLUGINS): spelled_states(open(path).read()) for path in paths}
    assert {path: words for path, words in spelled.items() if words} == {}
    # The check finds a spelled state, and leaves keys alone.
    assert spelled_states('if part.get("outcome") == "failed":\n    state = {"state": "stopped", "running": 1}\n') == [
        (1, "failed"), (2, "stopped")]
    assert spelled_states('x = answer.get("failed") or answer["unreachable"]\n') == []


def test_a_state_is_its_word_in_json_and_in_messages():
    import json

    assert JobState.RUNNING == "running" and "%s" % JobState.HUNG == "hung" and "{}".format(JobState.LOST) == "lost"
    assert json.dumps({"state": JobState.STOPPED, "phase": HeartbeatPhase.ENDED}) == (
        '{"state": "stopped", "phase": "ended"}')
    assert "running" in {JobState.RUNNING} and JobState("failed") is JobState.FAILED


def test_the_derived_sets_are_made_of_the_states():
    for derived in (ACTIVE_STATES, ENDED_STATES, WAIT_ENDED_STATES, GANG_FAILURE_STATES, FAILURE_STATES):
        assert set(derived) <= STATES
    assert not set(ACTIVE_STATES) & set(WAIT_ENDED_STATES)
    assert set(FAILURE_STATES) <= set(WAIT_ENDED_STATES)


def test_the_job_roles_jobs_folder_default_is_the_supervisions():
    """The one default the role must spell out itself (a role cannot import Python) agrees with Defaults."""
    import yaml

    from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import Defaults

    defaults = yaml.safe_load(open(os.path.join(PLUGINS, "..", "roles", "job", "defaults", "main.yml")))
    assert defaults["job_jobs_dir"] == "{{ gpufleet_jobs_dir | default('%s') }}" % Defaults.JOBS_DIR


def test_a_stop_request_carries_its_reason_and_the_node_it_is_for():
    from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import read_stop_request, stop_request
    assert read_stop_request(stop_request("stopped by gpufleet: node0 failed", "node0")) == (
        "stopped by gpufleet: node0 failed", "node0", False)
    assert read_stop_request(stop_request("stopped from the stop playbook")) == ("stopped from the stop playbook", None, False)
    assert read_stop_request(stop_request("stopped", stacks=True)) == ("stopped", None, True)
    assert read_stop_request(stop_request("two\nlines")) == ("two lines", None, False)  # a reason cannot forge the second
    assert read_stop_request(stop_request("x\nstacks=yes")) == ("x stacks=yes", None, False)  # nor ask for stacks
    assert read_stop_request("stopped by request\n") == ("stopped by request", None, False)  # as older versions wrote it
    assert read_stop_request("") == ("", None, False)


def test_a_parts_outcome_is_typed_and_reads_back_as_state_json_keeps_it():
    ended = PartOutcome(JobState.FAILED, 7, attempt=2, master_port=29501, ended_at=10.5, first_exit_at=9.0)
    stored = json.loads(json.dumps(ended.as_dict()))
    # The keys state.json's "attempts", the report and the gang's news read, the state as its word.
    assert stored == {"outcome": "failed", "exit_code": 7, "attempt": 2, "master_port": 29501, "ended_at": 10.5,
                      "first_exit_at": 9.0, "signal": None, "reason": None, STOPPED_FOR: None,
                      "rank_ended_first": False, "hardware_fault": False, "failed_rank": None, "rank_exit": None,
                      "failed_at": None}
    # A stop keeps what the attempt was and says why, and for which node.
    stopped = ended.stopped(StopReason(JobState.STOPPED, "node1 failed", "node1"), exit_code=1)
    assert (stopped.outcome, stopped.reason, stopped.stopped_for, stopped.exit_code, stopped.attempt) == (
        JobState.STOPPED, "node1 failed", "node1", 1, 2)
    assert ended.outcome == JobState.FAILED  # the original is unchanged: an outcome is a value
    with pytest.raises(dataclasses.FrozenInstanceError):
        ended.exit_code = 0  # type: ignore[misc]
