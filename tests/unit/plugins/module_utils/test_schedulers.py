"""The schedulers on the node's side (module_utils/_runtime/schedulers.py): what ssh and Slurm each do for the launch, the
stop and the supervisor, and that nothing else in module_utils branches on a scheduler's name.

Slurm itself is not run here (scancel is replaced by a recorder); tests/cluster/test_slurm.py runs the real one."""

import glob
import os
import re

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import schedulers, slurm_jobs
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import PORTS_VAR, JobState

SPEC = {"job": "j", "node_rank": 1, "master_port": 29500, "restart_ports": [29501, 29502], "slurm_node": "gpu-b",
        "slurm_job_id": "42", "scheduler": "slurm"}
VALUES = {"master_port": 29500, "restart_ports": [], "max_restarts": 0, "launcher": "torchrun", "slurm_node": "",
          "slurm_job_id": ""}


def test_a_scheduler_by_name_and_an_unknown_one_refused():
    assert schedulers.scheduler_of("").name == "ssh" and schedulers.scheduler_of(None).name == "ssh"
    assert schedulers.scheduler_of("slurm").name == "slurm"
    assert schedulers.SCHEDULERS == ("ssh", "slurm")
    with pytest.raises(ValueError, match="scheduler: 'pbs' is not one of ssh, slurm"):
        schedulers.scheduler_of("pbs")


def test_ssh_starts_at_once_on_the_ports_it_was_given(monkeypatch):
    ssh = schedulers.scheduler_of("ssh")
    monkeypatch.setattr(schedulers, "cancel", lambda job_id: pytest.fail("ssh cancelled Slurm job %s" % job_id))
    assert ssh.task_files("/jobs/j", SPEC, "python3") == {}
    assert ssh.queued_state(SPEC, "run1") is None
    assert ssh.cancel(SPEC, wanted=True) == ""
    assert ssh.ports(SPEC, {PORTS_VAR: "30000,30001"}) == [29500, 29501, 29502]
    assert ssh.state_fields({"SLURM_JOB_ID": "42"}) == {}
    assert ssh.container_problem() == "" and ssh.launcher_problem("mpirun") == ""


def test_slurm_queues_the_part_and_its_step_starts_the_supervisor(monkeypatch):
    slurm = schedulers.scheduler_of("slurm")
    files = slurm.task_files("/jobs/j", SPEC, "/usr/bin/python3")
    assert list(files) == [slurm_jobs.TASK_FILE]
    assert "gpu-b" in files[slurm_jobs.TASK_FILE] and '/usr/bin/python3 "$job_dir/supervisor.py"' in files[
        slurm_jobs.TASK_FILE]
    queued = slurm.queued_state(SPEC, "run1")
    assert queued["state"] == JobState.QUEUED and queued["run_id"] == "run1"
    assert (queued["slurm_job_id"], queued["slurm_node"], queued["node_rank"]) == ("42", "gpu-b", 1)


def test_slurm_cancels_its_job_only_when_wanted(monkeypatch):
    slurm = schedulers.scheduler_of("slurm")
    cancelled = []
    monkeypatch.setattr(schedulers, "cancel", lambda job_id: cancelled.append(job_id) or "")
    assert slurm.cancel(SPEC, wanted=False) == "" and cancelled == []
    assert slurm.cancel(SPEC, wanted=True) == "cancelled Slurm job 42" and cancelled == ["42"]
    monkeypatch.setattr(schedulers, "cancel", lambda job_id: "scancel: error: Invalid job id specified")
    assert slurm.cancel(SPEC, wanted=True) == "scancel: error: Invalid job id specified"
    assert slurm.cancel(dict(SPEC, slurm_job_id=""), wanted=True) == ""


def test_the_status_gets_slurms_word_under_slurm_only(monkeypatch):
    asked = []
    monkeypatch.setattr(schedulers, "query", lambda job_id: asked.append(("now", job_id)) or {"state": "PENDING"})
    monkeypatch.setattr(schedulers, "query_ended",
                        lambda job_id, wait_s: asked.append(("ended", job_id, wait_s)) or {"state": "COMPLETED"})
    queued = {"state": JobState.QUEUED, "slurm_job_id": "42"}
    assert schedulers.scheduler_of("ssh").settle_status(queued, {"slurm_job_id": "42"}, 5.0) is queued
    assert asked == []
    still = schedulers.scheduler_of("slurm").settle_status(queued, {"slurm_job_id": "42"}, 5.0)
    assert still["state"] == JobState.QUEUED and still["slurm"] == {"state": "PENDING"} and asked == [("now", "42")]
    # Once this node's part ended, Slurm's final state is waited for (up to the wait given).
    ended = schedulers.scheduler_of("slurm").settle_status({"state": JobState.SUCCEEDED}, {"slurm_job_id": "42"}, 5.0)
    assert ended["slurm"] == {"state": "COMPLETED"} and asked[-1] == ("ended", "42", 5.0)
    # A part Slurm never queued (no job id in its state) is left as it is.
    assert schedulers.scheduler_of("slurm").settle_status(queued, {}, 5.0) is queued and len(asked) == 2
    assert schedulers.TASK_FILES == (slurm_jobs.TASK_FILE,)


def test_slurm_takes_the_ports_node_0_picked_when_the_job_started():
    slurm = schedulers.scheduler_of("slurm")
    assert slurm.ports(SPEC, {PORTS_VAR: "30000,30001"}) == [30000, 30001]
    assert slurm.ports(SPEC, {}) == [29500, 29501, 29502]
    assert slurm.state_fields({"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0", "SLURMD_NODENAME": "gpu-b"}) == {
        "slurm_job_id": "42", "slurm_step_id": "0", "slurm_node": "gpu-b"}


@pytest.mark.parametrize("name, change, message", [
    ("ssh", {"master_port": 0}, "master_port: 0 is not a TCP port"),
    ("ssh", {"max_restarts": 2, "restart_ports": [29501]},
     "supervision.max_restarts: 2 needs as many supervision.restart_ports, got 1"),
    ("slurm", {"master_port": 70000}, "master_port: 70000 is not a TCP port"),
    ("slurm", {}, "scheduler: slurm needs slurm.node (got '') and a numeric slurm.job_id (got '')"),
    ("slurm", {"slurm_node": "gpu-b", "slurm_job_id": "x1"}, "a numeric slurm.job_id (got 'x1')"),
    ("slurm", {"slurm_node": "gpu-b", "slurm_job_id": "42", "launcher": "horovodrun"},
     "launcher: horovodrun is not supported with scheduler=slurm"),
])
def test_each_scheduler_checks_the_launch_options_it_needs(name, change, message):
    assert message in schedulers.scheduler_of(name).options_problem(dict(VALUES, **change))


@pytest.mark.parametrize("name, change", [
    ("ssh", {}),
    ("slurm", {"master_port": 0, "max_restarts": 2, "slurm_node": "gpu-b", "slurm_job_id": "42"}),
])
def test_good_options_pass(name, change):
    assert schedulers.scheduler_of(name).options_problem(dict(VALUES, **change)) == ""


SCHEDULER_NAME_TEST = re.compile(r"""[=!]=\s*["'](?:slurm|ssh)["']|["'](?:slurm|ssh)["']\s*[=!]=""")


def test_nothing_else_on_the_node_side_branches_on_a_schedulers_name():
    folder = os.path.dirname(schedulers.__file__)
    found = {}
    for path in glob.glob(os.path.join(folder, "*.py")):
        if os.path.basename(path) in ("schedulers.py", "slurm_jobs.py"):
            continue
        hits = [line.strip() for line in open(path) if SCHEDULER_NAME_TEST.search(line)]
        if hits:
            found[os.path.basename(path)] = hits
    assert found == {}
    assert SCHEDULER_NAME_TEST.search('if spec.get("scheduler") == "slurm":')
