#!/usr/bin/env python3
"""Scale: launch, gang stop and re-provision at 2 to 16 container nodes, against the direct way.

    make bench-scale                # or: .venv/bin/python bench/scale.py [--sizes 2,4,8,16] [--runs 3]
                                    #     [--control-path 64] [--profile 8] [--forks-check 8] [--baseline REF]

For each node count N, on a fresh cluster of N plain container nodes (tests/cluster/testbed.py) started from a
provisioned image (a node provisioned once, then saved without its keys: the nodes do not download the same
Debian packages N times), one rank per node, gloo:

- P3 re-provision: provision.yml once to bring the cluster right (its first run), then again: the wall time of
  the second run, its changed count (0 expected), the controller's CPU seconds per node and the task results per
  node (bench/provision_cost.py, which also compares a baseline commit in the same run).
- P1 launch, from invocation to every rank past init_process_group (each rank stamps the moment into a folder
  the host shares with the nodes; the containers share the host's clock):
  - gpufleet: ansible-playbook playbooks/train.yml -e script=/bench/init_timer.py -e script_on_nodes=true;
  - direct: one ssh per node, started in parallel from the controller, each running that node's torchrun line
    (static rendezvous, the node's /etc/gpufleet/nccl.env sourced), as pdsh/pssh users do; the same SSH options
    as the inventory's (key, known hosts, host key checking on, ControlMaster/ControlPersist as ansible.cfg).
  - with --baseline REF[,REF]: the train.yml of each commit (git archive, bench/provision_cost.py), between the two.
  Cold: a fresh ControlPath folder (no SSH connection open); warm: connections left open by an untimed ssh to
  every node. Runs alternate: direct cold, gpufleet cold, direct warm, gpufleet warm.
- P2 gang stop: train.yml with tests/cluster/scripts/faulty_train.py on every node; once every node trains, the
  rank on the last node is SIGKILLed; the time until no process of the job is left on any node, read from the
  host's /proc (which sees the rootful containers' processes).
- Controller cost of each ansible-playbook: CPU seconds of its whole process tree (os.wait4's rusage, which
  counts every waited-for descendant: the forks and their ssh) and the peak of the tree's summed RSS (sampled
  every 50 ms from /proc), both also per node.

--control-path 64: 64 nodes with sshd only (the base image, no torch), train.yml -e launcher=none with a script
that exits 0 after a short sleep (/usr/bin/python3): that it completes, its time and its controller cost.
--profile 8: a per-task profile of train.yml at 8 nodes (bench/callback_plugins/task_profile.py).
--forks-check 8: train.yml at 8 nodes with forks=5 (Ansible's default): success expected, then a rank failing
on the last node must fail the play naming that node.

Writes logs/bench/scale.json and logs/bench/scale.png (matplotlib, from the bench extra) and prints a table.
The controller and every node share this machine's cores: every figure includes that contention, on both sides
of a ratio. A figure, not a test: it fails only when a run fails.
"""

from __future__ import annotations

import argparse
import configparser
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BIN = os.path.dirname(sys.executable)
sys.path[:0] = [os.path.join(REPO, "tests", "cluster"), os.path.join(REPO, "collections")]

import testbed  # noqa: E402  pylint: disable=wrong-import-position
from ansible.plugins.connection.ssh import Connection as SshConnection  # noqa: E402  pylint: disable=wrong-import-position
from harness import Cluster, recap  # noqa: E402  pylint: disable=wrong-import-position
from launch_overhead import last_stamp  # noqa: E402  pylint: disable=wrong-import-position
from jobfaults import kill_in_node, pid_of, train, wait_gone, wait_training  # noqa: E402

import provision_cost  # noqa: E402  pylint: disable=wrong-import-position

VENV_PYTHON = "/opt/gpufleet/venv/bin/python"
TORCHRUN = "/opt/gpufleet/venv/bin/torchrun"
NCCL_ENV = "/etc/gpufleet/nccl.env"
BENCH_MOUNT = "/bench"
INIT_TIMER = os.path.join(HERE, "init_timer.py")
# ansible.cfg's [ssh_connection] ssh_args, and what Ansible's ssh connection adds for key-only root logins.
SSH_ARGS = ["-o", "ControlMaster=auto", "-o", "ControlPersist=300s", "-o", "ServerAliveInterval=15",
            "-o", "KbdInteractiveAuthentication=no", "-o", "PasswordAuthentication=no", "-o", "ConnectTimeout=10"]


# ---------------------------------------------------------------------------------------------------------------
# Running things and measuring the controller


@dataclass
class Measured:
    rc: int
    out: str
    seconds: float
    cpu_s: float
    peak_rss_mb: float
    started: float
    recap: dict = field(default_factory=dict)

    def changed(self) -> int:
        return sum(counts.get("changed", 0) for counts in self.recap.values())


def _tree_rss_kb(root: int) -> int:
    """The summed RSS of root and all its descendants, read by walking down from root through
    /proc/PID/task/TID/children: only the tree's own files, so that the sampling, which runs beside the measured
    launch on the same cores, costs little of their CPU (a scan of all of /proc, with 8 nodes' processes, took
    about 10% of a core at this rate)."""
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            with open("/proc/%d/statm" % pid) as handle:
                total += int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
            for tid in os.listdir("/proc/%d/task" % pid):
                with open("/proc/%d/task/%s/children" % (pid, tid)) as handle:
                    todo.extend(int(child) for child in handle.read().split())
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return total


class MachineCpu:
    """The machine's busy CPU seconds (every core, /proc/stat: all but idle and iowait), sampled every 0.1 s while
    a run goes on: the nodes and the controller share these cores, so a launch's wall time here follows the CPU
    its every process spends, and the busy seconds up to the last rank's init say where a launch is heavier."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    @staticmethod
    def busy_s() -> float:
        with open("/proc/stat") as handle:
            fields = [int(value) for value in handle.readline().split()[1:]]
        return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait

    def _sample(self) -> None:
        while not self.done.is_set():
            self.samples.append((time.time(), self.busy_s()))
            self.done.wait(0.1)

    def __enter__(self) -> "MachineCpu":
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.done.set()
        self.thread.join()
        self.samples.append((time.time(), self.busy_s()))

    def between(self, start: float, end: float) -> float:
        """Busy CPU seconds from start to end (the nearest samples)."""
        def at(when: float) -> float:
            return min(self.samples, key=lambda sample: abs(sample[0] - when))[1]
        return round(at(end) - at(start), 1)


def run_measured(cmd: list[str], env: dict, cwd: str, timeout: float = 1800) -> Measured:
    """Run cmd; its wall time, its process tree's CPU seconds (rusage of it and its waited-for descendants) and
    the peak of the tree's summed RSS."""
    log = tempfile.TemporaryFile(mode="w+")
    started = time.time()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,  # noqa: S603
                            start_new_session=True)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss_kb(proc.pid))
            done.wait(0.05)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
        time.sleep(0.02)
    seconds = time.time() - started
    done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    log.seek(0)
    out = log.read()
    return Measured(proc.returncode, out, seconds, usage.ru_utime + usage.ru_stime, peak[0] / 1024.0, started,
                    recap(out))


def enabled_callbacks(root: str) -> list[str]:
    """The callbacks that the ansible.cfg of the checkout at root enables."""
    config = configparser.ConfigParser()
    config.read(os.path.join(root, "ansible.cfg"))
    value = config.get("defaults", "callbacks_enabled", fallback="")
    return [name.strip() for name in value.split(",") if name.strip()]


class Bench:
    def __init__(self, state: str, info: dict, forks: int | None = None) -> None:
        self.state = state
        self.info = info
        self.cluster = Cluster(info, state)
        self.nodes = info["nodes"]
        self.forks = forks
        self.runs = 0
        self.warm_dir = tempfile.mkdtemp(dir=state, prefix="cp-warm-")
        # testbed.up starts nodes 0..N-1: node i listens where testbed.ssh_port(i) says.
        self.ports = {node: testbed.ssh_port(index) for index, node in enumerate(self.nodes)}

    def env(self, control_dir: str, profile: str | None = None, root: str = REPO) -> dict:
        env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_CONFIG=os.path.join(root, "ansible.cfg"),
                   PATH=BIN + os.pathsep + os.environ.get("PATH", ""), ANSIBLE_SSH_CONTROL_PATH_DIR=control_dir)
        if self.forks:
            env["ANSIBLE_FORKS"] = str(self.forks)
        if profile:
            # The task profile beside the callbacks the checkout's own ansible.cfg enables (interrupt, preload).
            env.update(ANSIBLE_CALLBACK_PLUGINS=os.path.join(HERE, "callback_plugins"),
                       ANSIBLE_CALLBACKS_ENABLED=",".join(enabled_callbacks(root) + ["task_profile"]),
                       GPUFLEET_TASK_PROFILE=profile)
        return env

    def playbook(self, name: str, *args: str, control_dir: str | None = None, profile: str | None = None,
                 root: str = REPO, settings: dict | None = None) -> Measured:
        """Run a playbook of the checkout at root (this one, or a baseline's: bench/provision_cost.py), with Ansible
        settings given as environment variables (settings) on top."""
        cmd = [os.path.join(BIN, "ansible-playbook"), "-i", self.info["inventory"],
               os.path.join(root, "playbooks", name), *args]
        control = control_dir or tempfile.mkdtemp(dir=self.state, prefix="cp-")
        done = run_measured(cmd, dict(self.env(control, profile, root), **(settings or {})), self.state)
        self.runs += 1
        with open(os.path.join(self.state, "%02d-%s.log" % (self.runs, name.replace(".yml", ""))), "w") as handle:
            handle.write("$ %s\n%s" % (" ".join(cmd), done.out))  # what each run printed, for a reader of the figures
        return done

    # -- SSH as pdsh/pssh users have it

    def ssh_cmd(self, node: str, control_dir: str, remote: str, control_path: str = "%C") -> list[str]:
        return ["ssh", "-i", self.info["key"], "-o", "UserKnownHostsFile=%s" % self.info["known_hosts"],
                "-o", "StrictHostKeyChecking=yes", *SSH_ARGS, "-o", "ControlPath=%s/%s" % (control_dir, control_path),
                "-p", str(self.ports.get(node, 22)), "root@%s" % self.cluster.addresses[node], remote]

    def ansible_control_path(self, node: str) -> str:
        """The name of the socket Ansible's ssh connection uses for node in its control path folder: a hash of the
        address, the inventory's ansible_port (None where it sets none) and the user, not ssh's %C."""
        port = self.ports.get(node, 22)
        return os.path.basename(SshConnection._create_control_path(  # pylint: disable=protected-access
            self.cluster.addresses[node], port if port != 22 else None, "root"))

    def warm_up(self, control_dir: str) -> None:
        """Open a persistent SSH connection to every node in control_dir (untimed), two per node: the direct way's
        (ssh's %C) and train.yml's (Ansible's own name for it), so that both sides start warm."""
        procs = [subprocess.Popen(self.ssh_cmd(node, control_dir, "true", path), stdout=subprocess.DEVNULL,  # noqa: S603
                                  stderr=subprocess.DEVNULL)
                 for node in self.nodes for path in ("%C", self.ansible_control_path(node))]
        for proc in procs:
            proc.wait(timeout=120)

    def close(self, control_dir: str) -> None:
        for node in self.nodes:
            for path in ("%C", self.ansible_control_path(node)):
                command = self.ssh_cmd(node, control_dir, "true", path)
                subprocess.run(command[:-2] + ["-O", "exit", command[-2]], capture_output=True, check=False)


# ---------------------------------------------------------------------------------------------------------------
# P1: launch


def stamps_dir(bench_dir: str, label: str) -> tuple[str, str]:
    """(host path, node path) of a fresh stamps folder."""
    host = os.path.join(bench_dir, "stamps", label)
    os.makedirs(host, mode=0o777)
    os.chmod(host, 0o777)
    return host, "%s/stamps/%s" % (BENCH_MOUNT, label)


def direct(bench: Bench, bench_dir: str, label: str, port: int, control_dir: str) -> float:
    host_dir, node_dir = stamps_dir(bench_dir, label)
    master = bench.cluster.addresses[bench.nodes[0]]
    count = len(bench.nodes)
    lines = {
        node: "set -a; . %s; set +a; cd %s && BENCH_STAMPS=%s OMP_NUM_THREADS=1 exec %s --nnodes=%d --node-rank=%d "
              "--nproc-per-node=1 --master-addr=%s --master-port=%d --rdzv-backend=static --max-restarts=0 "
              "%s/init_timer.py" % (NCCL_ENV, BENCH_MOUNT, node_dir, TORCHRUN, count, rank, master, port, BENCH_MOUNT)
        for rank, node in enumerate(bench.nodes)}
    started = time.time()
    procs = [subprocess.Popen(bench.ssh_cmd(node, control_dir, lines[node]), stdout=subprocess.PIPE,  # noqa: S603
                              stderr=subprocess.STDOUT, text=True) for node in bench.nodes]
    failed = []
    for node, proc in zip(bench.nodes, procs):
        out, _ = proc.communicate(timeout=600)
        if proc.returncode != 0:
            failed.append("%s (rc %d): %s" % (node, proc.returncode, out[-800:]))
    if failed:
        raise SystemExit("direct torchrun failed on %s" % "\n".join(failed))
    return last_stamp(host_dir, count) - started


def gpufleet(bench: Bench, bench_dir: str, label: str, control_dir: str, profile: str | None = None,
             root: str = REPO) -> tuple[float, Measured]:
    """train.yml of the checkout at root (this one, or the baseline's)."""
    host_dir, node_dir = stamps_dir(bench_dir, label)
    extra = json.dumps({"gpufleet_env": {"BENCH_STAMPS": node_dir, "OMP_NUM_THREADS": "1"}})
    done = bench.playbook("train.yml", "-e", "script=%s/init_timer.py" % BENCH_MOUNT, "-e", "script_on_nodes=true",
                          "-e", "job=%s" % label, "-e", extra, control_dir=control_dir, profile=profile,
                          root=root)
    if done.rc != 0:
        raise SystemExit("train.yml failed:\n" + done.out[-4000:])
    return last_stamp(host_dir, len(bench.nodes)) - done.started, done


STAGES = (("agent_parent", "the agent's parent starts (sshd's shell; gpufleet's supervisor)"),
          ("agent", "torchrun starts"),
          ("rank", "the rank's Python starts"),
          ("top", "the script's first line runs"),
          ("imported", "torch.distributed is imported"),
          ("init", "past init_process_group"))


def rank_stages(host_dir: str, count: int, started: float) -> dict[str, float]:
    """Seconds from the invocation to each step of rank start (init_timer.py's rank<N>.json), the median over the
    nodes; and the last node's init ("init_last", what P1 measures)."""
    ranks = []
    for rank in range(count):
        with open(os.path.join(host_dir, "rank%d.json" % rank)) as handle:
            ranks.append(json.load(handle))
    stages = {key: round(statistics.median(r[key] - started for r in ranks if r.get(key) is not None), 2)
              for key, _what in STAGES if any(r.get(key) is not None for r in ranks)}
    stages["init_last"] = round(max(r["init"] for r in ranks) - started, 2)
    return stages


def p1_launch(bench: Bench, bench_dir: str, runs: int, baselines: dict[str, str] | None = None) -> dict:
    """Direct, then each baseline's train.yml (--baseline REF[,REF]: the checkout of that commit), then this
    checkout's, cold and warm, runs times; the medians, the ratios to the direct way and to each baseline."""
    baselines = baselines or {}
    kinds = ["direct"] + ["baseline " + ref for ref in baselines] + ["gpufleet"]
    rows: dict[str, list[float]] = {"%s_%s" % (who, kind): [] for kind in ("cold", "warm") for who in kinds}
    costs: list[Measured] = []
    stages: dict[str, list[dict[str, float]]] = {"%s_%s" % (who, kind): [] for kind in ("cold", "warm")
                                                 for who in ("direct", "gpufleet")}
    count = len(bench.nodes)
    warm_direct = tempfile.mkdtemp(dir=bench.state, prefix="cp-dw-")
    for run in range(runs):
        for kind in ("cold", "warm"):
            label = "p1-%d-%s-%d" % (count, kind, run)
            dirs = {who: tempfile.mkdtemp(dir=bench.state, prefix="cp-%d-" % index) for index, who in enumerate(kinds)}
            if kind == "warm":
                dirs = {who: warm_direct if who == "direct" else bench.warm_dir for who in kinds}
                for folder in set(dirs.values()):
                    bench.warm_up(folder)
            with MachineCpu() as cpu:
                took = direct(bench, bench_dir, label + "-d", 29100 + run * 2 + (kind == "warm"), dirs["direct"])
            rows["direct_" + kind].append(round(took, 3))
            stages["direct_" + kind].append(stages_of(bench_dir, label + "-d", count, took, cpu))
            line = "  N=%-2d run %d %-4s direct %6.2f s" % (count, run + 1, kind, took)
            for index, (ref, root) in enumerate(baselines.items()):
                ready, _done = gpufleet(bench, bench_dir, "%s-b%d" % (label, index), dirs["baseline " + ref], root=root)
                rows["baseline %s_%s" % (ref, kind)].append(round(ready, 3))
                line += "  %s %6.2f s" % (ref, ready)
            with MachineCpu() as cpu:
                ready, done = gpufleet(bench, bench_dir, label + "-g", dirs["gpufleet"])
            rows["gpufleet_" + kind].append(round(ready, 3))
            stages["gpufleet_" + kind].append(stages_of(bench_dir, label + "-g", count, ready, cpu))
            costs.append(done)
            print(line + "  gpufleet %6.2f s (playbook %6.2f s, %5.1f CPU s)" % (ready, done.seconds, done.cpu_s),
                  flush=True)
            if kind == "cold":
                for folder in dirs.values():
                    bench.close(folder)
    result: dict = {kind: {"runs": values, "median_s": statistics.median(values)} for kind, values in rows.items()}
    for kind in ("cold", "warm"):
        result["ratio_" + kind] = result["gpufleet_" + kind]["median_s"] / result["direct_" + kind]["median_s"]
        result["extra_s_" + kind] = result["gpufleet_" + kind]["median_s"] - result["direct_" + kind]["median_s"]
        for ref in baselines:
            result["vs %s_%s" % (ref, kind)] = (result["gpufleet_" + kind]["median_s"]
                                               / result["baseline %s_%s" % (ref, kind)]["median_s"])
    result["controller"] = cost_summary(costs, count)
    result["rank_start"] = {who: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
                            for who, runs in stages.items() if runs}
    return result


def stages_of(bench_dir: str, label: str, count: int, took: float, cpu: MachineCpu) -> dict[str, float]:
    """rank_stages of one run, its invocation found back from the last rank's stamp and the time P1 measured; and
    the machine's busy CPU seconds from the invocation to the last rank's init ("cpu_s")."""
    host_dir = os.path.join(bench_dir, "stamps", label)
    ready = last_stamp(host_dir, count)
    return dict(rank_stages(host_dir, count, ready - took), cpu_s=cpu.between(ready - took, ready))


def cost_summary(runs: list[Measured], count: int) -> dict:
    cpu = statistics.median(run.cpu_s for run in runs)
    peak = max(run.peak_rss_mb for run in runs)
    return {"cpu_s": round(cpu, 2), "cpu_s_per_node": round(cpu / count, 3), "peak_rss_mb": round(peak, 1),
            "peak_rss_mb_per_node": round(peak / count, 1)}


def forks_failing_last_node(bench: Bench) -> str:
    """With forks=5, a rank failing on the last node fails train.yml naming that node (as the forks test of
    tests/cluster/test_supervision.py checks with 2 forks on 3 nodes); returns the play's error line."""
    last, count = bench.nodes[-1], len(bench.nodes)
    job = "forks5-fail-%d" % count
    finished = train(bench.cluster, job, "--forks", "5",
                     script_args="--steps 400 --fail-rank %d --fail-step 10" % (count - 1)).finish(timeout=600)
    expected = "job %s failed on %s (node_rank %d)" % (job, last, count - 1)
    if finished.rc == 0 or expected not in finished.out:
        raise SystemExit("forks=5: train.yml did not fail naming %s:\n%s" % (last, finished.out[-3000:]))
    print("  N=%-2d forks=5, a rank failing on %s: %s" % (count, last, expected), flush=True)
    return expected


# ---------------------------------------------------------------------------------------------------------------
# P2: gang stop; P3: re-provision


def p2_gang_stop(bench: Bench, runs: int, baselines: dict[str, str] | None = None) -> dict:
    """P2 of this checkout, and of each baseline's (--baseline: its train.yml ships its supervisor), alternating."""
    result = {}
    for run in range(runs):
        for ref, root in list((baselines or {}).items()) + [("", REPO)]:
            result.setdefault(ref, []).append(gang_stop_once(bench, run, ref, root))
    this = summary(result.pop(""))
    return dict(this, baselines={ref: summary(timelines) for ref, timelines in result.items()})


def summary(timelines: list[dict[str, float]]) -> dict:
    values = [timeline["gone"] for timeline in timelines]
    return {"runs": values, "median_s": statistics.median(values), "max_s": max(values),
            "timeline": {key: statistics.median(t[key] for t in timelines if key in t) for key in timelines[0]}}


def gang_stop_once(bench: Bench, run: int, ref: str, root: str) -> dict[str, float]:
    """One gang stop: the last node's rank SIGKILLed; the seconds to each step and until nothing is left ("gone")."""
    last = bench.nodes[-1]
    job = "p2-%d-%d%s" % (len(bench.nodes), run, "-" + ref[:12] if ref else "")
    background = train(bench.cluster, job, root=root)
    found = wait_training(bench.cluster, job, run=background)
    at = kill_in_node(bench.cluster, last, pid_of(found[last], "worker", rank=len(bench.nodes) - 1))
    took = wait_gone(bench.cluster, job, timeout=120) - at
    finished = background.finish(timeout=300)
    if finished.rc == 0 or last not in finished.out:
        raise SystemExit("train.yml did not fail naming %s after its rank was killed:\n%s"
                         % (last, finished.out[-3000:]))
    steps = stop_timeline({node: bench.cluster.view.job_state(node, job) or {} for node in bench.nodes}, last, at)
    print("  N=%-2d gang stop run %d%s: %.2f s (%s)" % (len(bench.nodes), run + 1, " of " + ref if ref else "", took,
                                                      ", ".join("%s %.2f" % item for item in steps.items())), flush=True)
    return dict(steps, gone=round(took, 2))


STOP_STEPS = (("noticed", "the killed rank's supervisor notices its end"),
              ("word_first", "the first peer decides to stop (the word has reached it)"),
              ("word_last", "the last peer decides to stop"),
              ("part_ended_median", "a node's part has ended (launcher and ranks gone), median node"),
              ("part_ended_last", "the last node's part has ended"),
              ("gone", "no process of the job on any node (P2)"))


def stop_timeline(states: dict[str, dict], killed: str, at: float) -> dict[str, float]:
    """Seconds from the kill to each step of the gang stop, read from every node's state.json (the supervisors'
    own times; the containers share the host's clock)."""
    steps: dict[str, float] = {}
    noticed = [when for when, what in states.get(killed, {}).get("events", []) if " ended" in what and "rank" in what]
    if noticed:
        steps["noticed"] = round(min(noticed) - at, 2)
    words = sorted(state["stop_requested_at"] - at for node, state in states.items()
                   if node != killed and isinstance(state.get("stop_requested_at"), (int, float)))
    if words:
        steps["word_first"], steps["word_last"] = round(words[0], 2), round(words[-1], 2)
    ended = sorted(state["attempts"][-1]["ended_at"] - at for state in states.values()
                   if state.get("attempts") and isinstance(state["attempts"][-1].get("ended_at"), (int, float)))
    if ended:
        steps["part_ended_median"] = round(statistics.median(ended), 2)
        steps["part_ended_last"] = round(ended[-1], 2)
    return steps


def p3_reprovision(bench: Bench) -> dict:
    """provision.yml to bring the cluster right, then a re-run: its wall time, changed count, controller CPU per node
    and task results per node (bench/provision_cost.py)."""
    measured = provision_cost.rerun(bench, 1, {"this": (REPO, {})})["this"]
    return dict(measured["rerun"], first_s=measured["first"]["seconds"], first_changed=measured["first"]["changed"])


# ---------------------------------------------------------------------------------------------------------------
# The cluster


def provisioned_image(state: str) -> str:
    """An image of a node provisioned once (then stripped of its keys), made on first use."""
    base = testbed.ensure_image()
    name = "localhost/gpufleet-bench-node:%s" % hashlib.sha256(base.encode()).hexdigest()[:12]
    if testbed.podman("image", "exists", name, check=False).returncode == 0:
        return name
    print("making %s: one node provisioned, then saved without its keys" % name, flush=True)
    info = testbed.up(os.path.join(state, "image"), 1, plain=True)
    bench = Bench(os.path.join(state, "image"), info)
    provision_cost.provision(bench)
    testbed.commit_node(0, name)
    testbed.down(os.path.join(state, "image"))
    return name


def cluster(state: str, count: int, image: str, bench_dir: str) -> Bench:
    info = testbed.up(state, count, image=image, plain=True, volumes=("%s:%s" % (bench_dir, BENCH_MOUNT),))
    return Bench(state, info)


def scale(args: argparse.Namespace, state: str, image: str) -> list[dict]:
    baseline = {ref: provision_cost.checkout(ref, state) for ref in args.baseline.split(",")} if args.baseline else {}
    rows = []
    for count in args.sizes:
        bench_dir = tempfile.mkdtemp(dir=state, prefix="bench-%d-" % count)
        os.chmod(bench_dir, 0o755)
        shutil.copy(INIT_TIMER, os.path.join(bench_dir, "init_timer.py"))
        print("N=%d: starting %d nodes" % (count, count), flush=True)
        bench = cluster(os.path.join(state, "n%d" % count), count, image, bench_dir)
        row: dict = {"nodes": count, "p3": p3_reprovision(bench)}
        if not args.only_p2:
            row["p1"] = p1_launch(bench, bench_dir, args.runs, baseline)
        row["p2"] = p2_gang_stop(bench, args.runs, baseline)
        if count == args.profile and not args.only_p2:
            profile = os.path.join(state, "profile-%d.json" % count)
            ready, _done = gpufleet(bench, bench_dir, "profile-%d" % count, bench.warm_dir, profile=profile)
            with open(profile) as handle:
                row["profile"] = dict(json.load(handle), ready_s=round(ready, 2))
        if count == args.forks_check and not args.only_p2:
            forks = Bench(bench.state, bench.info, forks=5)
            ready, done = gpufleet(forks, bench_dir, "forks5-%d" % count, forks.warm_dir)
            row["forks5"] = {"ready_s": round(ready, 2), "playbook_s": round(done.seconds, 2), "rc": done.rc,
                             "failing_last_node": forks_failing_last_node(bench)}
            print("  N=%-2d forks=5: every rank ready after %.2f s, playbook rc %d" % (count, ready, done.rc))
        rows.append(row)
        testbed.down()
    return rows


def control_path(state: str, count: int) -> dict:
    """train.yml -e launcher=none on count nodes of the base image (sshd and python3 only, no torch)."""
    print("control path: starting %d nodes (sshd only)" % count, flush=True)
    info = testbed.up(os.path.join(state, "cp%d" % count), count, plain=True)
    bench = Bench(os.path.join(state, "cp%d" % count), info)
    script = os.path.join(bench.state, "sleep_then_exit.py")
    with open(script, "w") as handle:
        handle.write("import time\ntime.sleep(2)\n")
    done = bench.playbook("train.yml", "-e", "script=%s" % script, "-e", "launcher=none", "-e",
                          "gpufleet_python=/usr/bin/python3", "-e", "job=control-path")
    testbed.down()
    print("  %d nodes, launcher=none: rc %d in %.1f s, %.1f CPU s (%.3f per node), peak %.0f MB"
          % (count, done.rc, done.seconds, done.cpu_s, done.cpu_s / count, done.peak_rss_mb), flush=True)
    if done.rc != 0:
        print(done.out[-4000:])
    return {"nodes": count, "rc": done.rc, "seconds": round(done.seconds, 2), "changed": done.changed(),
            "controller": cost_summary([done], count)}


# ---------------------------------------------------------------------------------------------------------------
# Output


def table(rows: list[dict]) -> str:
    head = ("| nodes | P1 warm: gpufleet / direct | ratio | extra | P1 cold: gpufleet / direct | ratio | "
            "P2 gang stop | P3 re-provision (changed) | P3 controller CPU per node | P3 task results per node | "
            "controller CPU per node (train.yml) | peak RSS |")
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for row in rows:
        p1, p2, p3 = row["p1"], row["p2"], row["p3"]
        lines.append("| %d | %.2f s / %.2f s | %.2f | %+.2f s | %.2f s / %.2f s | %.2f | %.2f s | %.1f s (%d) | "
                     "%.2f s | %.0f | %.2f s | %.0f MB |" % (
                         row["nodes"], p1["gpufleet_warm"]["median_s"], p1["direct_warm"]["median_s"],
                         p1["ratio_warm"], p1["extra_s_warm"], p1["gpufleet_cold"]["median_s"],
                         p1["direct_cold"]["median_s"], p1["ratio_cold"], p2["median_s"], p3["seconds"],
                         p3["changed"], p3["cpu_s_per_node"], p3["tasks_per_node"], p1["controller"]["cpu_s_per_node"], p1["controller"]["peak_rss_mb"]))
    return "\n".join(lines)


def profile_table(profile: dict, nodes: int, min_s: float = 0.1) -> str:
    """train.yml's tasks at one node count as the per-task profile recorded them (bench/callback_plugins/
    task_profile.py): each task of min_s or more on its own line, from the playbook's start, the rest summed."""
    lines = ["| train.yml at %d nodes: task | from | took |" % nodes, "| --- | --- | --- |"]
    small = [task for task in profile["tasks"] if task["seconds"] < min_s]
    for task in profile["tasks"]:
        if task["seconds"] >= min_s:
            lines.append("| %s | %.2f s | %.2f s |" % (task["name"].replace("|", "/")[:110], task["start"],
                                                     task["seconds"]))
    lines.append("| %d shorter tasks, together | | %.2f s |" % (len(small), sum(task["seconds"] for task in small)))
    if "ready_s" in profile:
        lines.append("| every rank past init_process_group | | %.2f s |" % profile["ready_s"])
    lines.append("| the whole playbook | | %.2f s |" % profile["total_s"])
    return "\n".join(lines)


def rank_start_table(row: dict) -> str:
    """When each step of rank start happened, seconds from the invocation (median over the nodes, then over the
    runs), warm SSH: the direct way beside train.yml, and what train.yml adds at each step."""
    start = row["p1"].get("rank_start") or {}
    direct, ours = start.get("direct_warm"), start.get("gpufleet_warm")
    if not direct or not ours:
        return ""
    lines = ["| %d nodes, warm SSH: step of rank start (median node) | direct | train.yml | train.yml later by |"
             % row["nodes"], "| --- | --- | --- | --- |"]
    for key, what in STAGES + (("init_last", "the last rank past init_process_group (P1)"),
                               ("cpu_s", "CPU seconds the machine spent until then (every core; nodes and controller)")):
        # (sshd's session under a warm ControlMaster predates the run: no step of it)
        if key in direct and key in ours and direct[key] >= 0:
            lines.append("| %s | %.2f s | %.2f s | %+.2f s |" % (what, direct[key], ours[key], ours[key] - direct[key]))
    return "\n".join(lines)


def stop_table(rows: list[dict]) -> str:
    """P2's steps at each node count: seconds from the kill, the median over the runs."""
    sizes = [row for row in rows if row["p2"].get("timeline")]
    if not sizes:
        return ""
    lines = ["| gang stop: step, seconds after the rank's SIGKILL | %s |" % " | ".join(
        "%d nodes" % row["nodes"] for row in sizes), "|" + " --- |" * (len(sizes) + 1)]
    for key, what in STOP_STEPS:
        lines.append("| %s | %s |" % (what, " | ".join(
            "%.2f s" % row["p2"]["timeline"][key] if key in row["p2"]["timeline"] else "-" for row in sizes)))
    for ref in sizes[0]["p2"].get("baselines") or {}:
        for key, what in STOP_STEPS:
            lines.append("| %s: %s | %s |" % (ref, what, " | ".join(
                "%.2f s" % row["p2"]["baselines"][ref]["timeline"].get(key, float("nan")) for row in sizes)))
    return "\n".join(lines)


def baseline_table(rows: list[dict], baselines: list[str]) -> str:
    lines = ["| nodes | commit | P1 warm | this / it | P1 cold | this / it |", "| --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        p1 = row["p1"]
        for ref in baselines:
            lines.append("| %d | %s | %.2f s | %.3f | %.2f s | %.3f |" % (
                row["nodes"], ref, p1["baseline %s_warm" % ref]["median_s"], p1["vs %s_warm" % ref],
                p1["baseline %s_cold" % ref]["median_s"], p1["vs %s_cold" % ref]))
        lines.append("| %d | this checkout | %.2f s | 1 | %.2f s | 1 |" % (
            row["nodes"], p1["gpufleet_warm"]["median_s"], p1["gpufleet_cold"]["median_s"]))
    return "\n".join(lines)


def plot(rows: list[dict], path: str) -> None:
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    nodes = [row["nodes"] for row in rows]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key, label, style in (("gpufleet_warm", "train.yml, warm SSH", "o-"), ("direct_warm", "direct, warm SSH", "o--"),
                              ("gpufleet_cold", "train.yml, cold SSH", "s-"), ("direct_cold", "direct, cold SSH", "s--")):
        left.plot(nodes, [row["p1"][key]["median_s"] for row in rows], style, label=label)
    left.set(title="P1: invocation to every rank past init_process_group", xlabel="nodes (1 rank each, gloo)",
             ylabel="seconds (median)", xticks=nodes)
    left.legend()
    right.plot(nodes, [row["p2"]["median_s"] for row in rows], "o-", label="P2 gang stop (SIGKILL, last node)")
    right.plot(nodes, [row["p3"]["seconds"] for row in rows], "s-", label="P3 re-provision (changed=0)")
    right.set(title="P2 and P3", xlabel="nodes", ylabel="seconds", xticks=nodes)
    right.legend()
    figure.suptitle("gpufleet at scale: container nodes on one %d-core machine" % os.cpu_count())
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,4,8,16", type=lambda text: [int(n) for n in text.split(",")])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", type=int, default=8, help="profile train.yml's tasks at this node count")
    parser.add_argument("--forks-check", type=int, default=8, help="train.yml with forks=5 at this node count")
    parser.add_argument("--control-path", type=int, default=64, help="nodes of the control-path run (0: none)")
    parser.add_argument("--baseline", help="commits (REF[,REF]) whose train.yml P1 also measures, in the same run")
    parser.add_argument("--only-p2", action="store_true",
                        help="measure only the gang stop (P2, with its steps) at each size (P3's provisioning still runs)")
    parser.add_argument("--state", default=os.path.join(REPO, ".cache", "bench-scale"))
    parser.add_argument("--json", default=os.path.join(REPO, "logs", "bench", "scale.json"))
    parser.add_argument("--png", default=os.path.join(REPO, "logs", "bench", "scale.png"))
    args = parser.parse_args()
    state = os.path.abspath(args.state)
    shutil.rmtree(state, ignore_errors=True)
    os.makedirs(state)
    testbed.prepare()
    result: dict = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(), "runs": args.runs,
                    "commit": provision_cost.git_head(), "baseline": args.baseline}
    try:
        image = provisioned_image(state)
        result["rows"] = scale(args, state, image)
        if args.control_path:
            result["control_path"] = control_path(state, args.control_path)
    finally:
        testbed.down()
    write_json(args.json, result)
    if args.only_p2:
        print("\n" + stop_table(result["rows"]))
        return 0
    print("\n" + table(result["rows"]))
    if args.baseline:
        print("\n" + baseline_table(result["rows"], args.baseline.split(",")))
    if stop_table(result["rows"]):
        print("\n" + stop_table(result["rows"]))
    for row in result["rows"]:
        if rank_start_table(row):
            print("\n" + rank_start_table(row))
    for row in result["rows"]:
        if row.get("profile"):
            print("\n" + profile_table(row["profile"], row["nodes"]))
    plot(result["rows"], args.png)
    print("\nwrote %s and %s" % (args.json, args.png))
    return 0


def write_json(path: str, result: dict) -> None:
    """A benchmark's figures as JSON at path (its folder made)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as handle:
        json.dump(result, handle, indent=2)


def machine() -> str:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
    model = ""
    try:
        with open("/proc/cpuinfo") as handle:
            model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), "")
    except OSError:
        pass
    return "%d cores (%s), %.0f GiB" % (os.cpu_count() or 0, model, memory)


if __name__ == "__main__":
    raise SystemExit(main())
