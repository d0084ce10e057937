"""The wait's light poll says what job_status says: its shell command is run here with /bin/sh against real jobs
(the real supervisor, a stand-in torchrun that runs the script with bash, as in test_jobs.py), and its parsed
output is compared with job_read.status() of the same folder, in every state the wait acts on."""

import os
import signal
import subprocess
import sys

import pytest
import uuid

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import job_read, jobs
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import supervisor_bundle
from ansible_collections.gpufleet.cluster.plugins.module_utils._job.job_spec import JobSpec
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import ENDED_STATES, JobState
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import job_poll

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "module_utils"))
from waiting import wait_for  # noqa: E402  pylint: disable=wrong-import-position

SOURCE = supervisor_bundle.shipped_source()
COMPARED = ("state", "run_id", "attempt", "master_port", "ended_at", "exit_code", "running", "last_line",
            "lost_reason", "stop_reason")


@pytest.fixture
def jobs_home(tmp_path):
    """A HOME whose ~/.gpufleet/jobs holds the jobs (the poll expands '~' on the node, with the node's HOME)."""
    fake = tmp_path / "fake-python"
    fake.write_text('#!/bin/bash\nwhile [ "$1" != "--max-restarts=0" ]; do shift; done; shift\nexec bash "$@"\n')
    fake.chmod(0o755)
    home = tmp_path / "home dir's"  # a space and a quote: the command quotes what it is given
    home.mkdir()
    yield tmp_path, home
    root = str(home / ".gpufleet" / "jobs")
    for name in job_read.list_jobs(root):
        jobs.stop(job_read.job_dir(root, name), "test teardown", check_mode=False)


def start(tmp_path, home, job, body):
    script = tmp_path / ("%s.sh" % job)
    script.write_text(body)
    spec = JobSpec(job=job, node_rank=0, nnodes=1, nproc_per_node=1, world_size=1, master_addr="127.0.0.1",
                   master_port=29500, python=str(tmp_path / "fake-python"), script=str(script),
                   workdir=str(tmp_path), grace_s=1.0)
    path = job_read.job_dir(str(home / ".gpufleet" / "jobs"), job)
    jobs.start(path, spec, "run-%s-%s" % (job, uuid.uuid4().hex[:8]), SOURCE, check_mode=False)  # unique: see test_jobs
    return path


def run_poll(home, job, known):
    command = job_poll.poll_command("~/.gpufleet/jobs", job, known)
    assert "python" not in command  # cat, tail and printf only: no interpreter started on the node for a poll
    out = subprocess.run(["/bin/sh", "-c", command], env=dict(os.environ, HOME=str(home)), capture_output=True,
                         text=True, check=True).stdout
    answer = job_poll.parse(out, known)
    assert answer[1] is not None, out
    # Through a terminal (ssh -tt, as Ansible runs a command under become) every line ends with CR LF.
    assert job_poll.parse(out.replace("\n", "\r\n"), known) == answer
    return answer


def light(home, job, polls=None):
    """As job_wait polls: with what the last poll found, asked again at once where that did not do."""
    known = job_poll.NOTHING
    for _ask in range(2):
        found, known = run_poll(home, job, known)
        if polls is not None:
            polls.append(known)
        if found is not None:
            return found
    raise AssertionError("asked again, still not to be judged: %r" % (known,))


def assert_same(home, path, job):
    full = job_read.status(path)
    found = light(home, job)
    assert {key: found.get(key) for key in COMPARED} == {key: full.get(key) for key in COMPARED}
    return found


def test_a_job_that_is_not_there_is_absent(jobs_home):
    _tmp, home = jobs_home
    assert light(home, "nothing")["state"] == JobState.ABSENT


def test_running_then_succeeded_read_the_same_as_job_status(jobs_home):
    tmp, home = jobs_home
    path = start(tmp, home, "ok", "echo first\nsleep 1.5\necho 'the last line'\nexit 0\n")
    wait_for(lambda: job_read.status(path)["state"] == "running" and job_read.status(path)["last_line"] == "first")
    assert assert_same(home, path, "ok")["running"] is True
    wait_for(lambda: job_read.status(path)["state"] in ENDED_STATES)
    found = assert_same(home, path, "ok")
    assert (found["state"], found["last_line"], found["exit_code"]) == ("succeeded", "the last line", 0)


def test_a_failure_reads_the_same_as_job_status(jobs_home):
    tmp, home = jobs_home
    path = start(tmp, home, "bad", "echo about to fail\nexit 3\n")
    wait_for(lambda: job_read.status(path)["state"] in ENDED_STATES)
    assert assert_same(home, path, "bad")["state"] == "failed"


def test_a_supervisor_gone_without_an_end_is_lost_in_both(jobs_home):
    tmp, home = jobs_home
    path = start(tmp, home, "lost", "echo started\nexec sleep 300\n")
    pid = wait_for(lambda: job_read.status(path).get("supervisor_pid"))
    wait_for(lambda: job_read.status(path)["state"] == "running")
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: job_read.status(path)["state"] == JobState.LOST)
    found = assert_same(home, path, "lost")
    assert "is gone without recording an end" in found["lost_reason"]


def test_the_last_line_of_a_long_log_is_read_from_its_end(jobs_home):
    tmp, home = jobs_home
    body = "for i in $(seq 1 3000); do echo \"step $i of a long log\"; done\necho 'done: loss 0.01'\nexit 0\n"
    path = start(tmp, home, "long", body)
    wait_for(lambda: job_read.status(path)["state"] in ENDED_STATES)
    assert os.path.getsize(os.path.join(path, "job.log")) > job_poll.LOG_BYTES
    assert assert_same(home, path, "long")["last_line"] == "done: loss 0.01"


def test_no_section_is_no_job_folder_and_a_cut_short_answer_is_refused():
    # The command prints nothing when it cannot enter the job's folder, whatever a login script printed first.
    assert job_poll.parse("Welcome to node1\n")[0]["state"] == JobState.ABSENT
    assert job_poll.parse("Welcome to node1\n", job_poll.Known(4242, "41"))[0]["state"] == JobState.ABSENT
    assert job_poll.parse(job_poll.MARK + "spec\n{}" + job_poll.MARK + "state\n") == (None, None)


def test_the_first_poll_asks_again_with_the_supervisor_pid_state_json_names_then_the_next_polls_ask_once(jobs_home):
    tmp, home = jobs_home
    path = start(tmp, home, "pid", "echo started\nexec sleep 300\n")
    pid = wait_for(lambda: job_read.status(path).get("supervisor_pid"))
    wait_for(lambda: job_read.status(path)["state"] == "running")
    asked = []
    assert light(home, "pid", asked)["state"] == "running"
    assert asked == [job_poll.Known(pid), job_poll.Known(pid)]  # the first answer could not say whether it lives
    found, known = run_poll(home, "pid", job_poll.Known(pid))
    assert found["state"] == "running" and known == job_poll.Known(pid)
    assert "cat /proc/%d/stat" % pid in job_poll.poll_command("~/.gpufleet/jobs", "pid", known)


def test_a_stat_line_of_another_pid_than_state_json_names_is_not_judged():
    state = '{\n  "state": "running",\n  "supervisor_pid": 222,\n  "supervisor_start_ticks": 5\n}'
    out = "".join(job_poll.MARK + name + "\n" + body for name, body in (
        ("spec", "{}"), ("state", state), ("stat 111", "111 (python3) S 1 " + "0 " * 17 + "5 0"), ("log", "")))
    assert job_poll.parse(out, job_poll.Known(111)) == (None, job_poll.Known(222))
    # Asked for no PID, the answer names one: asked again; asked for one, an answer without its stat is not the command's.
    assert job_poll.parse(out.replace("stat 111", "stat"), job_poll.NOTHING) == (None, job_poll.Known(222))
    assert job_poll.parse(out.replace("stat 111", "stat"), job_poll.Known(111)) == (None, None)


@pytest.mark.parametrize("pid, slurm_job, kept", [
    (4242, "731_4", (4242, "731_4")),
    ("4242; touch /tmp/x", "1 && reboot", (None, None)),  # never reaches the shell
    (True, "41", (None, "41")), (-3, "", (None, None)), (0, None, (None, None)),
])
def test_only_a_pid_and_a_slurm_job_ids_digits_reach_the_shell(pid, slurm_job, kept):
    known = job_poll.Known(pid, slurm_job)
    assert (known.pid, known.slurm_job) == kept
    command = job_poll.poll_command("~/.gpufleet/jobs", "j", known)
    assert "touch" not in command and "reboot" not in command


@pytest.mark.parametrize("state, known", [
    ('{"state":"running","supervisor_pid":4242}', job_poll.Known(4242)),  # compact JSON: read as JSON all the same
    ('{\n  "state": "queued",\n  "slurm_job_id": "731_4"\n}', job_poll.Known(None, "731_4")),
    ('{\n  "state": "running",\n  "slurm_job_id": "731_4"\n}', job_poll.NOTHING),  # started: Slurm not asked
    ('{"supervisor_pid": "4242; touch /tmp/x", "slurm_job_id": "1 && reboot", "state": "queued"}', job_poll.NOTHING),
    ('not json', job_poll.NOTHING),
])
def test_what_the_next_poll_asks_about_is_read_from_state_json_as_json(state, known):
    assert job_poll.Known.of(job_poll._json(state)) == known  # pylint: disable=protected-access
