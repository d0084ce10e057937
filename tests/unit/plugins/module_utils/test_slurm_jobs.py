"""A node's part under Slurm (scheduler=slurm), on the node's side, without Slurm: the launch prepares the folder
(queued, slurm_task.sh) and starts nothing; the task script, run as srun would run it, starts the supervisor in the
foreground with the ports Slurm's first step chose; while queued, the state is Slurm's.

Slurm's client is a stand-in here: a `scontrol` and a `scancel` on PATH that print what a file says and record
their arguments. What this does not check: real Slurm (tests/cluster/test_slurm.py runs the same path through
slurmctld and slurmd on the container cluster)."""

import json
import os
import subprocess
import sys
import uuid

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import job_read, jobs
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import slurm_jobs, supervisor_bundle
from ansible_collections.gpufleet.cluster.plugins.module_utils._job.job_spec import JobSpec
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import ENDED_STATES, JobState
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import job_poll

sys.path.insert(0, os.path.dirname(__file__))
from waiting import wait_for  # noqa: E402  pylint: disable=wrong-import-position

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "slurm")
SOURCE = supervisor_bundle.shipped_source()
PENDING = ("JobId=41 JobName=train UserId=ml(1000) GroupId=ml(1000) Priority=1 JobState=PENDING Reason=Resources "
           "Dependency=(null) NodeList=(null) BatchHost=(null) ExitCode=0:0 Comment=gpufleet run abc")


def read_fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def test_scontrol_answers_are_read():
    completed = slurm_jobs.parse_job(read_fixture("scontrol_show_job_completed.txt"))
    assert completed == {"job_id": "6", "state": "COMPLETED", "reason": "None", "nodes": "node[7-9]",
                         "exit_code": "0:0"}
    assert slurm_jobs.parse_job(PENDING)["reason"] == "Resources"
    assert slurm_jobs.parse_job("slurm_load_jobs error: Invalid job id specified\n") == {"state": slurm_jobs.GONE}
    unknown = slurm_jobs.parse_job("slurm_load_jobs error: Unable to contact slurm controller (connect failure)")
    assert unknown["state"] == slurm_jobs.UNKNOWN and "connect failure" in unknown["error"]


def test_an_ended_part_waits_for_slurm_to_record_the_job_ended_and_no_longer():
    # The race seen in test_slurm: the last supervisor has exited, srun and the batch script not yet.
    answers = iter(["JobId=6 JobState=RUNNING Reason=None", "JobId=6 JobState=COMPLETING Reason=None",
                    read_fixture("scontrol_show_job_completed.txt")])
    calls, slept = [], []

    def run(argv, **_kwargs):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, next(answers), "")

    assert slurm_jobs.query_ended("6", 15.0, run=run, sleep=slept.append)["state"] == "COMPLETED"
    assert len(calls) == 3 and slept == [0.5, 0.5]
    # A job whose other nodes still run is shown as Slurm has it once wait_s is over.
    still = slurm_jobs.query_ended("6", wait_s=0.0, run=lambda argv, **_k: subprocess.CompletedProcess(
        argv, 0, "JobId=6 JobState=RUNNING Reason=None", ""), sleep=slept.append)
    assert still["state"] == "RUNNING" and slept == [0.5, 0.5]


@pytest.mark.parametrize("slurm_state,expected", [
    ("PENDING", JobState.QUEUED), ("RUNNING", JobState.STARTING), ("CANCELLED", JobState.STOPPED),
    ("FAILED", JobState.FAILED), (slurm_jobs.GONE, JobState.STOPPED), (slurm_jobs.UNKNOWN, JobState.QUEUED)])
def test_a_queued_part_takes_its_state_from_slurm(slurm_state, expected):
    queued = {"state": JobState.QUEUED, "running": True, "slurm_job_id": "41"}
    settled = slurm_jobs.settle(queued, {"state": slurm_state})
    assert settled["state"] == expected and settled["slurm"] == {"state": slurm_state}
    if expected in ENDED_STATES:
        assert settled["running"] is False
        assert settled["error"].startswith("Slurm job 41 ") and "before this node's part started" in settled["error"]
    # A part whose supervisor runs keeps its own state; Slurm's is shown next to it.
    assert slurm_jobs.settle({"state": "running"}, {"state": slurm_state})["state"] == "running"


@pytest.fixture
def slurm_client(tmp_path, monkeypatch):
    """Stand-in scontrol and scancel: scontrol prints the file `answer`, both record their arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("scontrol", "scancel"):
        tool = bin_dir / name
        tool.write_text('#!/bin/sh\necho "%s $*" >> "%s/calls"\n%s' % (
            name, tmp_path, 'cat "%s/answer"\n' % tmp_path if name == "scontrol" else
            # What the ranks would find when Slurm's SIGTERM reaches them: whether the stop notice is there.
            'if [ -e "${NOTICE_PROBE:-/nonexistent}" ]; then echo "notice there" >> "%s/calls"; fi\n' % tmp_path))
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))

    def answer(text):
        (tmp_path / "answer").write_text(text)

    def calls():
        path = tmp_path / "calls"
        return path.read_text().splitlines() if path.exists() else []
    answer(PENDING)
    return answer, calls


def prepare(tmp_path, body, node="node9", rank=0, master_port=0, max_restarts=0):
    script = tmp_path / "work.sh"
    script.write_text(body)
    fake = tmp_path / "fake-python"  # stands in for torchrun: runs the script with bash
    fake.write_text('#!/bin/bash\nwhile [ "${1#--max-restarts=}" = "$1" ]; do shift; done; shift\nexec bash "$@"\n')
    fake.chmod(0o755)
    spec = JobSpec(job="train", node_rank=rank, nnodes=1, nproc_per_node=1, world_size=1, master_addr="127.0.0.1",
                   master_port=master_port, python=str(fake), script=str(script), workdir=str(tmp_path), grace_s=1.0,
                   max_restarts=max_restarts, scheduler="slurm", slurm_node=node, slurm_job_id="41")
    path = job_read.job_dir(str(tmp_path / "jobs"), "train")
    return path, jobs.start(path, spec, "run-41-%s" % uuid.uuid4().hex[:8], SOURCE, check_mode=False)


def test_the_launch_prepares_the_folder_and_starts_nothing(tmp_path, slurm_client):
    path, result = prepare(tmp_path, "echo hello\n")
    assert result["state"] == JobState.QUEUED and result["changed"] and result["pid"] is None
    state = json.load(open(os.path.join(path, "state.json")))
    assert (state["state"], state["slurm_job_id"], state["slurm_node"]) == ("queued", "41", "node9")
    assert not os.path.exists(os.path.join(path, "job.log"))  # nothing ran
    assert os.stat(os.path.join(path, slurm_jobs.TASK_FILE)).st_mode & 0o777 == 0o700
    status = job_read.status(path)
    assert (status["state"], status["running"], status["slurm"]["reason"]) == ("queued", True, "Resources")


def test_the_poll_and_job_status_read_a_queued_part_alike(tmp_path, slurm_client):
    answer, _calls = slurm_client
    path, _ = prepare(tmp_path, "echo hello\n")
    for text, state in ((PENDING, "queued"), (PENDING.replace("PENDING", "CANCELLED"), "stopped"),
                        ("slurm_load_jobs error: Invalid job id specified", "stopped")):
        answer(text)
        # The first poll finds the queued Slurm job in state.json and asks again about it, as job_wait does.
        known, light = job_poll.NOTHING, None
        for _ask in range(2):
            command = job_poll.poll_command(str(tmp_path / "jobs"), "train", known)
            out = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, check=True).stdout
            light, known = job_poll.parse(out, known)
            if light is not None:
                break
        assert known == job_poll.Known(None, "41")
        full = job_read.status(path)
        assert light["state"] == full["state"] == state, (text, light, full)
        assert light["slurm"] == full["slurm"]


def run_task(path, node, *args, env=None):
    return subprocess.run(["/bin/sh", os.path.join(path, slurm_jobs.TASK_FILE), *args],
                          env=dict(os.environ, SLURMD_NODENAME=node, SLURM_JOB_ID="41", **(env or {})),
                          capture_output=True, text=True, check=False, timeout=60)


def test_the_task_runs_the_supervisor_in_the_foreground_on_the_ports_slurm_started_it_with(tmp_path, slurm_client):
    path, _ = prepare(tmp_path, 'echo "port $MASTER_PORT run $SLURM_JOB_ID"\n')
    ports = run_task(path, "node9", "ports", "2")
    assert ports.returncode == 0, ports.stderr
    picked = [int(port) for port in ports.stdout.strip().split(",")]
    assert len(set(picked)) == 2
    done = run_task(path, "node9", env={"GPUFLEET_PORTS": ",".join(map(str, picked))})
    # srun's task is the supervisor itself: it returns when the node's part has ended, with its exit code.
    assert done.returncode == 0, open(os.path.join(path, "supervisor.log")).read()
    status = job_read.status(path)
    assert (status["state"], status["master_port"]) == ("succeeded", picked[0])
    assert status["slurm_job_id"] == "41" and status["slurm_node"] == "node9"
    assert "port %d run 41" % picked[0] in open(os.path.join(path, "job.log")).read()


def test_the_task_refuses_a_node_it_was_not_prepared_for(tmp_path, slurm_client):
    path, _ = prepare(tmp_path, "echo hello\n", node="node9", rank=2)
    done = run_task(path, "node7")
    assert done.returncode == 1
    assert "was prepared for Slurm node node9 (node_rank 2), but Slurm ran this task on node7" in done.stderr
    assert job_read.status(path)["state"] == JobState.QUEUED  # nothing ran


def test_a_failing_part_exits_non_zero_so_srun_ends_the_step(tmp_path, slurm_client):
    path, _ = prepare(tmp_path, "exit 3\n")
    done = run_task(path, "node9", env={"GPUFLEET_PORTS": "29611"})
    assert done.returncode == 3
    assert job_read.status(path)["state"] == JobState.FAILED


def test_stopping_a_queued_part_cancels_the_slurm_job_and_records_the_stop(tmp_path, slurm_client):
    answer, calls = slurm_client
    path, _ = prepare(tmp_path, "echo hello\n")
    # Still pending when scancel returns; Slurm then forgets nothing, the stop records it.
    result = jobs.stop(path, "stopped with playbooks/stop.yml", check_mode=False, cancel_scheduler=False)
    assert "scancel 41" in calls()  # queued: cancelled whatever cancel_scheduler says
    assert result["state"] == JobState.STOPPED and result["scancel"] == "cancelled Slurm job 41"
    answer(PENDING.replace("PENDING", "CANCELLED"))
    assert job_read.status(path)["state"] == JobState.STOPPED


def test_a_user_s_stop_of_a_running_part_tells_the_ranks_before_scancel_signals_them(tmp_path, slurm_client,
                                                                                    monkeypatch):
    """scancel has Slurm SIGTERM the step's processes at once: the stop notice (stop_notice.py) must be there
    before it, not only when the supervisor gets its own SIGTERM after."""
    answer, calls = slurm_client
    path, _ = prepare(tmp_path, "echo started\nexec sleep 300\n")
    monkeypatch.setenv("NOTICE_PROBE", os.path.join(path, "stop_notice.json"))
    answer(PENDING.replace("PENDING", "RUNNING"))
    task = subprocess.Popen(["/bin/sh", os.path.join(path, slurm_jobs.TASK_FILE)],  # pylint: disable=consider-using-with
                            env=dict(os.environ, SLURMD_NODENAME="node9", SLURM_JOB_ID="41", GPUFLEET_PORTS="29613"))
    try:
        wait_for(lambda: job_read.status(path)["state"] == "running")
        result = jobs.stop(path, "stopped with playbooks/stop.yml", check_mode=False)
        assert result["state"] == JobState.STOPPED and result["scancel"] == "cancelled Slurm job 41", result
        made = calls()
        assert made[made.index("scancel 41") + 1] == "notice there", made
        task.wait(timeout=30)
    finally:
        if task.poll() is None:
            task.kill()


def test_a_gang_stop_of_a_running_part_leaves_the_slurm_job_to_end_by_itself(tmp_path, slurm_client):
    answer, calls = slurm_client
    path, _ = prepare(tmp_path, "echo started\nexec sleep 300\n")
    answer(PENDING.replace("PENDING", "RUNNING"))
    task = subprocess.Popen(["/bin/sh", os.path.join(path, slurm_jobs.TASK_FILE)],  # pylint: disable=consider-using-with
                            env=dict(os.environ, SLURMD_NODENAME="node9", SLURM_JOB_ID="41", GPUFLEET_PORTS="29612"))
    try:
        wait_for(lambda: job_read.status(path)["state"] == "running")
        result = jobs.stop(path, "stopped by gpufleet: node8 (node_rank 1) failed", check_mode=False,
                           cancel_scheduler=False)
        assert result["state"] == JobState.STOPPED and "scancel" not in result
        assert not [call for call in calls() if call.startswith("scancel")]
        assert task.wait(timeout=30) != 0
    finally:
        if task.poll() is None:
            task.kill()
