"""Launch, status and stop on this machine, with real processes and the real supervisor.

The launch script's torchrun is replaced by a stand-in "python" that runs the
job's script with bash, so these tests check the supervisor's process
handling (sessions, tokens, signals, state files) without torch.
"""

import os
import select
import signal
import subprocess
import time
import uuid

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import job_logs, job_read, jobs
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_processes import (
    RankWatch,
    proc_start_ticks,
    read_json,
    run_processes,
    run_token,
    wait_status_said,
    zombie_wait_status,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import ENDED_STATES, JobState
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import supervisor_bundle
from ansible_collections.gpufleet.cluster.plugins.module_utils._job.job_spec import JobSpec
from waiting import wait_for

SOURCE = supervisor_bundle.shipped_source()  # what the launch ships to the nodes

# Run ids unique to this test session: the supervisors signal processes by run token, and two sessions on one machine
# (a developer's and CI's) must not take each other's processes for their own.
_SESSION = uuid.uuid4().hex[:8]
R1, R2, RA, RB, SAME = ("%s-%s" % (name, _SESSION) for name in ("r1", "r2", "ra", "rb", "same"))


@pytest.fixture
def env(tmp_path):
    fake = tmp_path / "fake-python"
    fake.write_text('#!/bin/bash\nwhile [ "$1" != "--max-restarts=0" ]; do shift; done; shift\nexec bash "$@"\n')
    fake.chmod(0o755)
    yield tmp_path
    # Whatever a failing test left running is stopped; the stop itself is what other tests check.
    root = str(tmp_path / "jobs")
    for name in job_read.list_jobs(root):
        jobs.stop(job_read.job_dir(root, name), "test teardown", check_mode=False)


def make_spec(tmp_path, body, job="j", grace_s=1.0, node_rank=0, launcher="torchrun"):
    script = tmp_path / ("%s-%d.sh" % (job, node_rank))
    script.write_text(body)
    return JobSpec(job=job, node_rank=node_rank, nnodes=2, nproc_per_node=1, world_size=2, master_addr="127.0.0.1",
                   master_port=29500, python=str(tmp_path / "fake-python"), script=str(script), workdir=str(tmp_path),
                   grace_s=grace_s, launcher=launcher)


def launch(tmp_path, body, run_id=None, **kwargs):
    spec = make_spec(tmp_path, body, **kwargs)
    path = job_read.job_dir(str(tmp_path / "jobs"), spec.job + ("" if spec.node_rank == 0 else "-n1"))
    return path, spec, jobs.start(path, spec, run_id or R1, SOURCE, check_mode=False)


def ended(path):
    current = job_read.status(path)
    return current if current["state"] in ENDED_STATES else None


def token_processes(path):
    spec = job_read.read_spec(path)
    return run_processes(run_token(spec))


def test_success_records_state_exit_code_and_log(env):
    path, _spec, result = launch(env, "echo hello from the job\nexit 0\n")
    assert result["changed"] and result["state"] in ("running", "succeeded") and result["pid"]
    final = wait_for(lambda: ended(path))
    assert final["state"] == "succeeded" and final["exit_code"] == 0
    assert open(os.path.join(path, "exit_code")).read() == "0\n"
    assert "hello from the job" in open(final["log_path"]).read()
    assert final["ended_at"] >= final["started_at"]


def test_failure_records_the_exit_code(env):
    path, _spec, _launched = launch(env, "echo about to fail\nexit 3\n")
    final = wait_for(lambda: ended(path))
    assert (final["state"], final["exit_code"], final["last_line"]) == ("failed", 3, "about to fail")


def test_job_files_are_private(env):
    path, _spec, _launched = launch(env, "exit 0\n")
    wait_for(lambda: ended(path))
    for name in ("env", "launch.sh", "job.json", "state.json", "job.log", "supervisor.py", "exit_code"):
        mode = os.stat(os.path.join(path, name)).st_mode
        assert mode & 0o077 == 0, name
    assert os.stat(path).st_mode & 0o077 == 0


def test_stop_ends_every_process_of_the_run_even_escaped_and_term_ignoring_ones(env):
    body = "trap '' TERM\nsetsid sleep 300 &\nsleep 300 &\necho started\nwait\n"
    path, _spec, _launched = launch(env, body)
    wait_for(lambda: len(token_processes(path)) >= 3)
    started = time.monotonic()
    result = jobs.stop(path, "test stop", check_mode=False)
    assert time.monotonic() - started < 10
    assert result["changed"] and result["state"] == "stopped" and result["remaining"] == []
    assert token_processes(path) == []
    final = job_read.status(path)
    assert final["stop_reason"] == "test stop"


def test_processes_left_behind_after_a_normal_end_are_ended(env):
    path, _spec, _launched = launch(env, "setsid sleep 300 &\necho leaving a daemon\nexit 0\n")
    final = wait_for(lambda: ended(path))
    assert final["state"] == "succeeded"
    assert token_processes(path) == []


def test_stop_never_touches_a_process_by_name(env):
    bystander = subprocess.Popen(["sleep", "300"])  # same command line as the job's process
    try:
        path, _spec, _launched = launch(env, "sleep 300\n")
        wait_for(lambda: token_processes(path))
        jobs.stop(path, "test", check_mode=False)
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_two_jobs_side_by_side_stop_one(env):
    path_a, _a, _launched = launch(env, "sleep 300\n", job="a", run_id=RA)
    path_b, _b, _launched = launch(env, "sleep 300\n", job="b", run_id=RB)
    wait_for(lambda: token_processes(path_a) and token_processes(path_b))
    jobs.stop(path_a, "only a", check_mode=False)
    assert token_processes(path_a) == []
    assert job_read.status(path_b)["state"] == "running" and token_processes(path_b)
    jobs.stop(path_b, "cleanup", check_mode=False)


def test_two_nodes_of_one_run_on_one_machine_do_not_end_each_other(env):
    # The local inventory puts two nodes of the same run (same run_id) on one machine.
    path0, _s0, _launched = launch(env, "sleep 300\n", node_rank=0, run_id=SAME)
    path1, _s1, _launched = launch(env, "sleep 0.2\nexit 5\n", node_rank=1, run_id=SAME)
    assert wait_for(lambda: ended(path1))["state"] == "failed"
    time.sleep(0.5)
    assert job_read.status(path0)["state"] == "running" and token_processes(path0)
    jobs.stop(path0, "cleanup", check_mode=False)


def test_killed_supervisor_is_reported_lost_and_its_launcher_dies(env):
    path, _spec, result = launch(env, "sleep 300\n")
    state = wait_for(lambda: read_json(os.path.join(path, "state.json")))
    os.kill(state["supervisor_pid"], signal.SIGKILL)
    assert wait_for(lambda: job_read.status(path)["state"] == "lost")
    # The launcher had the supervisor's death as its parent-death signal.
    wait_for(lambda: not os.path.exists("/proc/%d" % result["pid"]) or proc_start_ticks(result["pid"]) is None)
    assert jobs.stop(path, "cleanup", check_mode=False)["remaining"] == []


def test_same_spec_running_is_unchanged_and_other_spec_is_refused(env):
    path, spec, first = launch(env, "sleep 300\n")
    again = jobs.start(path, spec, R2, SOURCE, check_mode=False)
    assert again["changed"] is False and again["pid"] == first["pid"] and again["run_id"] == R1
    other = JobSpec(**dict(spec.as_dict(), script_args=("--more",), env=()))
    with pytest.raises(jobs.JobError, match=r"already running .*\(script_args differ\)"):
        jobs.start(path, other, "r3", SOURCE, check_mode=False)
    jobs.stop(path, "cleanup", check_mode=False)


def test_check_mode_writes_nothing_and_shows_the_script(env):
    spec = make_spec(env, "exit 0\n")
    path = job_read.job_dir(str(env / "jobs"), "j")
    result = jobs.start(path, spec, R1, SOURCE, check_mode=True)
    assert result["changed"] and result["pid"] is None
    assert not os.path.exists(path)
    assert result["diff"]["before"] == "" and "--node-rank=0" in result["diff"]["after"]


def test_relaunch_after_the_end_keeps_the_earlier_run_s_log_stacks_dumps_and_attempts(env):
    """The ranks write a flight recorder dump where the launch script points torch; the stacks and an earlier
    attempt's files are put where a hang and a restart leave them (attempt_files.py; test_supervisor.py makes them
    for real)."""
    path, spec, _launched = launch(env, 'echo first run; echo dump > "${TORCH_FR_DUMP_TEMP_FILE}0"\n')
    wait_for(lambda: ended(path))
    with open(os.path.join(path, "flight_recorder", "rank_0"), "w") as handle:
        handle.write("run 1's dump")
    with open(os.path.join(path, "stacks.txt"), "w") as handle:
        handle.write("run 1's stacks")
    os.makedirs(os.path.join(path, "attempts", "1"))
    with open(os.path.join(path, "attempts", "1", "stacks.txt"), "w") as handle:
        handle.write("run 1's first attempt's stacks")
    first = job_read.status(path)
    assert first["flight_recorder"]["dumps"] == ["rank_0"] and [a["attempt"] for a in first["earlier_attempts"]] == [1]
    jobs.start(path, spec, R2, SOURCE, check_mode=False)
    wait_for(lambda: ended(path) and job_read.status(path).get("run_id") == R2)
    assert "first run" in open(os.path.join(path, "job.%s.log" % R1)).read()
    assert open(os.path.join(path, "flight_recorder.%s" % R1, "rank_0")).read() == "run 1's dump"
    assert open(os.path.join(path, "stacks.%s.txt" % R1)).read() == "run 1's stacks"
    assert open(os.path.join(path, "attempts.%s" % R1, "1", "stacks.txt")).read() == "run 1's first attempt's stacks"
    second = job_read.status(path)
    assert "earlier_attempts" not in second and not os.path.exists(os.path.join(path, "stacks.txt")), second
    assert open(os.path.join(path, "flight_recorder", "rank_0")).read() == "dump\n"  # the new run's own


def test_stop_of_an_absent_or_ended_job_changes_nothing(env):
    assert jobs.stop(str(env / "nothing"), "x", check_mode=False)["changed"] is False
    path, _spec, _launched = launch(env, "exit 0\n")
    wait_for(lambda: ended(path))
    assert jobs.stop(path, "x", check_mode=False)["changed"] is False


def test_stop_in_check_mode_signals_nothing(env):
    path, _spec, _launched = launch(env, "sleep 300\n")
    wait_for(lambda: token_processes(path))
    assert jobs.stop(path, "x", check_mode=True)["changed"] is True
    assert job_read.status(path)["state"] == "running"
    jobs.stop(path, "cleanup", check_mode=False)


def test_list_jobs(env):
    launch(env, "exit 0\n", job="a", run_id=RA)
    launch(env, "exit 0\n", job="b", run_id=RB)
    assert job_read.list_jobs(str(env / "jobs")) == ["a", "b"]
    assert job_read.list_jobs(str(env / "none")) == []


def test_tail_lines_reads_only_the_end(tmp_path):
    log = tmp_path / "log"
    log.write_text("".join("line %d\n" % i for i in range(100000)))
    assert job_logs.tail_lines(str(log), 3) == ["line 99997", "line 99998", "line 99999"]
    assert job_logs.tail_lines(str(tmp_path / "missing"), 3) == []


def test_root_cause_from_real_torchrun_output():
    fixture = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "torchrun_child_failed.log")
    lines = open(fixture).read().splitlines()
    assert job_logs.torchrun_root_cause(lines) == {"rank": 1, "local_rank": 0, "exit_code": 3}


def test_root_cause_with_a_signal():
    lines = ["Root Cause (first observed failure):", "[0]:", "  time      : x", "  host      : h",
             "  rank      : 6 (local_rank: 2)", "  exitcode  : -9 (pid: 123)"]
    assert job_logs.torchrun_root_cause(lines) == {"rank": 6, "local_rank": 2, "exit_code": -9, "signal": "SIGKILL"}
    assert job_logs.torchrun_root_cause(["nothing here"]) is None


def test_log_tail_of_a_failed_torchrun_job_ends_before_the_agents_own_report():
    fixture = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "torchrun_child_failed.log")
    lines = open(fixture).read().splitlines()
    assert job_logs.without_agent_report(lines) == ["failing now"]
    assert job_logs.without_agent_report(["just", "training"]) == ["just", "training"]


def test_script_content_is_written_privately_and_changed_code_is_a_changed_spec(env):
    code = env / "code"
    spec = JobSpec(job="inline", node_rank=0, nnodes=1, nproc_per_node=1, world_size=1, master_addr="127.0.0.1",
                   master_port=29500, python=str(env / "fake-python"), script="sub/run.sh", workdir=str(code),
                   script_sha256="a")
    path = job_read.job_dir(str(env / "jobs"), "inline")
    jobs.start(path, spec, R1, SOURCE, check_mode=False, script_content="echo inline ran\nsleep 300\n")
    wait_for(lambda: "inline ran" in open(os.path.join(path, "job.log")).read())
    assert (code / "sub" / "run.sh").stat().st_mode & 0o077 == 0
    changed = JobSpec(**dict(spec.as_dict(), script_sha256="b", script_args=(), env=()))
    with pytest.raises(jobs.JobError, match=r"script_sha256 differ"):
        jobs.start(path, changed, R2, SOURCE, check_mode=False, script_content="echo other\n")
    assert "sleep 300" in (code / "sub" / "run.sh").read_text()  # the running job's code was not touched


def test_root_cause_names_the_error_the_worker_recorded(tmp_path):
    fixture = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "torchrun_error_file.log")
    lines = open(fixture).read().splitlines()
    cause = job_logs.torchrun_root_cause(lines)
    assert cause == {"rank": 1, "local_rank": 1, "exit_code": 1, "error": "ValueError: loss is NaN at step 7",
                     "error_file": "/home/ml/.gpufleet/jobs/rec/torchelastic/none_x1/attempt_0/1/error.json"}
    recorded = tmp_path / "error.json"
    recorded.write_text('{"message": {"message": "RuntimeError: CUDA out of memory", "extraInfo": {}}}')
    assert job_logs.error_file_message(str(recorded)) == "RuntimeError: CUDA out of memory"
    assert job_logs.error_file_message(str(tmp_path / "missing.json")) is None


# The shape of torchrun's agent at 16 nodes (docs/scale/): it starts the rank (LOCAL_RANK set, as every launcher
# does), then ignores SIGTERM itself and lingers. The rank saves its work on SIGTERM, taking 1.5 s.
AGENT_AND_RANK = """SAVED=$(dirname "$0")/saved
LOCAL_RANK=0 bash -c 'trap "sleep 1.5; echo saved > $0; exit 0" TERM; echo started; while true; do sleep 0.1; done' \\
  "$SAVED" &
trap '' TERM
wait $!
exec sleep 1000
"""


def stop_timed(env, launcher, grace_s):
    path, _spec, _ = launch(env, AGENT_AND_RANK, grace_s=grace_s, launcher=launcher)
    wait_for(lambda: "started" in open(os.path.join(path, "job.log")).read())
    started = time.monotonic()
    jobs.stop(path, "test", check_mode=False)
    took = time.monotonic() - started
    assert not token_processes(path)
    return path, took


def test_an_agent_launcher_left_alone_after_its_ranks_is_ended_without_waiting_for_the_grace_period(env):
    path, took = stop_timed(env, "torchrun", grace_s=30.0)
    assert (env / "saved").read_text() == "saved\n", "the rank's own grace was cut short"
    assert 1.5 <= took < 10, "stop took %.1f s: the rank needs 1.5 s, the agent gets 0.2 s more, grace_s is 30" % took
    assert "every rank has ended; torchrun was still running 0.2 s later: ended with SIGKILL" in \
        open(os.path.join(path, "job.log")).read()


def test_without_an_agent_launcher_what_is_left_gets_the_whole_grace_period(env):
    # launcher=none: the lingering process is the user's own script, which may still be saving its work.
    _path, took = stop_timed(env, "none", grace_s=4.0)
    assert (env / "saved").read_text() == "saved\n"
    assert took >= 3.9, "the user's script was SIGKILLed %.1f s into a 4 s grace period" % took


def test_stop_ends_a_stopped_process_without_waiting_for_the_grace_period(env):
    path, _spec, _ = launch(env, "sleep 1000 &\nchild=$!\nkill -STOP $child\nwait\n", grace_s=30.0)
    wait_for(lambda: len(token_processes(path)) >= 2)
    started = time.monotonic()
    jobs.stop(path, "test", check_mode=False)
    took = time.monotonic() - started
    assert not token_processes(path)
    assert took < 3, "a SIGSTOPped process waited for a grace period (%.1f s)" % took


MPIRUN_REPORT = """--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[19800,1],4]
  Exit code:    3
--------------------------------------------------------------------------""".splitlines()


def test_mpirun_root_cause_names_the_rank_and_its_node_from_the_manifest():
    manifest = {"nodes": [{"host": "node0", "ranks": [0, 1]}, {"host": "node1", "ranks": [2, 3]},
                          {"host": "node2", "ranks": [4, 5]}]}
    assert job_logs.mpirun_root_cause(MPIRUN_REPORT, manifest) == {"rank": 4, "exit_code": 3, "host": "node2",
                                                               "local_rank": 0}
    assert job_logs.mpirun_root_cause(MPIRUN_REPORT) == {"rank": 4, "exit_code": 3}
    assert job_logs.mpirun_root_cause(["nothing"]) is None


def test_mpirun_root_cause_of_a_rank_killed_by_a_signal():
    lines = ["terminate called without an active exception", "-" * 74,
             "mpirun noticed that process rank 4 with PID 3711 on node 10.213.77.12 exited on signal 6 (Aborted).",
             "-" * 74]
    manifest = {"nodes": [{"host": "node0", "ranks": [0, 1]}, {"host": "node1", "ranks": [2, 3]},
                          {"host": "node2", "ranks": [4, 5]}]}
    assert job_logs.mpirun_root_cause(lines, manifest) == {"rank": 4, "exit_code": 134, "signal": "SIGABRT",
                                                       "host": "node2", "local_rank": 0}


def test_a_gang_without_its_key_is_refused_before_anything_is_written(tmp_path):
    spec = JobSpec(**dict(make_spec(tmp_path, "exit 0\n").as_dict(), script_args=(), env=(),
                          nodes=(("node0", "127.0.0.1"), ("node1", "127.0.0.2"))))
    path = job_read.job_dir(str(tmp_path / "jobs"), spec.job)
    with pytest.raises(jobs.JobError, match="gang_key: is required when nodes are given"):
        jobs.start(path, spec, R1, SOURCE, check_mode=False)
    assert not os.path.exists(path)


def test_how_a_process_ended_is_read_from_its_zombie_until_its_parent_reaps_it():
    """What a rank's supervisor reads of a rank its launcher has not reaped yet (the real kernel's /proc)."""
    running = subprocess.Popen(["sleep", "30"])
    killed = subprocess.Popen(["sleep", "30"])
    failed = subprocess.Popen(["sh", "-c", "exit 3"])
    well = subprocess.Popen(["true"])
    try:
        assert zombie_wait_status(running.pid) is None  # still running
        os.kill(killed.pid, signal.SIGKILL)
        statuses = wait_for(lambda: (lambda found: found if None not in found else None)(
            [zombie_wait_status(proc.pid) for proc in (killed, failed, well)]))
        assert [wait_status_said(status) for status in statuses] == ["SIGKILL", "exit code 3", "exit code 0"]
        assert statuses == [signal.SIGKILL, 3 << 8, 0]
    finally:
        running.kill()
        for proc in (running, killed, failed, well):
            proc.wait()
    assert zombie_wait_status(killed.pid) is None  # reaped


def test_the_launchers_end_wakes_the_supervisors_wait_at_once_and_is_no_rank_s():
    """The attempt's launcher is watched through a pidfd as the ranks are: the select the supervisor's loop waits in
    (gang.receive) returns when it ends, instead of at the loop's next turn; its end is the part's first, told to
    no rank callback."""
    ended = []
    watch = RankWatch("no-token", lambda *args: ended.append(args))
    launcher = subprocess.Popen(["sleep", "0.3"])
    try:
        watch.watch_launcher(launcher.pid)
        (fd, pid), = watch.fds().items()
        assert pid == launcher.pid
        ready, _w, _x = select.select([fd], [], [], 30)
        assert ready == [fd] and launcher.poll() is not None
        watch.exited(pid)
        assert watch.first_exit_at is not None and ended == [] and watch.fds() == {}
    finally:
        launcher.kill()
        launcher.wait()
        watch.close()
