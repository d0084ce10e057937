"""The container cluster as tests and benchmarks drive it: playbooks run against its inventory, in the
foreground or the background, and its nodes seen from the host (hostview.py)."""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import testinfra
import yaml

import hostview
import testbed

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BIN = os.path.dirname(sys.executable)


@dataclass
class PlaybookRun:
    rc: int
    out: str
    seconds: float

    def recap(self) -> dict:
        return recap(self.out)


def recap(out: str) -> dict:
    """host -> {ok, changed, unreachable, failed, ...} from a playbook output's PLAY RECAP."""
    found = {}
    for host, counts in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", out, re.M):
        found[host] = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", counts)}
    return found


class Cluster:
    def __init__(self, info: dict, state: str) -> None:
        self.info = info
        self.state = state
        self.inventory = info["inventory"]
        self.nodes = info["nodes"]
        self.addresses = dict(zip(info["nodes"], info["addresses"]))
        self.view = hostview.HostView(dict(zip(info["nodes"], info["containers"])))

    def with_spare(self, spare: str) -> str:
        """The cluster's inventory with ``spare`` moved from gpu_nodes to gpu_spares (the other nodes are the job's);
        the path of that inventory, in the cluster's state folder."""
        with open(self.inventory) as handle:
            inventory = yaml.safe_load(handle)
        nodes = inventory["gpu_nodes"]
        inventory["gpu_spares"] = {"hosts": {spare: nodes["hosts"].pop(spare)}, "vars": dict(nodes["vars"])}
        path = os.path.join(self.state, "spare-%s-hosts.yml" % spare)
        with open(path, "w") as handle:
            yaml.safe_dump(inventory, handle)
        return path

    def host(self, node: str):
        return testinfra.get_host("ansible://%s?ansible_inventory=%s" % (node, self.inventory))

    def playbook(self, name: str, *args: str, timeout: int = 900, fresh_connections: bool = True,
                 inventory: str | None = None) -> PlaybookRun:
        cmd = [os.path.join(BIN, "ansible-playbook"), "-i", inventory or self.inventory,
               os.path.join(REPO, "playbooks", name), *args]
        # The tests read every task's outcome, skipped ones too (the checkout's ansible.cfg hides those from users).
        env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
                   ANSIBLE_DISPLAY_SKIPPED_HOSTS="1", PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
        if fresh_connections:
            # New SSH connections: a persistent master from an earlier run would still reach a node whose sshd
            # was stopped, through its already open session, and one to a node that a test cut off or
            # restarted may hang.
            env["ANSIBLE_SSH_CONTROL_PATH_DIR"] = tempfile.mkdtemp(dir=self.state, prefix="cp-")
        started = time.monotonic()
        try:
            done = subprocess.run(cmd, cwd=self.state, env=env, capture_output=True, text=True, timeout=timeout,
                                  check=False)
        except subprocess.TimeoutExpired as exc:
            seen = "".join(part.decode(errors="replace") if isinstance(part, bytes) else part or ""
                           for part in (exc.stdout, exc.stderr))
            raise AssertionError("%s did not end within %d s; its output so far:\n%s"
                                 % (" ".join(cmd), timeout, seen[-6000:])) from None
        out = done.stdout + done.stderr
        print("$ %s\n%s" % (" ".join(cmd), out[-6000:]))
        return PlaybookRun(done.returncode, out, time.monotonic() - started)

    def start_playbook(self, name: str, *args: str, log_name: str = "playbook.log",
                       inventory: str | None = None, root: str = REPO) -> "Background":
        """ansible-playbook in the background, in its own session (as a terminal's foreground job is); of the
        checkout at root (a benchmark's baseline: bench/scale.py), this one by default."""
        cmd = [os.path.join(BIN, "ansible-playbook"), "-i", inventory or self.inventory,
               os.path.join(root, "playbooks", name), *args]
        env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_CONFIG=os.path.join(root, "ansible.cfg"),
                   ANSIBLE_DISPLAY_SKIPPED_HOSTS="1", PATH=BIN + os.pathsep + os.environ.get("PATH", ""),
                   PYTHONUNBUFFERED="1", ANSIBLE_SSH_CONTROL_PATH_DIR=tempfile.mkdtemp(dir=self.state, prefix="cp-"))
        path = os.path.join(self.state, log_name)
        handle = open(path, "w")  # pylint: disable=consider-using-with
        proc = subprocess.Popen(cmd, cwd=self.state, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                start_new_session=True)
        return Background(proc, path, handle)

    def node_exec(self, node: str, *command: str, check: bool = False) -> subprocess.CompletedProcess:
        """A command in the node through podman (not SSH): for breaking and inspecting nodes."""
        return testbed.podman("exec", testbed.PREFIX + node, *command, check=check)

    def stop_sshd(self, node: str) -> None:
        testbed.stop_sshd(self.nodes.index(node))

    def start_sshd(self, node: str) -> None:
        testbed.start_sshd(self.nodes.index(node))


def bench_cluster(state: str, reuse: bool) -> "Cluster":
    """The 3-node cluster a benchmark runs on: the one a --keep run left in state (reuse), else a fresh one with what a
    job needs provisioned (etc_hosts, ssh_mesh, nccl_env, python_env)."""
    recorded = os.path.join(state, "testbed.json")
    if reuse and os.path.exists(recorded):
        with open(recorded) as handle:
            return Cluster(json.load(handle), state)
    cluster = Cluster(testbed.up(state, 3), state)
    done = cluster.playbook("provision.yml", "--tags", "etc_hosts,ssh_mesh,nccl_env,python_env")
    if done.rc != 0:
        raise RuntimeError("provision.yml failed:\n%s" % done.out[-3000:])
    return cluster


class Background:
    """A playbook running in the background."""

    def __init__(self, proc: subprocess.Popen, path: str, handle) -> None:
        self.proc, self.path, self.handle = proc, path, handle

    def output(self) -> str:
        with open(self.path) as handle:
            return handle.read()

    def finish(self, timeout: float = 300) -> PlaybookRun:
        started = time.monotonic()
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
            self.handle.close()
            raise AssertionError("the playbook did not end within %.0f s (now killed); its output so far:\n%s"
                                 % (timeout, self.output()[-6000:])) from None
        self.handle.close()
        out = self.output()
        print("$ (background) ansible-playbook\n%s" % out[-6000:])
        return PlaybookRun(rc, out, time.monotonic() - started)
