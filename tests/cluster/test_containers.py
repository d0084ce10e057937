"""train.yml, status.yml and stop.yml with a container image, for real, on the local two-node inventory with this
machine's own Podman (nested containers inside the test nodes would need privileged nodes).

The image is built here (testbed.ensure_train_image_archive): the test nodes' Debian root with torch, numpy and
scikit-learn from the wheelhouse, saved with podman save; the image itself is removed from Podman's store, so the
tests start from the archive alone, as an air-gapped cluster would. Each node's part runs in one container with
host networking (node0 on 127.0.0.1, node1 on 127.0.0.2), 2 ranks per node.

What is not covered here: the GPUs (no GPU: CDI's nvidia.com/gpu=all and Docker's --gpus all are checked as
rendered arguments in tests/unit), Docker (Podman only), and the default ulimits: this machine's Podman cannot raise
the locked-memory limit (no CAP_SYS_RESOURCE), so the tests give the machine's own limits as job_container_ulimits.
"""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
import yaml

import bounds
import testbed
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import job_processes
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control.container_images import read_archive

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
SCRIPTS = os.path.join(REPO, "tests", "integration", "scripts")
# What the nodes' engine may set here (see the module's docstring): the machine's hard limits, not unlimited.
ULIMITS = ["memlock=8192:8192", "nofile=20000:20000", "nproc=20000:20000"]
# Every rank's environment here (a test's own gpufleet_env starts from it): Gloo over loopback, and one intra-op
# thread per rank, since the "nodes" share this machine's cores (testbed.NODE_ENV).
ENV = {"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
# Seconds from a fault (or the start of stop.yml) to nothing of the job left on any node: the fault matrix's bound.
FAULT_BOUND_S = 10.0


def engine_env() -> dict:
    return dict(os.environ, CONTAINERS_CONF=testbed.CONTAINERS_CONF)


def podman(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], env=engine_env(), capture_output=True, text=True, check=check)


class LocalContainers:
    """Playbook runs on the local inventory with job folders and logs in the test's own folder; the extra vars go
    in a file (-e @file), so that no value of theirs is in an argument list."""

    def __init__(self, root, archive: str) -> None:
        self.root = root
        self.archive = archive
        self.logs = root / "logs"
        self.nodes = root / "nodes"
        self.runs = 0

    def job_dir(self, host: str, job: str):
        return self.nodes / host / "jobs" / job

    def vars(self, **extra) -> dict:
        found = {"gpufleet_jobs_dir": "%s/{{ inventory_hostname }}/jobs" % self.nodes, "gpufleet_logs_dir": str(self.logs),
                 "gpufleet_container_engine": "podman", "gpufleet_python": "python3",
                 "gpufleet_container_ulimits": ULIMITS, "gpufleet_env": ENV}
        found.update(extra)
        return {key: value for key, value in found.items() if value is not None}  # None: left to the inventory

    def playbook(self, name: str, *args: str, extra=None, inventory=None, timeout: int = 300):
        self.runs += 1
        varfile = self.root / ("vars-%d.yml" % self.runs)
        varfile.write_text(yaml.safe_dump(self.vars(**(extra or {}))))
        varfile.chmod(0o600)
        cmd = [os.path.join(BIN, "ansible-playbook"), os.path.join(REPO, "playbooks", name), "-e", "@%s" % varfile]
        if inventory:
            cmd[1:1] = ["-i", str(inventory)]
        cmd += list(args)
        env = dict(engine_env(), ANSIBLE_NOCOLOR="1", ANSIBLE_DISPLAY_SKIPPED_HOSTS="1",
                   PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
        started = time.monotonic()
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        out = done.stdout + done.stderr
        print("$ %s\n%s" % (" ".join(cmd), out[-8000:]))
        return done.returncode, out, time.monotonic() - started

    def train(self, *args: str, **kwargs):
        return self.playbook("train.yml", "-e", "container_image_archive=%s" % self.archive, *args, **kwargs)

    def containers(self, host: str, job: str) -> list[str]:
        """The containers of the job's folder on that node, running or not (podman ps --all)."""
        done = podman("ps", "--all", "--format", "{{.Names}} {{.Status}}", "--filter",
                      "label=gpufleet.job_dir=%s" % self.job_dir(host, job))
        return done.stdout.split("\n")[:-1] if done.returncode == 0 else ["podman ps failed: %s" % done.stderr]

    def leftovers(self, job: str) -> dict:
        """What of the job is left on the nodes: containers, and processes that carry its run id."""
        found = {host: self.containers(host, job) for host in ("node0", "node1")}
        spec = self.job_dir("node0", job) / "job.json"
        run_id = json.loads(spec.read_text())["run_id"] if spec.exists() else None
        found["processes"] = run_processes(run_id) if run_id else []
        return {key: value for key, value in found.items() if value}

    def states(self, job: str) -> dict:
        found = {}
        for host in ("node0", "node1"):
            path = self.job_dir(host, job) / "state.json"
            found[host] = json.loads(path.read_text()).get("state") if path.exists() else None
        return found


def run_processes(run_id: str, rank: int | None = None) -> list[int]:
    """PIDs of the live processes of the run (on both nodes, or node_rank rank's): the project's own token search."""
    ranks = (0, 1) if rank is None else (rank,)
    return sorted(pid for node_rank in ranks for pid in job_processes.run_processes("%s.%d" % (run_id, node_rank)))


def has_env(pid: int, entry: str) -> bool:
    with open("/proc/%d/environ" % pid, "rb") as handle:
        return entry.encode() in handle.read().split(b"\0")


def wait_until(predicate, timeout: float, what: str, explain=lambda: ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("%s did not happen within %.0f s; seen: %s" % (what, timeout, explain()))


@pytest.fixture(scope="module")
def image():
    archive = testbed.ensure_train_image_archive()
    image_id = read_archive(archive)["image_id"]
    podman("rmi", "--force", image_id)  # start from the archive alone
    yield archive, image_id


@pytest.fixture
def local(tmp_path, image):
    helper = LocalContainers(tmp_path, image[0])
    yield helper
    # Whatever a failed test left: the project's own stop, which removes the job's containers too.
    for job_dir in sorted(helper.nodes.glob("node0/jobs/*")):
        helper.playbook("stop.yml", "-e", "job=%s" % job_dir.name, timeout=120)


def test_the_example_trains_in_the_image_and_the_archive_is_loaded_once(local, image):
    rc, out, seconds = local.train("-e", "script=examples/train.py", "-e", "nproc_per_node=2")
    assert rc == 0, out[-3000:]
    print("first run, archive copied and loaded: %.1f s" % seconds)
    loads = re.findall(r"TASK \[gpufleet.cluster.job : Load the image archive there\].*?\n((?:\w+: \[node\d\].*\n)+)", out)
    assert loads and sorted(re.findall(r"changed: \[(node\d)\]", loads[0])) == ["node0", "node1"], loads
    for host, first_rank in (("node0", 0), ("node1", 2)):
        log = (local.logs / "train" / ("%s.log" % host)).read_text()
        assert "rank %d of world size 4" % first_rank in log and "rank %d of world size 4" % (first_rank + 1) in log
    accuracy = float(re.search(r"final test_accuracy ([0-9.]+) world_size 4", (local.logs / "train" / "node0.log")
                                .read_text()).group(1))
    assert accuracy > 0.9
    # The table names the image (with its ID) and each node's container.
    for host in ("node0", "node1"):
        assert re.search(r"^%s\s+%s\s+succeeded\s+0\s.*\(%s\)\s+gpufleet-train-n%s-" % (
            host, host[-1], image[1][:12], host[-1]), out, re.M), out[-2000:]
    spec = json.loads((local.job_dir("node1", "train") / "job.json").read_text())
    assert spec["container_image_id"] == image[1] and spec["container_engine"] == "podman"
    assert local.leftovers("train") == {}
    assert [path for host in ("node0", "node1") for path in (local.nodes / host / "images").glob("*.tar")] == []

    rc, out, seconds = local.train("-e", "script=examples/train.py", "-e", "nproc_per_node=2")
    assert rc == 0, out[-3000:]
    print("second run, image already there: %.1f s" % seconds)
    for task in ("Copy the image archive to the nodes", "Load the image archive there"):
        block = out.split(task, 1)[1].split("TASK [", 1)[0]
        assert sorted(re.findall(r"skipping: \[(node\d)\]", block)) == ["node0", "node1"], block

    rc, out, _seconds = local.playbook("status.yml", "-e", "job=train")
    assert rc == 0
    assert re.search(r"^node1\s+train\s+1\s+succeeded\s.*localhost/gpufleet-train:\w+ \(%s\)\s+gpufleet-train-n1-"
                     % image[1][:12], out, re.M), out[-2000:]


def test_a_rank_exiting_1_in_a_container_stops_every_node_within_the_bound(local):
    stamp = local.job_dir("node1", "fail_on_rank") / "failed_at"  # in the job folder: mounted in the container
    env = dict(ENV, FAIL_STAMP=str(stamp), FAIL_CODE="1", FAIL_NODE_RANK="1", FAIL_AFTER_S="2")
    rc, out, _seconds = local.train("-e", "script=%s/fail_on_rank.py" % SCRIPTS, "-e", "nproc_per_node=2",
                                    extra={"gpufleet_env": env})
    ended = time.time()
    assert rc != 0
    assert re.search(r"job fail_on_rank failed on node1 \(node_rank 1\): global rank [23] \(local rank [01]\) exited "
                     r"with code 1; container gpufleet-fail_on_rank-n1-\w+ \(image [^)]+\) exited with code 1; "
                     r"stopped on the other nodes: node0", out), out[-3000:]
    assert local.leftovers("fail_on_rank") == {}
    bounds.report("container: rank exits 1 -> play ended, nothing left", ended - float(stamp.read_text()),
                  FAULT_BOUND_S)


def test_a_rank_sigkilled_in_a_container_ends_the_job_on_every_node_within_the_bound(local):
    env = dict(ENV, FAIL_NODE_RANK="none")  # nobody fails: every rank waits
    rc, out, _seconds = local.train("-e", "script=%s/fail_on_rank.py" % SCRIPTS, "-e", "nproc_per_node=2",
                                    "-e", "wait=false", extra={"gpufleet_env": env})
    assert rc == 0, out[-3000:]
    job = "fail_on_rank"
    log1 = local.job_dir("node1", job) / "job.log"
    wait_until(lambda: log1.exists() and log1.read_text().count("ready") >= 2, 120, "the ranks of node1 ready",
               lambda: log1.read_text()[-2000:] if log1.exists() else "no log")
    run_id = json.loads((local.job_dir("node1", job) / "job.json").read_text())["run_id"]
    # Global rank 2: node1's local rank 0, a process inside node1's container, seen from the host.
    rank = [pid for pid in run_processes(run_id, 1) if has_env(pid, "LOCAL_RANK=0")]
    assert len(rank) == 1, rank
    killed_at = time.monotonic()
    os.kill(rank[0], signal.SIGKILL)
    wait_until(lambda: all(state in ("failed", "stopped") for state in local.states(job).values())
               and not local.leftovers(job), 30, "the job ended and gone on every node",
               lambda: "%s %s" % (local.states(job), local.leftovers(job)))
    bounds.report("container: rank SIGKILLed -> nothing left", time.monotonic() - killed_at, FAULT_BOUND_S)
    assert local.states(job) == {"node0": "stopped", "node1": "failed"}
    state1 = json.loads((local.job_dir("node1", job) / "state.json").read_text())
    assert state1["exit_code"] == 1 and state1["container"].startswith("gpufleet-fail_on_rank-n1-")


def test_secrets_stay_out_of_inspect_logs_and_argument_lists_and_stop_yml_ends_the_containers(local):
    secret = "s3cr3t-Container-%d" % os.getpid()
    env = dict(ENV, HOLD_S="120", EXPECTED_TOKEN_SHA256=hashlib.sha256(secret.encode()).hexdigest())
    rc, out, _seconds = local.train("-vvv", "-e", "script=%s/check_secret.py" % SCRIPTS, "-e", "job=secret",
                                    "-e", "wait=false", extra={"gpufleet_env": env,
                                                               "gpufleet_secret_env": {"API_TOKEN": secret}})
    assert rc == 0, out[-3000:]
    assert secret not in out
    for host, rank in (("node0", 0), ("node1", 1)):
        log = local.job_dir(host, "secret") / "job.log"
        wait_until(lambda: log.exists() and "token ok" in log.read_text(), 120, "the secret checked on %s" % host,
                   lambda: log.read_text()[-2000:] if log.exists() else "no log")
        assert "token ok on node_rank %d" % rank in log.read_text()
        names = [line.split()[0] for line in local.containers(host, "secret")]
        assert len(names) == 1, names
        inspect = podman("inspect", names[0], check=True).stdout
        assert "gpufleet.run_token" in inspect and secret not in inspect
    run_id = json.loads((local.job_dir("node0", "secret") / "job.json").read_text())["run_id"]
    pids = run_processes(run_id)
    assert len(pids) >= 4, pids  # podman, the launcher and a rank on each node at least
    for pid in pids:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            assert secret.encode() not in handle.read()
    started = time.monotonic()
    rc, out, _seconds = local.playbook("stop.yml", "-e", "job=secret")
    assert rc == 0 and secret not in out
    assert local.leftovers("secret") == {}
    bounds.report("container: stop.yml -> nothing left", time.monotonic() - started, FAULT_BOUND_S)
    for host in ("node0", "node1"):
        for path in local.job_dir(host, "secret").rglob("*"):
            if path.is_file() and path.name != "secret_env":
                assert secret not in path.read_text(errors="replace"), path
        assert secret not in (local.logs / "secret" / ("%s.log" % host)).read_text()


def _engine_of_its_own(root, runroot: str, host: str) -> str:
    """A podman with a store of the node's own (what two servers have), as a path the inventory names (vfs: the
    store mounts nothing; Podman wants a run root of at most 50 characters)."""
    path = root / "engines" / host / "podman"
    path.parent.mkdir(parents=True)
    path.write_text("#!/bin/sh\nexec podman --storage-driver vfs --root %s --runroot %s/%s \"$@\"\n"
                    % (root / "store" / host, runroot, host))
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def runroot():
    path = tempfile.mkdtemp(prefix="gf-run-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_two_nodes_holding_different_images_under_one_tag_are_refused_before_launch(local, runroot):
    engines = {host: _engine_of_its_own(local.root, runroot, host) for host in ("node0", "node1")}
    for host, engine in engines.items():
        content = local.root / ("content-" + host)
        content.mkdir()
        (content / "which").write_text("built for %s\n" % host)
        tar = subprocess.run(["tar", "-C", str(content), "-c", "."], capture_output=True, check=True).stdout
        subprocess.run([engine, "import", "-", "localhost/gpufleet-same:1"], input=tar, env=engine_env(),
                       capture_output=True, check=True)
    inventory = local.root / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"gpu_nodes": {
        "hosts": {"node0": {"gpufleet_cluster_address": "127.0.0.1", "gpufleet_container_engine": engines["node0"]},
                  "node1": {"gpufleet_cluster_address": "127.0.0.2", "gpufleet_container_engine": engines["node1"]}},
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}))
    rc, out, _seconds = local.playbook("train.yml", "-e", "script=examples/train.py", "-e",
                                       "container_image=localhost/gpufleet-same:1", inventory=inventory,
                                       extra={"gpufleet_container_engine": None})  # each node's own
    assert rc != 0
    held = subprocess.run([engines["node1"], "image", "inspect", "--format", "{{.Id}}", "localhost/gpufleet-same:1"],
                          env=engine_env(), capture_output=True, text=True, check=True).stdout.strip()
    assert ("container_image=localhost/gpufleet-same:1 differs between the nodes: node1 (%s) holds another image"
            % held[:12]) in out, out[-3000:]
    assert "TASK [gpufleet.cluster.job : Launch the job" not in out
    assert not local.job_dir("node0", "train").exists() and not local.job_dir("node1", "train").exists()


def test_max_restarts_launches_the_gang_again_in_fresh_containers(local):
    env = dict(ENV, FAIL_CODE="3", FAIL_NODE_RANK="1", FAIL_AFTER_S="0")
    rc, out, _seconds = local.train("-e", "script=%s/fail_on_rank.py" % SCRIPTS, "-e", "max_restarts=1",
                                    extra={"gpufleet_env": env})
    assert rc != 0
    assert re.search(r"^node1\s+1\s+failed\s+3\s+2\s", out, re.M), out[-3000:]  # two attempts, each in a container
    state1 = json.loads((local.job_dir("node1", "fail_on_rank") / "state.json").read_text())
    assert [attempt["exit_code"] for attempt in state1["attempts"]] == [1, 1]  # the container's: torchrun's 1
    assert (local.logs / "fail_on_rank" / "node1.log").read_text().count("failing on purpose") == 2
    assert local.leftovers("fail_on_rank") == {}


def test_a_container_that_outlived_its_supervisor_is_removed_by_the_next_stop(local):
    env = dict(ENV, FAIL_NODE_RANK="none")
    rc, out, _seconds = local.train("-e", "script=%s/fail_on_rank.py" % SCRIPTS, "-e", "wait=false",
                                    extra={"gpufleet_env": env})
    assert rc == 0, out[-3000:]
    job = "fail_on_rank"
    log1 = local.job_dir("node1", job) / "job.log"
    wait_until(lambda: log1.exists() and "ready" in log1.read_text(), 120, "node1's rank ready",
               lambda: log1.read_text()[-2000:] if log1.exists() else "no log")
    state = json.loads((local.job_dir("node1", job) / "state.json").read_text())
    # The supervisor frozen, its engine client killed outright, then the supervisor: nothing of gpufleet's is left
    # on node1 to end the container, which Podman's conmon keeps running.
    os.kill(state["supervisor_pid"], signal.SIGSTOP)
    os.kill(state["pid"], signal.SIGKILL)
    os.kill(state["supervisor_pid"], signal.SIGKILL)
    time.sleep(1)
    running = local.containers("node1", job)
    assert len(running) == 1 and " Up " in " %s " % running[0], running
    rc, out, _seconds = local.playbook("stop.yml", "-e", "job=%s" % job)
    assert rc == 0, out[-3000:]
    assert local.leftovers(job) == {}
