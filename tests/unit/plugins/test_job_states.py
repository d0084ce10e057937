"""One vocabulary of job states (job_states.JobState): the controller side imports it and keeps no copy."""

import ast
import glob
import os

from ansible_collections.gpufleet.cluster.plugins.module_utils.job_states import JobState

PLUGINS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "plugins")
STATES = {value for name, value in vars(JobState).items() if name.isupper() and isinstance(value, str)} - {
    JobState.STOPPED_FOR}
CONTROLLER_SIDE = (glob.glob(os.path.join(PLUGINS, "action", "*.py")) + glob.glob(os.path.join(PLUGINS, "plugin_utils", "*.py"))
                   + [os.path.join(PLUGINS, "module_utils", "jobs.py")])


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


def test_the_derived_sets_are_made_of_the_states():
    for derived in (JobState.ACTIVE, JobState.ENDED, JobState.WAIT_ENDED, JobState.GANG_FAILURES,
                    JobState.GANG_STOP_TRIGGERS, JobState.FAILURES):
        assert set(derived) <= STATES
    assert not set(JobState.ACTIVE) & set(JobState.WAIT_ENDED)
    assert set(JobState.FAILURES) <= set(JobState.GANG_STOP_TRIGGERS) <= set(JobState.WAIT_ENDED)


def test_the_job_roles_jobs_folder_default_is_the_supervisions():
    """The one default the role must spell out itself (a role cannot import Python) agrees with Defaults."""
    import yaml

    from ansible_collections.gpufleet.cluster.plugins.module_utils.job_states import Defaults

    defaults = yaml.safe_load(open(os.path.join(PLUGINS, "..", "roles", "job", "defaults", "main.yml")))
    assert defaults["job_jobs_dir"] == "{{ gpufleet_jobs_dir | default('%s') }}" % Defaults.JOBS_DIR


def test_a_stop_request_carries_its_reason_and_the_node_it_is_for():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.job_states import read_stop_request, stop_request
    assert read_stop_request(stop_request("stopped by gpufleet: node0 failed", "node0")) == (
        "stopped by gpufleet: node0 failed", "node0")
    assert read_stop_request(stop_request("stopped from the stop playbook")) == ("stopped from the stop playbook", None)
    assert read_stop_request(stop_request("two\nlines")) == ("two lines", None)  # a reason cannot forge the second
    assert read_stop_request("stopped by request\n") == ("stopped by request", None)  # as older versions wrote it
    assert read_stop_request("") == ("", None)
