"""The container cluster for the multi-node tests: up once per session, torn down at the end even when tests fail."""

import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import pytest
import testinfra

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BIN = os.path.dirname(sys.executable)
sys.path.insert(0, HERE)

import bounds  # noqa: E402  pylint: disable=wrong-import-position
import testbed  # noqa: E402  pylint: disable=wrong-import-position

NODES = 3


def pytest_terminal_summary(terminalreporter):
    """The bounds the fault-injection tests measured, whether or not they held."""
    if bounds.MEASURED:
        terminalreporter.section("bounds measured on the container cluster")
        for what, seconds, limit in bounds.MEASURED:
            terminalreporter.write_line("%-72s %5.1f s  (limit %.0f s)" % (what, seconds, limit))
OWN_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGdwdWZsZWV0LXRlc3QtdXNlcnMtb3duLWtleS0wMDAwMDA0 user-own-key"


@dataclass
class PlaybookRun:
    rc: int
    out: str
    seconds: float

    def recap(self) -> dict:
        """host -> {ok, changed, unreachable, failed, ...} from the PLAY RECAP."""
        found = {}
        for host, counts in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", self.out, re.M):
            found[host] = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", counts)}
        return found


class Cluster:
    def __init__(self, info: dict, state: str) -> None:
        self.info = info
        self.state = state
        self.inventory = info["inventory"]
        self.nodes = info["nodes"]
        self.addresses = dict(zip(info["nodes"], info["addresses"]))

    def host(self, node: str):
        return testinfra.get_host("ansible://%s?ansible_inventory=%s" % (node, self.inventory))

    def playbook(self, name: str, *args: str, timeout: int = 900, fresh_connections: bool = True,
                 inventory: str | None = None) -> PlaybookRun:
        cmd = [os.path.join(BIN, "ansible-playbook"), "-i", inventory or self.inventory,
               os.path.join(REPO, "playbooks", name), *args]
        env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
                   PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
        if fresh_connections:
            # New SSH connections: a persistent master from an earlier run would still reach a node whose sshd
            # was stopped, through its already open session, and one to a node that a test cut off or
            # restarted may hang.
            env["ANSIBLE_SSH_CONTROL_PATH_DIR"] = tempfile.mkdtemp(dir=self.state, prefix="cp-")
        started = time.monotonic()
        done = subprocess.run(cmd, cwd=self.state, env=env, capture_output=True, text=True, timeout=timeout,
                              check=False)
        out = done.stdout + done.stderr
        print("$ %s\n%s" % (" ".join(cmd), out[-6000:]))
        return PlaybookRun(done.returncode, out, time.monotonic() - started)

    def start_playbook(self, name: str, *args: str, log_name: str = "playbook.log") -> "Background":
        """ansible-playbook in the background, in its own session (as a terminal's foreground job is)."""
        cmd = [os.path.join(BIN, "ansible-playbook"), "-i", self.inventory, os.path.join(REPO, "playbooks", name),
               *args]
        env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
                   PATH=BIN + os.pathsep + os.environ.get("PATH", ""), PYTHONUNBUFFERED="1",
                   ANSIBLE_SSH_CONTROL_PATH_DIR=tempfile.mkdtemp(dir=self.state, prefix="cp-"))
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


class Background:
    """A playbook running in the background."""

    def __init__(self, proc: subprocess.Popen, path: str, handle) -> None:
        self.proc, self.path, self.handle = proc, path, handle

    def output(self) -> str:
        with open(self.path) as handle:
            return handle.read()

    def finish(self, timeout: float = 300) -> PlaybookRun:
        started = time.monotonic()
        rc = self.proc.wait(timeout=timeout)
        self.handle.close()
        out = self.output()
        print("$ (background) ansible-playbook\n%s" % out[-6000:])
        return PlaybookRun(rc, out, time.monotonic() - started)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    state = str(tmp_path_factory.mktemp("cluster"))
    try:
        info = testbed.up(state, NODES)
        yield Cluster(info, state)
    finally:
        testbed.down()


@pytest.fixture(scope="session")
def provisioned(cluster):
    """provision.yml run three times: converge, again (idempotence), then --check --diff."""
    for node in cluster.nodes:
        # A key the user had before gpufleet: it must survive provisioning.
        cluster.node_exec(node, "sh", "-c", "echo '%s' >> /root/.ssh/authorized_keys" % OWN_KEY, check=True)
    runs = {
        "converge": cluster.playbook("provision.yml"),
        "idempotence": cluster.playbook("provision.yml"),
        "check": cluster.playbook("provision.yml", "--check", "--diff"),
    }
    return runs
