"""Fault injection helpers for the container cluster: run faulty_train.py through train.yml, find the job's
processes from the host, inject a fault by host PID, and wait until nothing of the job is left.

Used by tests/cluster/test_supervision.py (one run per fault, with a bound) and bench/gang_stop.py (the median of
several runs per fault). Everything is read through the host's /proc (hostview.py), never through `podman exec`,
so a wait costs milliseconds, not seconds.
"""

import os
import re
import signal
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import ENDED_STATES, JobState

TERMINAL = ENDED_STATES
from hostview import wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
FAULTY = os.path.join(HERE, "scripts", "faulty_train.py")


def probe(cluster, node, job):
    """The job on one node as the host sees it: its processes, its state.json and its log's step lines."""
    return {"processes": [p for p in cluster.view.processes(job) if p["node"] == node],
            "state": cluster.view.job_state(node, job), "steps": cluster.view.step_lines(node, job)}


def probe_all(cluster, job, nodes=None):
    processes = cluster.view.processes(job)
    return {node: {"processes": [p for p in processes if p["node"] == node],
                   "state": cluster.view.job_state(node, job), "steps": cluster.view.step_lines(node, job)}
            for node in nodes or cluster.nodes}


def wait_for(cluster, job, predicate, timeout=120.0, step=0.3, what="condition", give_up=None, run=None):
    """predicate()'s first true value; on giving up, the failure shows what every node had of the job, and the
    output so far of the playbook that launched it (run, a harness.Background)."""
    def explain():
        seen = cluster.view.describe(job)
        if run is not None:
            seen += "\n--- the playbook's output so far (last 3000 characters) ---\n" + run.output()[-3000:]
        return seen
    return wait_until(predicate, timeout, "%s (job %s)" % (what, job), step=step, explain=explain, give_up=give_up)


def ended_early(cluster, job, nodes=None):
    """A reason to stop waiting for training: the job has already ended on a node."""
    def reason():
        for node in nodes or cluster.nodes:
            state = cluster.view.job_state(node, job) or {}
            if state.get("state") in TERMINAL:
                return "the job already ended on %s (%s)" % (node, state.get("state"))
        return None
    return reason


def wait_training(cluster, job, steps=3, nodes=None, run=None):
    """Until every node's log shows at least steps training steps; stops early when the job has ended, or when the
    playbook that launches it has ended without it training."""
    ended = ended_early(cluster, job, nodes)

    def give_up():
        return ended() or (("the playbook ended (exit %s)" % run.proc.poll())
                           if run is not None and run.proc.poll() is not None else None)
    return wait_for(cluster, job, lambda: (lambda f: f if all(p["steps"] >= steps for p in f.values()) else None)(
        probe_all(cluster, job, nodes)), what="training on every node", give_up=give_up, run=run)


def wait_gone(cluster, job, nodes=None, timeout=60.0):
    """Until no process of the job is left on the nodes (one scan of the host's /proc a turn); returns the time."""
    nodes = nodes or cluster.nodes
    wait_for(cluster, job, lambda: not [p for p in cluster.view.processes(job) if p["node"] in nodes],
             timeout=timeout, step=0.05, what="no process of %s on %s" % (job, ", ".join(nodes)))
    return time.time()


def pid_of(found, kind, rank=None):
    """The host PID of the job's process of that kind (and rank) on a node."""
    for process in found["processes"]:
        if process["kind"] == kind and (rank is None or process["rank"] == str(rank)):
            return process["pid"]
    raise AssertionError("no %s (rank %s) in %s" % (kind, rank, found))


def train(cluster, job, *extra, script_args="--steps 400", nproc=1, **options):
    """train.yml of faulty_train.py in the background; options go to Cluster.start_playbook (root: a checkout)."""
    return cluster.start_playbook(
        "train.yml", "-e", "script=%s" % FAULTY, "-e", "job=%s" % job, "-e", "nproc_per_node=%d" % nproc,
        "-e", "script_args='%s'" % script_args, *extra, log_name="%s.out" % job, **options)


def train_detached(cluster, job, steps):
    run = cluster.playbook("train.yml", "-e", "script=%s" % FAULTY, "-e", "job=%s" % job, "-e", "nproc_per_node=1",
                           "-e", "script_args='--steps %d'" % steps, "-e", "wait=false")
    assert run.rc == 0, run.out[-3000:]


def kill_in_node(cluster, node, pid, signum=signal.SIGKILL):
    """Signal a node's process by its host PID (the host sees the rootful containers' processes)."""
    assert any(p["pid"] == pid for p in probe(cluster, node, None)["processes"]), (node, pid)
    os.kill(pid, signum)
    return time.time()


def line_of(text):
    """The line number in faulty_train.py of the first line holding text."""
    with open(FAULTY) as handle:
        return next(number for number, line in enumerate(handle, 1) if text in line)


# Where faulty_train.py --stall-rank R stalls rank R, and where the other ranks wait for it.
STALLED = "load_next_batch (faulty_train.py:%d)" % line_of("time.sleep(stall_s)")
WAITING = "all_reduce (faulty_train.py:%d)" % line_of("dist.all_reduce(total)")

# What py-spy prints when the kernel refuses it the ranks (a non-root user under kernel.yama.ptrace_scope=1): the
# fixture, verbatim from py-spy's source (tests/fixtures/py_spy/README.md).
with open(os.path.join(HERE, "..", "fixtures", "py_spy", "ptrace_refused.txt")) as _f:
    PTRACE_REFUSED = _f.read().strip()


def rank_sections(path):
    """A node's stacks.txt's sections, by global rank."""
    with open(path) as handle:
        parts = re.split(r"^=== \S+ rank (\d+) .*===$", handle.read(), flags=re.M)
    return {int(rank): body for rank, body in zip(parts[1::2], parts[2::2])}
