"""The gang: supervisors of one job on two "nodes" (127.0.0.1 and 127.0.0.2) watching each other over UDP.

Real supervisors and real processes, as in test_jobs.py; torchrun is replaced
by a stand-in that runs the job's script with bash. What this checks: the
heartbeat protocol, fail-fast without any controller, lost nodes, the hang
watchdog and gang restarts. Across real machines the same code runs in
tests/cluster/test_supervision.py.
"""

import json
import os
import re
import shlex
import signal
import socket
import sys
import time
import types
import uuid

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import job_read, jobs
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gang import LoneNode, sign, verify
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gang_rules import gang_failure
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_processes import (
    run_processes,
    run_token,
    supervisor_alive,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_events import Events
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import ENDED_STATES, HeartbeatPhase, JobState
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.attempt import FirstFailure
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.supervisor import Supervisor
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._postmortem.report import failure_message
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import supervisor_bundle
from ansible_collections.gpufleet.cluster.plugins.module_utils._job.job_spec import JobSpec
from waiting import wait_for

SOURCE = supervisor_bundle.shipped_source()  # what the launch ships to the nodes
KEY = "0123456789abcdef0123456789abcdef"
NODES = (("n0", "127.0.0.1"), ("n1", "127.0.0.2"))
# The run id, unique to this test session: the supervisors signal processes by run token, and two sessions on one
# machine (a developer's and CI's) must not take each other's processes for their own.
RUN = "run-%s" % uuid.uuid4().hex[:8]


def free_udp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Gang2:
    """One job on two local nodes; each node has its own jobs folder, as on two machines."""

    def __init__(self, tmp_path, bodies, rank_args=({}, {}), **spec_args):
        self.tmp = tmp_path
        fake = tmp_path / "fake-python"
        # Like torchrun with --tee=3 (launchers.torchrun_options), each line of the rank's reaches the log tagged
        # (log_silence.py counts a tagged line as the attempt's first output): the rank is still this process, and
        # the tagger, like torchrun's tee from the ranks' files, outlives a stop's SIGTERM to read their last lines.
        fake.write_text('#!/bin/bash\nwhile [ "$1" != "--max-restarts=0" ]; do shift; done; shift\n'
                        'exec > >(trap "" TERM; exec sed -u "s/^/[rank${NODE_RANK}|0]: /") 2>&1\nexec bash "$@"\n')
        fake.chmod(0o755)
        port = free_udp_port()
        self.paths = []
        for rank, body in enumerate(bodies):
            script = tmp_path / ("rank%d.sh" % rank)
            script.write_text(body)
            workdir = tmp_path / ("work%d" % rank)
            workdir.mkdir()
            args = dict(job="g", node_rank=rank, nnodes=2, nproc_per_node=1, world_size=2,
                        master_addr="127.0.0.1", master_port=port, python=str(fake), script=str(script),
                        workdir=str(workdir), grace_s=1.0, nodes=NODES, heartbeat_s=0.2, heartbeat_misses=5,
                        join_timeout_s=10.0)
            args.update(spec_args, **rank_args[rank])
            spec = JobSpec(**args)
            path = job_read.job_dir(str(tmp_path / ("node%d" % rank)), "g")
            jobs.start(path, spec, RUN, SOURCE, check_mode=False, gang_key=KEY)
            self.paths.append(path)

    def status(self, rank):
        return job_read.status(self.paths[rank], tail=50)

    def ended(self):
        found = [self.status(rank) for rank in (0, 1)]
        return found if all(s["state"] in ENDED_STATES for s in found) else None

    def processes(self):
        return [pid for path in self.paths for pid in run_processes(run_token(job_read.read_spec(path)))]

    def stop_all(self):
        for path in self.paths:
            jobs.stop(path, "test teardown", check_mode=False)


@pytest.fixture
def gang(tmp_path):
    made = []

    def make(bodies, rank_args=({}, {}), **spec_args):
        made.append(Gang2(tmp_path, bodies, rank_args, **spec_args))
        return made[-1]

    yield make
    for one in made:
        one.stop_all()


FOREVER = "echo started; while true; do sleep 0.1; echo tick; done\n"
QUIET_FOREVER = "echo started; exec sleep 1000\n"


def test_a_datagram_is_accepted_only_with_the_runs_key():
    message = {"run": "r", "rank": 1, "outcome": "failed"}
    datagram = sign(b"k1", message)
    assert verify(b"k1", datagram) == message
    assert verify(b"k2", datagram) is None
    assert verify(b"k1", datagram.replace(b"failed", b"passed")) is None
    assert verify(b"k1", b"garbage") is None


def test_a_failing_node_stops_the_other_without_any_controller(gang):
    g = gang([FOREVER, "echo started; sleep 1; echo failing; exit 3\n"])
    failed_at = wait_for(lambda: g.status(1)["state"] == "failed" and time.monotonic())
    ended = wait_for(g.ended)
    stopped_after = time.monotonic() - failed_at
    print("node0 stopped %.1f s after node1 failed" % stopped_after)
    assert ended[1]["exit_code"] == 3
    assert ended[1]["first_exit_at"] is not None and ended[1]["first_exit_at"] <= ended[1]["ended_at"]
    assert ended[0]["state"] == "stopped"
    assert ended[0]["stopped_for"] == "n1"
    assert "n1 (node_rank 1) failed with exit code 3" in ended[0]["stop_reason"]
    assert stopped_after < 5
    assert wait_for(lambda: not g.processes() or None, timeout=5) is None or not g.processes()
    # Each node's events for the job's timeline, stamped with its clock; node0 measured node1's clock from the
    # heartbeats (one machine here: the same clock, so only the trip, well under a second).
    events = [what for _at, what in ended[0]["events"]]
    assert events[1].startswith("attempt 1 of 1, master port") and "rank 0 (local rank 0, pid" not in " ".join(events)
    assert events[-1] == "this node's part ended: n0 (node_rank 0) was stopped (%s)" % ended[0]["stop_reason"]
    assert [what for _at, what in ended[1]["events"]][-1] == "this node's part ended: n1 (node_rank 1) failed with exit code 3"
    assert 0 <= ended[0]["clock_offsets"]["n1"] < 0.5 and 0 <= ended[1]["clock_offsets"]["n0"] < 0.5
    assert [at for at, _what in ended[0]["events"]] == sorted(at for at, _what in ended[0]["events"])


def test_a_node_whose_supervisor_is_killed_is_lost_and_the_other_stops(gang):
    g = gang([FOREVER, FOREVER])
    wait_for(lambda: all(g.status(r)["state"] == "running" for r in (0, 1)))
    time.sleep(0.5)
    killed_at = time.monotonic()
    os.kill(g.status(1)["supervisor_pid"], signal.SIGKILL)
    ended = wait_for(g.ended)
    took = time.monotonic() - killed_at
    print("node0 stopped %.1f s after node1's supervisor was killed" % took)
    assert ended[1]["state"] == "lost"
    assert ended[0]["state"] == "stopped"
    assert "n1 (node_rank 1) lost: no heartbeat" in ended[0]["stop_reason"]
    assert ended[0]["peers_lost"]["n1"] < time.time() - 1.0  # when n1 was last heard, before it was counted lost
    assert took < 1.0 + 1.0 + 3  # heartbeats missed + grace + slack
    wait_for(lambda: not g.processes())


def test_a_node_that_never_joins_stops_the_other_after_the_join_timeout(tmp_path):
    fake = tmp_path / "fake-python"
    fake.write_text('#!/bin/bash\nwhile [ "$1" != "--max-restarts=0" ]; do shift; done; shift\nexec bash "$@"\n')
    fake.chmod(0o755)
    script = tmp_path / "rank0.sh"
    script.write_text(FOREVER)
    spec = JobSpec(job="g", node_rank=0, nnodes=2, nproc_per_node=1, world_size=2, master_addr="127.0.0.1",
                   master_port=free_udp_port(), python=str(fake), script=str(script), workdir=str(tmp_path),
                   grace_s=1.0, nodes=NODES, heartbeat_s=0.2, join_timeout_s=1.5)
    path = job_read.job_dir(str(tmp_path / "node0"), "g")
    jobs.start(path, spec, RUN, SOURCE, check_mode=False, gang_key=KEY)
    final = wait_for(lambda: job_read.status(path)["state"] in ENDED_STATES and job_read.status(path), timeout=15)
    assert final["state"] == "stopped"
    # Who was never heard, on which UDP port, how long this node waited, and what to check.
    found = re.search(r"no heartbeat from n1 \(node_rank 1\) arrived at this node's UDP port (\d+) in the ([\d.]+) s "
                      r"it waited \(join_timeout_s=1.5\): the UDP port must be open between every pair of nodes",
                      final["stop_reason"])
    assert found, final["stop_reason"]
    assert int(found.group(1)) == spec.master_port
    assert 1.5 <= float(found.group(2)) < 5


def test_forged_heartbeats_are_ignored(gang):
    g = gang([FOREVER, FOREVER])
    wait_for(lambda: all(g.status(r)["state"] == "running" for r in (0, 1)))
    spec = job_read.read_spec(g.paths[0])
    forged = sign(b"not-the-key", {"run": RUN, "rank": 1, "attempt": 1, "phase": "ended",
                                       "outcome": "failed", "exit_code": 1})
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _ in range(5):
            sock.sendto(forged, ("127.0.0.1", spec["master_port"]))
            time.sleep(0.1)
    time.sleep(1.0)
    assert [g.status(r)["state"] for r in (0, 1)] == ["running", "running"]


def test_silence_on_every_node_is_reported_as_hung(gang):
    g = gang([QUIET_FOREVER, QUIET_FOREVER], hang_timeout_s=2)
    started = time.monotonic()
    ended = wait_for(g.ended)
    took = time.monotonic() - started
    print("hung after %.1f s with hang_timeout=2" % took)
    assert [s["state"] for s in ended] == ["hung", "hung"]
    assert "hung: no node wrote to its log" in ended[0]["stop_reason"]
    assert 2 <= took < 2 + 5
    wait_for(lambda: not g.processes())


def stuck_in(function):
    """A rank's body: a Python that says it started, then sleeps in `function` (line 3 of its program)."""
    program = "import time\ndef %s():\n    time.sleep(1000)\nprint('started', flush=True)\n%s()\n" % (function, function)
    return 'RANK=$NODE_RANK LOCAL_RANK=0 exec %s -c "%s"\n' % (sys.executable, program)


def test_a_hung_job_s_ranks_stacks_are_taken_on_every_node_before_they_stop(gang):
    """The real py-spy (on PATH: the venv's) reads each node's rank when the hang watchdog fires; state.json keeps
    the frames, stacks.txt has them for people, and the processes are stopped after."""
    g = gang([stuck_in("waiting_in_collective"), stuck_in("loading_data")], hang_timeout_s=2)
    ended = wait_for(g.ended, timeout=30)
    assert [s["state"] for s in ended] == ["hung", "hung"], ended
    for rank, function in enumerate(("waiting_in_collective", "loading_data")):
        stacks = ended[rank]["stacks"]
        assert stacks["error"] is None and [r["rank"] for r in stacks["ranks"]] == [rank], stacks
        assert stacks["ranks"][0]["frames"][0][:1] + stacks["ranks"][0]["frames"][0][2:] == [function, 3], stacks
        assert "    %s (<string>:3)" % function in open(os.path.join(g.paths[rank], "stacks.txt")).read()
        assert "stacks of ranks %d written to stacks.txt" % rank in open(ended[rank]["log_path"]).read()
        # The timeline's events: the hang, the stacks, then the rank's end, in that order.
        events = [what for _at, what in ended[rank]["events"]]
        hung = next(i for i, what in enumerate(events) if what.startswith("hung: no node wrote"))
        assert events[hung + 1].startswith("stacks of ranks %d written" % rank), events
        assert any(what.startswith("rank %d (local rank 0, pid " % rank) and ") ended" in what
                   for what in events[hung + 2:]), events
    wait_for(lambda: not g.processes())


def test_a_stop_that_asks_for_stacks_takes_them_on_every_node_though_asked_on_one(gang):
    """stop.yml -e dump_stacks=true on one node (as when its stop comes first): that node reads its rank, tells the
    other in its heartbeat, which reads its own before its rank is stopped; a stop without stacks takes none (the
    teardowns of the other tests)."""
    g = gang([stuck_in("waiting_in_collective"), stuck_in("loading_data")])
    wait_for(lambda: all("started" in open(g.status(r)["log_path"]).read() for r in (0, 1)), timeout=30)
    stopped = jobs.stop(g.paths[0], "where is it stuck?", check_mode=False, stacks=True)
    assert stopped["state"] == "stopped", stopped
    ended = wait_for(g.ended, timeout=30)
    assert [s["state"] for s in ended] == ["stopped", "stopped"], ended
    assert ended[0]["stop_reason"] == "where is it stuck?" and ended[1]["stopped_for"] == "n0"
    for rank, function in enumerate(("waiting_in_collective", "loading_data")):
        assert ended[rank]["stacks"]["ranks"], (rank, ended[rank]["stacks"], ended[rank]["events"])
        frames = ended[rank]["stacks"]["ranks"][0]["frames"]
        assert frames[0][:1] + frames[0][2:] == [function, 3], ended[rank]["stacks"]
        assert "    %s (<string>:3)" % function in open(os.path.join(g.paths[rank], "stacks.txt")).read()
    wait_for(lambda: not g.processes())


def test_output_on_one_node_keeps_the_job_from_counting_as_hung(gang):
    g = gang([QUIET_FOREVER, FOREVER], hang_timeout_s=1)
    time.sleep(3)
    assert [g.status(r)["state"] for r in (0, 1)] == ["running", "running"]


SILENT_START = "sleep 3; echo started; while true; do sleep 0.1; echo tick; done\n"
SILENT_FOREVER = "exec sleep 1000\n"


def test_a_silent_start_within_the_startup_allowance_is_not_hung(gang):
    g = gang([SILENT_START, SILENT_START], hang_timeout_s=1, hang_startup_s=10)
    time.sleep(4.5)
    assert [g.status(r)["state"] for r in (0, 1)] == ["running", "running"]


def test_a_start_silent_past_the_startup_allowance_is_hung(gang):
    g = gang([SILENT_FOREVER, SILENT_FOREVER], hang_timeout_s=1, hang_startup_s=1)
    started = time.monotonic()
    ended = wait_for(g.ended)
    took = time.monotonic() - started
    assert [s["state"] for s in ended] == ["hung", "hung"]
    assert 2 <= took < 2 + 5, took


def test_a_failed_part_with_no_restart_left_does_not_wait_for_a_silent_peer(gang):
    # n1 would be counted lost only after 30 missed heartbeats: n0's failed part must not wait for that.
    g = gang([FOREVER, "echo started; sleep 2; exit 3\n"], heartbeat_s=1.0, heartbeat_misses=30)
    wait_for(lambda: all(g.status(r)["state"] == "running" for r in (0, 1)))
    os.kill(g.status(0)["supervisor_pid"], signal.SIGKILL)
    final = wait_for(lambda: g.status(1)["state"] in ENDED_STATES and g.status(1), timeout=10)
    assert final["state"] == "failed" and final["exit_code"] == 3
    wait_for(lambda: not supervisor_alive(g.status(1)), timeout=5)  # and its supervisor has exited


RESTARTABLE = (
    'echo "attempt $GPUFLEET_ATTEMPT port $GPUFLEET_MASTER_PORT"\n'
    'if [ "$GPUFLEET_ATTEMPT" = 1 ] && [ "$NODE_RANK" = 1 ]; then sleep 0.5; exit 7; fi\n'
    'if [ "$GPUFLEET_ATTEMPT" = 1 ]; then exec sleep 1000; fi\n'
    "sleep 0.5; echo done\n"
)


def test_max_restarts_launches_the_whole_gang_again_on_the_next_port(gang):
    g = gang([RESTARTABLE, RESTARTABLE], max_restarts=1, restart_ports=(free_udp_port(),))
    ended = wait_for(g.ended, timeout=30)
    second_port = job_read.read_spec(g.paths[0])["restart_ports"][0]
    for rank, state in enumerate(ended):
        assert state["state"] == "succeeded", state
        assert [a["attempt"] for a in state["attempts"]] == [1, 2]
        assert state["master_port"] == second_port
        log = open(state["log_path"]).read()
        assert "attempt 2 port %d" % second_port in log
    assert ended[1]["attempts"][0]["outcome"] == "failed" and ended[1]["attempts"][0]["exit_code"] == 7
    assert ended[0]["attempts"][0]["outcome"] == "stopped"


def test_restarts_run_out_and_the_job_fails(gang):
    always = 'echo "attempt $GPUFLEET_ATTEMPT"; if [ "$NODE_RANK" = 1 ]; then sleep 0.5; exit 7; fi; exec sleep 1000\n'
    g = gang([always, always], max_restarts=1, restart_ports=(free_udp_port(),))
    ended = wait_for(g.ended, timeout=30)
    assert ended[1]["state"] == "failed" and len(ended[1]["attempts"]) == 2
    assert ended[0]["state"] == "stopped" and len(ended[0]["attempts"]) == 2


def test_a_hang_restarts_the_gang_and_the_same_hang_again_at_once_stops_the_restarts(gang):
    """max_restarts=2: the first hang relaunches both nodes, the ranks told why (GPUFLEET_RESTART_REASON); the
    second comes within min_progress_s of the restart, so the second restart is not used."""
    body = 'echo "attempt $GPUFLEET_ATTEMPT after: $GPUFLEET_RESTART_REASON"; exec sleep 1000\n'
    g = gang([body, body], max_restarts=2, restart_ports=(free_udp_port(), free_udp_port()), hang_timeout_s=2)
    ended = wait_for(g.ended, timeout=40)
    reason = ended[0]["restarts"][0]
    assert reason.startswith("hung: no node wrote to its log for ") and ended[1]["restarts"] == [reason], ended
    for state in ended:
        assert state["state"] == "hung" and [a["attempt"] for a in state["attempts"]] == [1, 2], state
        assert state["no_restart"].startswith("not restarting: the same failure twice within 300 s of a restart "
                                              "(min_progress_s): hung: no node wrote to its log for "), state
        log = open(state["log_path"]).read()
        assert "attempt 1 after: \n" in log and "attempt 2 after: %s\n" % reason in log, log
        assert "[gpufleet] restarting after: %s" % reason in log
    wait_for(lambda: not g.processes())


def test_a_job_restarted_twice_after_hangs_keeps_three_sets_of_stacks_and_dumps(gang):
    """Each attempt's rank writes a flight recorder dump where the launch script points torch (as torch does when a
    collective times out), then hangs; the real py-spy takes the stacks each time. min_progress_s=0: the same hang
    again is restarted. Attempts 1 and 2 are kept in attempts/<N>/, attempt 3's in place (attempt_files.py)."""
    program = ("import os, time\ndef %s():\n    time.sleep(1000)\nopen(os.environ['TORCH_FR_DUMP_TEMP_FILE'] + "
               "os.environ['NODE_RANK'], 'w').write('attempt ' + os.environ['GPUFLEET_ATTEMPT'])\n"
               "print('started', flush=True)\n%s()\n")
    bodies = ['RANK=$NODE_RANK LOCAL_RANK=0 exec %s -c "%s"\n' % (sys.executable, program % (name, name))
              for name in ("waiting_in_collective", "loading_data")]
    g = gang(bodies, max_restarts=2, min_progress_s=0, restart_ports=(free_udp_port(), free_udp_port()),
             hang_timeout_s=2)
    ended = wait_for(g.ended, timeout=90)
    for rank, function in enumerate(("waiting_in_collective", "loading_data")):
        state, path = ended[rank], g.paths[rank]
        assert state["state"] == "hung" and [a["attempt"] for a in state["attempts"]] == [1, 2, 3], state
        dump = os.path.join("flight_recorder", "rank_%d" % rank)
        for attempt, folder in ((1, os.path.join(path, "attempts", "1")), (2, os.path.join(path, "attempts", "2")),
                                (3, path)):
            assert "    %s (<string>:3)" % function in open(os.path.join(folder, "stacks.txt")).read(), attempt
            assert open(os.path.join(folder, dump)).read() == "attempt %d" % attempt
        assert state["earlier_attempts"] == [{"attempt": attempt, "dir": os.path.join(path, "attempts", str(attempt)),
                                              "files": ["stacks.txt", dump]} for attempt in (1, 2)], state
        # state.json: each attempt's stacks with that attempt, the file named where it is kept.
        assert [a["stacks"]["file"] for a in state["attempts"][:2]] == ["attempts/1/stacks.txt", "attempts/2/stacks.txt"]
        assert state["stacks"]["file"] == "stacks.txt" and "stacks" not in state["attempts"][2], state
        log = open(state["log_path"]).read()
        for attempt in (1, 2):
            assert "attempt %d's stacks.txt and 1 flight recorder dump kept in attempts/%d/" % (attempt, attempt) in log
    wait_for(lambda: not g.processes())


def test_a_gpu_fault_fails_the_job_without_using_its_restarts(gang, gpus_on_path, tmp_path):
    """A hardware XID in node 1's kernel log ends the attempt on both nodes, and neither launches again although a
    restart remains: it would meet the same GPU (node 0's kernel log stays quiet)."""
    del gpus_on_path
    logs = [tmp_path / "kmsg0", tmp_path / "kmsg1"]
    for log in logs:
        log.write_text("")
    g = gang([FOREVER, FOREVER], [{"health_kernel_log": str(log)} for log in logs], max_restarts=1,
             restart_ports=(free_udp_port(),), health_sample_s=0)
    wait_for(lambda: all(g.status(r)["state"] == "running" for r in (0, 1)))
    with open(logs[1], "a") as handle:
        handle.write("4,9,9000,-;NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=python, GPU has fallen off the bus.\n")
    ended = wait_for(g.ended, timeout=30)
    fault = "n1 GPU at 0000:18:00.0: XID 79, GPU has fallen off the bus"  # not sampled: named by its bus id
    assert ended[1]["state"] == "failed" and ended[1]["stop_reason"] == fault, ended[1]
    assert ended[0]["state"] == "stopped" and fault in ended[0]["stop_reason"], ended[0]
    for rank, state in enumerate(ended):
        assert len(state["attempts"]) == 1, state["attempts"]
        assert state["no_restart"] == ("not restarting: %s is a hardware fault, which a restart on the same nodes "
                                       "would meet again" % fault), (rank, state)
        assert state["no_restart"] in open(state["log_path"]).read()


def test_a_user_stop_on_one_node_ends_the_job_everywhere_without_a_restart(gang):
    g = gang([FOREVER, FOREVER], max_restarts=2, restart_ports=(free_udp_port(), free_udp_port()))
    wait_for(lambda: all(g.status(r)["state"] == "running" for r in (0, 1)))
    jobs.stop(g.paths[0], "stopped by the user", check_mode=False)
    ended = wait_for(g.ended)
    assert ended[0]["state"] == "stopped" and len(ended[0]["attempts"]) == 1
    assert ended[1]["state"] == "stopped" and "stopped by the user" in ended[1]["stop_reason"]


# Each rank writes down, when its SIGTERM comes, whether the stop notice was there first and what it said.
HEARS_THE_STOP = (
    'heard="${GPUFLEET_STOP_FILE%/*}/heard.$GPUFLEET_ATTEMPT"\n'
    'echo "attempt $GPUFLEET_ATTEMPT grace $GPUFLEET_STOP_GRACE_S notice at start: $(ls "$GPUFLEET_STOP_FILE" 2>&1)"\n'
    'trap \'if [ -e "$GPUFLEET_STOP_FILE" ]; then cat "$GPUFLEET_STOP_FILE" > "$heard"; else echo none > "$heard"; fi;'
    ' exit 0\' TERM\n'
    'if [ "$GPUFLEET_ATTEMPT" = 1 ] && [ "$NODE_RANK" = 1 ]; then sleep 0.5; exit 7; fi\n'
    'while true; do sleep 0.1; done\n'
)


def test_a_rank_hears_why_and_how_long_before_its_sigterm_at_a_peer_s_failure_and_a_user_s_stop(gang):
    """The stop notice (stop_notice.py): written before SIGTERM, with the reason, attempt and grace, and gone when
    the next attempt starts."""
    g = gang([HEARS_THE_STOP, HEARS_THE_STOP], max_restarts=1, restart_ports=(free_udp_port(),), grace_s=2.0)
    heard = [os.path.join(g.paths[0], "heard.%d" % attempt) for attempt in (1, 2)]
    wait_for(lambda: os.path.exists(heard[0]) and g.status(0)["attempt"] == 2, timeout=30)
    first = json.loads(open(heard[0]).read())
    assert first["attempt"] == 1 and first["grace_s"] == 2.0 and first["deadline"] == pytest.approx(
        first["written_at"] + 2.0)
    assert "n1" in first["reason"] and "exit" in first["reason"], first  # the peer whose failure stopped it
    wait_for(lambda: all("attempt 2 grace" in "\n".join(g.status(r)["log_tail"]) for r in (0, 1)), timeout=30)
    jobs.stop(g.paths[0], "stopped by the user", check_mode=False)
    ended = wait_for(g.ended)
    assert [state["state"] for state in ended] == ["stopped", "stopped"]
    for rank in (0, 1):
        log = open(ended[rank]["log_path"]).read()
        assert "attempt 2 grace 2 notice at start: ls: cannot access" in log  # the first stop's notice is gone
        assert "the ranks are told to save: %s" % os.path.join(g.paths[rank], "stop_notice.json") in log
        second = json.loads(open(os.path.join(g.paths[rank], "heard.2")).read())
        assert second["attempt"] == 2 and "stopped by the user" in second["reason"]


def test_launch_without_a_gang_key_is_refused_before_writing_anything(tmp_path):
    spec = JobSpec(job="g", node_rank=0, nnodes=2, nproc_per_node=1, world_size=2, master_addr="127.0.0.1",
                   master_port=29500, python="python3", script="x.py", workdir=str(tmp_path), nodes=NODES)
    path = job_read.job_dir(str(tmp_path / "node0"), "g")
    with pytest.raises(jobs.JobError, match="gang_key"):
        jobs.start(path, spec, RUN, SOURCE, check_mode=False)
    assert not os.path.exists(path)


def test_a_lone_node_is_a_gang_with_no_peers():
    """The supervisor's loop is the same with one node: the lone node's gang hears no one and loses no one, and
    still reports the run's processes that ended (their pidfds ready) within the wait."""
    lone = LoneNode()
    read_end, write_end = os.pipe()
    os.close(write_end)  # readable at once, as a pidfd is when its process ends
    seen = []
    started = time.monotonic()
    lone.receive(5.0, extra={read_end: 4242}, on_extra=seen.append)
    os.close(read_end)
    assert seen == [4242] and time.monotonic() - started < 5.0
    assert lone.peers() == [] and lone.lost() == [] and gang_failure(lone, 1) is None


# A stand-in launcher: the rank (LOCAL_RANK, as every launcher gives its ranks) runs under a launcher process without
# it, as under torchrun's agent. The launcher outlives its rank's end for a while, as torchrun does while it ends the
# node's other ranks.
# Its rank ends with 0: a rank's failure that its supervisor reads is told to the other nodes at once (see
# test_a_rank_that_fails_is_told_to_the_other_nodes_before_its_launcher_ends); this is the end the supervisor could
# not read as a failure (the launcher reaped it first), and the launcher fails the part.
RANK_DIES_FIRST = ("echo started; LOCAL_RANK=0 bash -c 'sleep 2; echo rank 0 fails; exit 0'\n"
                   "echo launcher ending the other ranks; sleep 10; exit 1\n")
RANK_FAILS_LATER = "echo started; sleep 3.5; LOCAL_RANK=0 bash -c 'echo rank 1 fails in a collective; exit 3'; exit 3\n"


def test_a_node_whose_rank_died_first_is_the_failure_even_when_another_launcher_reports_first(gang):
    # The race seen in the Slurm test: the rank that died first is on a node whose launcher was still ending its
    # other ranks when the news of a later failure (a rank on another node, in a collective) came in.
    g = gang([RANK_DIES_FIRST, RANK_FAILS_LATER])
    ended = wait_for(g.ended, timeout=30)
    assert [s["state"] for s in ended] == ["failed", "failed"], ended
    assert ended[0]["first_exit_at"] < ended[1]["first_exit_at"]
    message = failure_message("g", [dict(s, host=host) for s, (host, _a) in zip(ended, NODES)])
    assert message.startswith("job g failed on n0 (node_rank 0): a rank ended first, and then the launcher was killed "
                              "by SIGTERM; failed after it: n1."), message


RANK_WITH_SHORT_LIVED_CHILDREN = ("echo started; LOCAL_RANK=0 bash -c 'while true; do sleep 0.1; echo step; done'\n"
                                  "exit 1\n")


def test_a_rank_s_own_children_ending_is_not_the_node_failing(gang):
    # DataLoader workers, compilers and shell commands of a rank end all the time: a node whose ranks were well
    # when another node failed is stopped, not failed, even though its launcher then ends with a non-zero code.
    g = gang([RANK_WITH_SHORT_LIVED_CHILDREN, "echo started; sleep 3; exit 3\n"])
    ended = wait_for(g.ended, timeout=30)
    assert [s["state"] for s in ended] == ["stopped", "failed"], ended
    assert ended[0]["exit_code"] != 0 and ended[0]["stopped_for"] == "n1"


RANK_DIES_THEN_LAUNCHER_REPORTS = ("echo started; LOCAL_RANK=0 bash -c 'sleep 2; exit 5'\n"
                                   "sleep 3; echo 'launcher: rank 0 failed first, exit code 5'; exit 1\n")


def test_a_launcher_already_ending_on_its_own_is_left_its_grace_to_report(gang):
    # News of n1's failure comes (at about 3 s) while n0's launcher is ending on its own (its rank ended at 2 s; it
    # reports at 5 s): a SIGTERM then would cut short the launcher's report of which rank failed and how.
    g = gang([RANK_DIES_THEN_LAUNCHER_REPORTS, "echo started; sleep 3; exit 3\n"], grace_s=8.0)
    ended = wait_for(g.ended, timeout=30)
    assert ended[0]["state"] == "failed" and ended[0]["exit_code"] == 1 and not ended[0]["signal"], ended[0]
    assert "launcher: rank 0 failed first, exit code 5" in open(ended[0]["log_path"]).read()


def test_the_controller_s_stop_for_another_node_is_the_gang_s(gang):
    # train.yml's wait stops a part when it hears of another node's failure before that part's supervisor does
    # (job_stop stopped_for): the part whose rank had already ended is failed, as with the gang's own news.
    g = gang([RANK_DIES_FIRST, FOREVER])
    wait_for(lambda: all(g.status(r)["state"] == "running" for r in (0, 1)))
    wait_for(lambda: "rank 0 fails" in open(g.status(0)["log_path"]).read(), timeout=10)
    jobs.stop(g.paths[0], "stopped by gpufleet: n1 (node_rank 1) failed", check_mode=False, cancel_scheduler=False,
              stopped_for="n1")
    ended = wait_for(g.ended, timeout=30)
    assert ended[0]["state"] == "failed" and ended[0]["rank_ended_first"], ended[0]


def test_a_stop_by_request_stays_a_stop_whatever_the_ranks_were_doing(gang):
    h = gang([RANK_DIES_FIRST, FOREVER])
    wait_for(lambda: all(h.status(r)["state"] == "running" for r in (0, 1)))
    wait_for(lambda: "rank 0 fails" in open(h.status(0)["log_path"]).read(), timeout=10)
    jobs.stop(h.paths[0], "stopped by the user", check_mode=False)
    assert wait_for(h.ended, timeout=30)[0]["state"] == "stopped"


# A launcher's agent as torchrun's is: it starts the node's rank (LOCAL_RANK set) and notices its end only at its
# next look (torchrun: every 0.1 s; 2 s here, a margin for a loaded machine), then takes its time to end its part
# (3 s here). Until it looks, the rank is a zombie its supervisor can read the end of.
AGENT = """import os, subprocess, sys, time
rank = subprocess.Popen(["bash", "-c", "echo $$ > " + sys.argv[1] + ".tmp; mv " + sys.argv[1] + ".tmp " + sys.argv[1]
                         + "; " + sys.argv[2]], env=dict(os.environ, LOCAL_RANK="0", RANK=os.environ["NODE_RANK"]))
print("started", flush=True)
while rank.poll() is None:
    time.sleep(2.0)
print("agent: the rank ended with %d; ending this node's part" % rank.returncode, flush=True)
time.sleep(3.0)
sys.exit(1 if rank.returncode else 0)
"""


def agent_body(tmp_path, rank_command):
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    return lambda rank: "exec %s %s %s %s\n" % (sys.executable, agent, tmp_path / ("rank%d.pid" % rank),
                                                 shlex.quote(rank_command))


def watched_by_supervisor(supervisor_pid, pid):
    """Whether the supervisor holds a pidfd of pid (its /proc fdinfo says "Pid:"): it will see pid's end at once."""
    folder = "/proc/%d/fdinfo" % supervisor_pid
    for name in os.listdir(folder):
        try:
            with open(os.path.join(folder, name)) as handle:
                if "Pid:\t%d\n" % pid in handle.read():
                    return True
        except OSError:
            pass
    return False


def test_a_rank_that_fails_is_told_to_the_other_nodes_before_its_launcher_ends(gang, tmp_path):
    """The gang stop's first step: n1's rank is SIGKILLed; its supervisor reads how it ended (the launcher has not
    reaped it yet) and tells n0 at once, which stops while n1's launcher is still ending its part."""
    body = agent_body(tmp_path, "exec sleep 1000")
    g = gang([FOREVER, body(1)])
    pidfile = tmp_path / "rank1.pid"
    wait_for(lambda: pidfile.exists() and g.status(1).get("supervisor_pid"), timeout=30)
    pid = int(pidfile.read_text())
    wait_for(lambda: watched_by_supervisor(g.status(1)["supervisor_pid"], pid), timeout=30)
    os.kill(pid, signal.SIGKILL)
    ended = wait_for(g.ended, timeout=30)
    assert [s["state"] for s in ended] == ["stopped", "failed"], ended
    assert ended[1]["exit_code"] == 1, ended[1]
    assert ended[0]["stopped_for"] == "n1", ended[0]
    assert "n1 (node_rank 1) failed: rank 1 (pid %d) ended with SIGKILL" % pid in ended[0]["stop_reason"], ended[0]
    # The word came before n1's launcher had ended its part (3 s after it noticed).
    assert ended[0]["stop_requested_at"] < ended[1]["ended_at"] - 2, (ended[0], ended[1])
    assert "rank 1 (local rank 0, pid %d) ended with SIGKILL" % pid in [what for _at, what in ended[1]["events"]]
    # The part's outcome carries the rank's own end (the launcher's exit code is 1): 128 + SIGKILL, no traceback.
    part = ended[1]["attempts"][0]
    assert (part["exit_code"], part["failed_rank"], part["rank_exit"], part["failed_at"]) == (1, 1, 137, None), part


def test_a_bare_sigterm_after_this_node_s_rank_failed_on_its_own_is_that_failure(gang, tmp_path):
    """Under Slurm (--kill-on-bad-exit): n1's rank dies, n0's part ends at the news, and Slurm SIGTERMs n1's
    supervisor while n1's launcher is still ending (12 s here). No stop request is written: n1's part failed."""
    agent = tmp_path / "slow_agent.py"
    agent.write_text(AGENT.replace("time.sleep(3.0)", "time.sleep(12.0)"))
    body = "exec %s %s %s %s\n" % (sys.executable, agent, tmp_path / "rank1.pid", shlex.quote("exec sleep 1000"))
    g = gang([FOREVER, body], rank_args=({"grace_s": 1.0}, {"grace_s": 30.0}))
    pidfile = tmp_path / "rank1.pid"
    wait_for(lambda: pidfile.exists() and g.status(1).get("supervisor_pid"), timeout=30)
    pid = int(pidfile.read_text())
    wait_for(lambda: watched_by_supervisor(g.status(1)["supervisor_pid"], pid), timeout=30)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: g.status(0)["state"] in ENDED_STATES, timeout=15)  # at n1's news
    assert g.status(1)["state"] == "running"  # its launcher still ending
    os.kill(g.status(1)["supervisor_pid"], signal.SIGTERM)
    ended = wait_for(g.ended, timeout=45)
    assert ended[1]["state"] == "failed" and ended[1]["rank_ended_first"], ended[1]
    assert ended[0]["state"] == "stopped" and ended[0]["stopped_for"] == "n1", ended[0]


def test_a_rank_that_ends_well_before_the_others_is_not_told_as_a_failure(gang, tmp_path):
    go = tmp_path / "go"
    body = agent_body(tmp_path, "while [ ! -e %s ]; do sleep 0.05; done; exit 0" % go)
    g = gang(["echo started; while [ ! -e %s ]; do sleep 0.05; done; sleep 6; exit 0\n" % go, body(1)])
    pidfile = tmp_path / "rank1.pid"
    wait_for(lambda: pidfile.exists() and g.status(1).get("supervisor_pid"), timeout=30)
    wait_for(lambda: watched_by_supervisor(g.status(1)["supervisor_pid"], int(pidfile.read_text())), timeout=30)
    go.write_text("")  # n1's rank ends well; n0 goes on for 6 s more
    ended = wait_for(g.ended, timeout=30)
    assert [s["state"] for s in ended] == ["succeeded", "succeeded"], ended
    assert any(what.startswith("rank 1 (local rank 0, pid ") and what.endswith(") ended with exit code 0")
               for _at, what in ended[1]["events"]), ended[1]["events"]


def test_a_rank_ended_by_a_stop_is_the_stop_not_a_failure(gang, tmp_path):
    body = agent_body(tmp_path, "exec sleep 1000")
    g = gang([body(0), FOREVER])
    pidfile = tmp_path / "rank0.pid"
    wait_for(lambda: pidfile.exists() and g.status(0).get("supervisor_pid"), timeout=30)
    wait_for(lambda: watched_by_supervisor(g.status(0)["supervisor_pid"], int(pidfile.read_text())), timeout=30)
    jobs.stop(g.paths[0], "stopped by the user", check_mode=False)
    ended = wait_for(g.ended, timeout=30)
    assert [s["state"] for s in ended] == ["stopped", "stopped"], ended
    assert "stopped by the user" in ended[1]["stop_reason"] and "failed" not in ended[1]["stop_reason"], ended[1]


@pytest.mark.parametrize("status, stopping, stop_reason, launcher, told", [
    (9, False, None, "torchrun", "rank 3 (pid 41) ended with SIGKILL"),
    (3 << 8, False, None, "deepspeed", "rank 3 (pid 41) ended with exit code 3"),
    (0, False, None, "torchrun", None),  # ended well
    (None, False, None, "torchrun", None),  # its launcher reaped it first: the launcher's exit code says
    (15, True, None, "torchrun", None),  # this node's stop (a peer's failure, a hang) ended it
    (15, False, "stopped by SIGTERM", "torchrun", None),  # a stop asked of this node, before its stop began
    # node 0's mpirun owns every rank and reports which failed (the cluster test of a failing mpirun rank)
    (3 << 8, False, None, "mpirun", None),
])
def test_only_a_rank_failing_on_its_own_is_told_to_the_other_nodes(status, stopping, stop_reason, launcher, told):
    beats = []
    node = types.SimpleNamespace(events=Events({}), stopping=stopping, stop_reason=stop_reason, telling=None,
                                 spec={"launcher": launcher}, first_failure=FirstFailure("/nonexistent", launcher),
                                 gang=types.SimpleNamespace(peers=lambda: [1]),
                                 beat=lambda phase, force=False: beats.append((phase, force)))
    Supervisor._rank_ended(node, 41, 3, 0, status)
    assert (node.telling.reason if node.telling else None) == told
    assert beats == ([(HeartbeatPhase.RUNNING, True)] if told else [])
    assert node.telling is None or node.telling.outcome == JobState.FAILED
    # The same failure is the attempt's first failed rank, for the restart decision (restart_on, the same place)
    assert (node.first_failure.rank, node.first_failure.status) == ((3, status) if told else (None, None))


# A script whose rank 1 raises at the same line in every attempt (train.py:5), the others training on.
SAME_PLACE = ("import os, sys, time\n"
              "print('attempt', os.environ['GPUFLEET_ATTEMPT'], flush=True)\n"
              "time.sleep(0.5)\n"
              "if os.environ['RANK'] == '1':\n"
              "    raise ValueError('loss is NaN')\n"
              "time.sleep(1000)\n")


def test_a_rank_failing_twice_at_the_same_place_is_not_restarted_a_third_time(gang, tmp_path):
    """max_restarts=3 and min_progress_s=0 (the time guard off): rank 1 raises at train.py:5 in attempt 1 and again
    in attempt 2; the third attempt is not launched, and both nodes say why (restart_policy.failed_at,
    gang_rules.repeated_failure)."""
    (tmp_path / "train.py").write_text(SAME_PLACE)
    body = 'RANK=$NODE_RANK LOCAL_RANK=0 exec %s %s\n' % (sys.executable, tmp_path / "train.py")
    g = gang([body, body], max_restarts=3, min_progress_s=0, restart_ports=tuple(free_udp_port() for _ in range(3)))
    ended = wait_for(g.ended, timeout=60)
    said = ("not restarting: rank 1 (n1) failed twice in a row in train.py:5 with exit code 1: the script's own "
            "failure, which a restart would meet again")
    for state in ended:
        assert [a["attempt"] for a in state["attempts"]] == [1, 2] and state["no_restart"] == said, state
    # The rank is the launch script's own process here, reaped as the launcher: its rank comes from its traceback's
    # tag, its exit code from the part's (rank_exit is what the supervisor read of the rank itself: nothing).
    assert [(a["failed_rank"], a["rank_exit"], a["failed_at"]) for a in ended[1]["attempts"]] == [(1, None, "train.py:5")] * 2
    assert ended[1]["state"] == "failed" and ended[0]["state"] == "stopped", ended
    assert "[gpufleet] %s" % said in open(ended[1]["log_path"]).read()
    wait_for(lambda: not g.processes())


@pytest.mark.parametrize("restart_on, attempts", [(("hang",), [1]), (("7",), [1, 2]), (("rank_exit",), [1, 2])])
def test_restart_on_decides_whether_a_ranks_failure_restarts_the_gang(gang, restart_on, attempts):
    g = gang([RESTARTABLE, RESTARTABLE], max_restarts=1, restart_ports=(free_udp_port(),), restart_on=restart_on)
    ended = wait_for(g.ended, timeout=30)
    for state in ended:
        assert [a["attempt"] for a in state["attempts"]] == attempts, state
        if attempts == [1]:
            assert state["no_restart"] == ("not restarting: a rank's failure (exit code 7) is not among the causes "
                                           "this job restarts on (restart_on: hang)"), state
    assert [s["state"] for s in ended] == (["stopped", "failed"] if attempts == [1] else ["succeeded"] * 2), ended


def test_an_attempt_that_ran_min_progress_s_gives_the_restart_budget_back(gang):
    """max_restarts=1, min_progress_s=1: node 1 fails 2.5 s into each of attempts 1 to 3; each failed attempt had
    run past min_progress_s, so the one restart is given back each time, and attempt 4 succeeds. The relaunch
    ports are used again from the first."""
    body = ('echo "attempt $GPUFLEET_ATTEMPT port $GPUFLEET_MASTER_PORT"\n'
            'if [ "$GPUFLEET_ATTEMPT" -lt 4 ] && [ "$NODE_RANK" = 1 ]; then sleep 2.5; exit 7; fi\n'
            'if [ "$GPUFLEET_ATTEMPT" -lt 4 ]; then exec sleep 1000; fi\n'
            "sleep 0.5; echo done\n")
    g = gang([body, body], max_restarts=1, min_progress_s=1, restart_ports=(free_udp_port(),))
    ended = wait_for(g.ended, timeout=60)
    for state in ended:
        assert state["state"] == "succeeded" and [a["attempt"] for a in state["attempts"]] == [1, 2, 3, 4], state
        ports = [a["master_port"] for a in state["attempts"]]
        assert ports[0] == ports[2] != ports[1] == ports[3], ports
        log = open(state["log_path"]).read()
        assert log.count("the restart budget is given back (max_restarts=1 again)") == 2, log  # after attempts 2, 3
        assert "[gpufleet] attempt 4 of 4, master port" in log
