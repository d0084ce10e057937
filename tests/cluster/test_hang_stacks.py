"""Which rank a hang is stuck in, on the 3-node container cluster: faulty_train.py with two ranks a node (gloo), rank 4
(node2's first) stalls in load_next_batch while the five others wait for it in all_reduce; the hang watchdog stops the
job, and before it does each node's supervisor reads its ranks' stacks with the nodes' py-spy (python_env's pinned
one). Checked: the play's message names rank 4, node2 and the frame; every rank's stack is fetched into logs/<job>/
with its own frame; a node without py-spy says so and the rest works. The ranks also keep the file PyTorch's flight
recorder would dump (faulty_train.py --flight-recorder: a stand-in in torch 2.13's format): checked that every
node's dumps are fetched and that the report names rank 4 as the rank behind the all_reduce the others wait in,
by gpufleet's reading and by torch's own analyser (the controller's torch). Not checked: NCCL (no GPU here: the
ranks wait in gloo's all_reduce, the same Python frame NCCL's would be; the dumps are the stand-in's, not NCCL's)."""

import json
import os
import re
import shlex

import pytest

import browser
from jobfaults import PTRACE_REFUSED, STALLED, WAITING, line_of, rank_sections, train

VENV_PY_SPY = "/opt/gpufleet/venv/bin/py-spy"
RECORDED = line_of("recorder.entering(")  # where the flight recorder's stand-in saw the all_reduce called


@pytest.fixture(autouse=True)
def _cluster_ready(provisioned):
    return provisioned


def hang(cluster, job, *extra):
    run = train(cluster, job, "-e", "hang_timeout=8", *extra, nproc=2,
                script_args="--steps 400 --step-s 0.1 --stall-rank 4 --stall-step 6 --flight-recorder")
    done = run.finish()
    for node in cluster.nodes:
        cluster.node_exec(node, "rm", "-rf", "/root/.gpufleet/jobs/%s" % job)
    assert done.rc != 0, done.out[-3000:]
    return done, " ".join(done.out.split())


def test_a_hang_names_the_stalled_rank_its_node_and_frame_and_every_rank_s_stack_is_fetched(cluster):
    job = "hang-stacks"
    done, out = hang(cluster, job)
    assert "job %s hung and was stopped on every node: hung: no node wrote to its log" % job in out, out[-3000:]
    assert ("ranks 0–3, 5 in %s, rank 4 in %s: rank 4 on node2 is the likely cause" % (WAITING, STALLED)) in out, \
        out[-3000:]
    logs = os.path.join(cluster.state, "logs", job)
    assert re.search(r"every rank's stack: \S*/node0\.stacks\.txt, \S*/node1\.stacks\.txt, \S*/node2\.stacks\.txt\.",
                     out), out[-3000:]
    for node, ranks in (("node0", (0, 1)), ("node1", (2, 3)), ("node2", (4, 5))):
        sections = rank_sections(os.path.join(logs, "%s.stacks.txt" % node))
        assert sorted(sections) == list(ranks), sections
        for rank in ranks:
            # The rank's own frame, and where in faulty_train.py it was called from (the thread's innermost frames).
            expected = (("load_next_batch", line_of("time.sleep(stall_s)")) if rank == 4
                        else ("all_reduce", line_of("dist.all_reduce(total)")))
            assert "    %s (" % expected[0] in sections[rank], (rank, sections[rank])
            assert "faulty_train.py:%d)" % expected[1] in sections[rank], (rank, sections[rank])
            assert ("    all_reduce (" in sections[rank]) == (rank != 4), (rank, sections[rank])
    # One timeline of every node's supervisor events, on node0's clock as the heartbeats measured it.
    with open(os.path.join(logs, "events.log")) as handle:
        timeline = handle.read().splitlines()
    assert re.match(r"# every node's events on node0's clock \(UTC\); node0 \+0\.000 s, node1 [+-]\d+\.\d{3} s, "
                    r"node2 [+-]\d+\.\d{3} s$", timeline[0]), timeline[0]
    assert [line[:23] for line in timeline[1:]] == sorted(line[:23] for line in timeline[1:])
    for node in cluster.nodes:
        said = [line.split("  ", 2)[2] for line in timeline[1:] if line.split("  ", 2)[1].strip() == node]
        assert said[0].startswith("GPU watch: "), said
        assert said[1].startswith("attempt 1 of 1, master port "), said
        hung = next(i for i, what in enumerate(said) if what.startswith("hung: no node wrote to its log"))
        assert said[hung + 1].startswith("stacks of ranks "), said
        assert said[-1].startswith("this node's part ended: %s (node_rank %d) " % (node, cluster.nodes.index(node)))
    # The stalled rank's end, with its cause where its supervisor read it before torchrun reaped it (the stop's signal).
    assert any(re.search(r"  node2  rank 4 \(local rank 0, pid \d+\) ended( with SIG(TERM|KILL))?$", line)
               for line in timeline), timeline
    assert "Every node's events in time order: %s" % os.path.join(logs, "events.log") in done.out
    # The flight recorder's dumps, one per rank, fetched from each node and read on the controller.
    assert sorted(os.listdir(os.path.join(logs, "flight_recorder"))) == ["fr_trace.txt"] + ["rank_%d" % r for r in range(6)]
    said = ("PyTorch's flight recorder: ranks 0–3, 5 wait in nccl:all_reduce #7 of process group default_pg at "
            "all_reduce (faulty_train.py:%d); rank 4 never entered it (rank 4's last: #6, completed): the likely cause; "
            "torch's analyser: Not all ranks joining collective, sequence number: 7; group info: 0:default_pg; "
            "collective: nccl:all_reduce; missing ranks: {4} (" % RECORDED)
    assert re.search(re.escape(said) + r"\S*logs/%s/flight_recorder/fr_trace\.txt\) \(6 dumps in \S*logs/%s/"
                     r"flight_recorder\)" % (job, job), out), out[-3000:]
    # The fleet's history records the hang on node2, the node of the rank the stacks name (class hang: not counted).
    with open(os.path.join(cluster.state, "logs", "history.jsonl")) as handle:
        records = [json.loads(line) for line in handle]
    assert [(r["node"], r["class"], r["fact"]) for r in records if r["job"] == job] == [
        ("node2", "hang", "the job hung; the stacks name rank 4 as the likely cause")], records
    # The job's page in a real browser with the network cut: the hang and the rank it names on the first screen (the
    # failure box's red border in the screenshot of its first 1280x800), each node's stacks linked beside it.
    page = os.path.join(logs, "report.html")
    assert "The job's story as one page: %s" % page in done.out
    parsed = browser.dom(page)
    assert "job hang-stacks: <span class=\"bad\">hung (the stacks name rank 4 on node2)</span>" in parsed
    assert "rank 4 on node2 is the likely cause" in parsed
    assert all('href="%s.stacks.txt"' % node in parsed for node in cluster.nodes) and "<script" not in parsed
    shot, logged = browser.screenshot(page, "report-hung-job.png")
    assert browser.has_colour(shot, (0xB4, 0x23, 0x18)), shot  # report_page.STYLE's failure red
    assert "CONSOLE" not in logged and "Uncaught" not in logged, logged[-3000:]

def test_where_py_spy_is_refused_or_missing_the_ranks_own_hook_names_the_stalled_rank(cluster):
    """node2 (the stalled rank's) has a py-spy that refuses as py-spy does under ptrace_scope=1, node1 has none: the
    ranks' own faulthandler (stack_hook.py, through the launch's PYTHONPATH) gives their stacks, and the message
    names rank 4, node2 and the frame as before. The session cluster runs jobs as root; a job of a non-root user is
    test_bare_nodes.py's (the real Yama refusal cannot be had: the test machines' kernel has no Yama). With max_restarts=2 too: the hang restarts
    the gang once (resuming from step 5's checkpoint), rank 4 stalls again at step 6 at once, and the second
    restart is not used (the same failure within min_progress_s)."""
    job = "hang-nospy"
    cluster.node_exec("node1", "mv", VENV_PY_SPY, VENV_PY_SPY + ".away", check=True)
    cluster.node_exec("node2", "mv", VENV_PY_SPY, VENV_PY_SPY + ".away", check=True)
    refusing = "#!/bin/sh\necho %s >&2\nexit 1\n" % shlex.quote(PTRACE_REFUSED)
    cluster.node_exec("node2", "sh", "-c", "printf '%%s' %s > %s && chmod 755 %s" % (
        shlex.quote(refusing), VENV_PY_SPY, VENV_PY_SPY), check=True)
    try:
        done, out = hang(cluster, job, "-e", "max_restarts=2")
    finally:
        for node in ("node1", "node2"):
            cluster.node_exec(node, "mv", VENV_PY_SPY + ".away", VENV_PY_SPY, check=True)
    assert ("ranks 0–3, 5 in %s, rank 4 in %s: rank 4 on node2 is the likely cause" % (WAITING, STALLED)) in out, \
        out[-3000:]
    logs = os.path.join(cluster.state, "logs", job)
    for node, ranks, why in (("node1", [2, 3], "py-spy is not on this node"), ("node2", [4, 5], "py-spy: " + PTRACE_REFUSED)):
        sections = rank_sections(os.path.join(logs, "%s.stacks.txt" % node))
        assert sorted(sections) == ranks, sections
        for rank in ranks:
            assert "read by the rank's own faulthandler (Python frames only); %s" % why in sections[rank], sections
    assert "    load_next_batch (" in rank_sections(os.path.join(logs, "node2.stacks.txt"))[4]
    # Attempt 1's stacks and flight recorder files were kept aside on the nodes before attempt 2 wrote its own
    # (attempt_files.py), and fetched beside the logs.
    first = os.path.join(logs, "attempt1")
    assert sorted(rank_sections(os.path.join(first, "node2.stacks.txt"))) == [4, 5]
    assert sorted(os.listdir(os.path.join(first, "flight_recorder"))) == ["rank_%d" % r for r in range(6)]
    assert ("Kept from the attempts before a restart: %s/ (stacks of 3 nodes, 6 flight recorder dumps)" % first
            in out), out[-3000:]
    for node in cluster.nodes:  # the logs and the report as ever; two attempts, then no more
        with open(os.path.join(logs, "%s.log" % node)) as handle:
            log = handle.read()
        assert re.search(r"^%s +\d +hung +\S+ +2 " % node, done.out, re.M), done.out[-3000:]
        assert re.search(r"\[gpufleet\] restarting after: hung: no node wrote to its log for \d+ s \(hang_timeout=8\)",
                         log), log[-3000:]
        assert re.search(r"\[gpufleet\] not restarting: the same failure twice within 300 s of a restart "
                         r"\(min_progress_s\): hung: no node wrote", log), log[-3000:]
        assert "[gpufleet] attempt 3 of 3" not in log
    assert re.search(r"Restarts: attempt 2 after: hung: no node wrote to its log for \d+ s \(hang_timeout=8\)",
                     done.out), done.out[-3000:]
    assert re.search(r"; not restarting: the same failure twice within 300 s of a restart \(min_progress_s\): hung: ",
                     out), out[-3000:]
    with open(os.path.join(logs, "node2.log")) as handle:
        assert "rank 4 resumes from step 5" in handle.read()
