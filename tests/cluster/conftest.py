"""The container cluster for the multi-node tests: up once per session, torn down at the end even when tests fail."""

import os
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bounds  # noqa: E402  pylint: disable=wrong-import-position
import testbed  # noqa: E402  pylint: disable=wrong-import-position
from harness import REPO, Cluster  # noqa: E402,F401  pylint: disable=wrong-import-position

NODES = 3


def pytest_terminal_summary(terminalreporter):
    """The bounds the fault-injection tests measured, whether or not they held."""
    if bounds.MEASURED:
        terminalreporter.section("bounds measured on the container cluster")
        for what, seconds, limit in bounds.MEASURED:
            terminalreporter.write_line("%-72s %5.1f s  (limit %.0f s)" % (what, seconds, limit))


# pytest-timeout's bound (pyproject.toml: 600 s) covers a test's fixtures too, and the first test of the session cluster
# pays for its three provision.yml runs (about 7 minutes on an idle CI machine; more than 10 on a loaded one, where a
# CI run timed out in that setup, 97 tests erring), as the first test of a module with nodes of its own pays for
# starting and provisioning them. Cluster tests get twice the bound; each playbook run keeps its own
# (harness.Cluster.playbook: 900 s) and says what it saw when it passes it. Every test of this folder: not all carry
# the cluster mark (test_bad_inputs.py, the first to ask for the session cluster, does not).
CLUSTER_TEST_TIMEOUT = 1200


def pytest_collection_modifyitems(items):
    for item in items:
        if str(item.path).startswith(HERE + os.sep) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(CLUSTER_TEST_TIMEOUT))


OWN_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGdwdWZsZWV0LXRlc3QtdXNlcnMtb3duLWtleS0wMDAwMDA0 user-own-key"


KEYRING_SOURCE = (
    "cp /nvidia-repo/debian12/x86_64/3bf863cc.pub /usr/share/keyrings/cuda-archive-keyring.asc && "
    "echo 'deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.asc] file:///nvidia-repo/debian12/x86_64/ /' "
    "> /etc/apt/sources.list.d/cuda-debian12-x86_64.list")
RENDEZVOUS_PORTS = range(29500, 30000)


@pytest.fixture(autouse=True)
def _known_state(request):
    """Each cluster test starts with no process of any job on any node and the rendezvous ports free, and leaves
    it so: a test that leaves a job's process behind fails in its teardown, showing what it left. The fleet's
    history the playbooks keep on the controller (logs/history.jsonl) is each test's own: the faults one test
    injects (a stand-in GPU's XID, a port set down) are recorded there, and must not quarantine a node for the
    next."""
    if "own_nodes_state" in request.fixturenames:  # a module's own nodes: its history is each test's own too
        yield
        _forget_history(request.getfixturevalue("own_nodes_state"))
        return
    if "cluster" not in request.fixturenames:
        yield
        return
    cluster = request.getfixturevalue("cluster")
    _settle(cluster, "before %s" % request.node.name)
    yield
    _forget_history(cluster.state)
    _settle(cluster, "after %s" % request.node.name, wait_s=20)


def _forget_history(state: str) -> None:
    history = os.path.join(state, "logs", "history.jsonl")
    if os.path.exists(history):
        os.remove(history)


def _settle(cluster, when: str, wait_s: float = 0) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        left = cluster.view.processes()
        ports = {node: [p for p in cluster.view.listening_ports(node) if p in RENDEZVOUS_PORTS]
                 for node in cluster.nodes}
        busy = {node: found for node, found in ports.items() if found}
        if (not left and not busy) or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if not left and not busy:
        return
    jobs = sorted({p["job"] for p in left})
    seen = "\n".join(cluster.view.describe(job) for job in jobs)
    for process in left:  # by PID, each found by its job's environment or supervisor path: never by name
        try:
            os.kill(process["pid"], 9)
        except OSError:
            pass
    # Until they are gone and their ports closed, so that the next test starts clean (this one fails, not the next).
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (cluster.view.processes() or any(
            p in RENDEZVOUS_PORTS for node in cluster.nodes for p in cluster.view.listening_ports(node))):
        time.sleep(0.2)
    pytest.fail("%s: processes of earlier jobs were left on the nodes (now killed): %s; rendezvous ports in use: %s"
                "\n%s" % (when, ["%(node)s pid %(pid)d %(kind)s of %(job)s" % p for p in left], busy, seen))


# `make test` keeps the provisioned cluster for molecule's verifiers (the molecule stage), so provisioning runs
# once: it names the folder of the cluster's state here, and takes the cluster down itself afterwards.
KEEP_VAR = "GPUFLEET_TESTBED_KEEP"
NO_SESSION_CLUSTER_VAR = "GPUFLEET_TESTBED_NO_SESSION_CLUSTER"


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    if os.environ.get(NO_SESSION_CLUSTER_VAR):
        # scripts/cluster-streams.sh's own-nodes stream runs beside the stream that owns the session cluster:
        # starting it here would remove that stream's nodes under its tests.
        pytest.fail("this run may not start the session cluster (%s is set): move the test to a module of the "
                    "session cluster's stream, or out of OWN_NODES_MODULES in scripts/cluster-streams.sh"
                    % NO_SESSION_CLUSTER_VAR)
    kept = os.environ.get(KEEP_VAR)
    state = os.path.abspath(kept) if kept else str(tmp_path_factory.mktemp("cluster"))
    try:
        info = testbed.up(state, NODES)
        yield Cluster(info, state)
    finally:
        if not kept:
            testbed.down()


@pytest.fixture(scope="session")
def own_nodes_state(tmp_path_factory):
    """The state folder (keys, inventories, the playbooks' logs and fleet history) of the nodes a module starts for
    itself (Slurm's, the systemd node, the bare nodes): not the session cluster's, so that those modules need not
    start it (each runs alone with its own nodes only). Each module removes its own nodes."""
    return str(tmp_path_factory.mktemp("own-nodes"))


@pytest.fixture(scope="session")
def provisioned(cluster):
    """provision.yml run three times: converge, again (idempotence), then --check --diff."""
    for node in cluster.nodes:
        # A key the user had before gpufleet: it must survive provisioning.
        cluster.node_exec(node, "sh", "-c", "echo '%s' >> /root/.ssh/authorized_keys" % OWN_KEY, check=True)
    # NVIDIA's repository already configured on node0 as the cuda-keyring package does it (its own source file and
    # key): with gpufleet's source beside it, `apt update` would fail ("Conflicting values set for option Signed-By").
    cluster.node_exec("node0", "sh", "-c", KEYRING_SOURCE, check=True)
    runs = {
        "converge": cluster.playbook("provision.yml"),
        "idempotence": cluster.playbook("provision.yml"),
        "check": cluster.playbook("provision.yml", "--check", "--diff"),
    }
    return runs
