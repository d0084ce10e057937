"""The launchers on the 3-node container cluster: mpirun, DeepSpeed, a platform script, the rank manifest.

horovodrun is not run here (Horovod does not build in this environment); its command is checked in
tests/unit/plugins/module_utils/test_launchers.py.
"""

import hashlib
import os
import re

import pytest
import yaml

import testbed
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._postmortem.rank_lines import rank_of
from jobfaults import probe_all, wait_gone

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "scripts")


@pytest.fixture(autouse=True)
def _cluster_ready(provisioned):
    return provisioned


def train(cluster, job, launcher, *extra, script="contract_check.py", nproc=2):
    return cluster.playbook("train.yml", "-e", "script=%s/%s" % (SCRIPTS, script), "-e", "job=%s" % job,
                            "-e", "launcher=%s" % launcher, "-e", "nproc_per_node=%d" % nproc, *extra, timeout=600)


def node_log(cluster, job, node):
    with open(os.path.join(cluster.state, "logs", job, "%s.log" % node)) as handle:
        return handle.read()


def ok_lines(text):
    return sorted((int(r), int(w), int(n), int(lr)) for r, w, n, lr in
                  re.findall(r"ok rank (\d+) of (\d+) on node (\d+) local (\d+) sum 21", text))


def tags(text):
    """(the rank its tag names, the rank it says it is) for each rank's 'ok rank' line of a node's log."""
    return sorted((rank_of(line), int(found.group(1))) for line in text.splitlines()
                  for found in [re.search(r"ok rank (\d+) of", line)] if found)


def rank_file_ok_lines(cluster, job, rank):
    """The 'ok rank' lines of logs/<job>/ranks/rank<rank>.log, where the report put the rank's lines untagged."""
    with open(os.path.join(cluster.state, "logs", job, "ranks", "rank%d.log" % rank)) as handle:
        return [line for line in handle.read().splitlines() if "ok rank" in line]


def test_torchrun_tags_every_line_of_a_rank_with_its_global_and_local_rank(cluster):
    """Two ranks a node: each 'ok rank R ... local L' line in the node's log begins with [rankR|L]: ; the launcher's
    own lines are not tagged; the report splits the fetched logs into logs/<job>/ranks/rank<R>.log."""
    run = train(cluster, "ds-torchrun", "torchrun")
    assert run.rc == 0, run.out[-4000:]
    for node_rank, node in enumerate(cluster.nodes):
        log = node_log(cluster, "ds-torchrun", node)
        assert tags(log) == [(2 * node_rank + local, 2 * node_rank + local) for local in (0, 1)], log[-3000:]
        for local in (0, 1):
            rank = 2 * node_rank + local
            assert "[rank%d|%d]: ok rank %d of 6 on node %d local %d" % (rank, local, rank, node_rank, local) in log
            assert rank_file_ok_lines(cluster, "ds-torchrun", rank) == [
                "ok rank %d of 6 on node %d local %d sum 21" % (rank, node_rank, local)]
        assert all(rank_of(line) is None for line in log.splitlines() if line.startswith("[gpufleet]"))
        assert "is deprecated" not in log  # the flight recorder's variables by the names this torch reads
    assert "Each rank's lines, untagged: " in run.out and "ranks/rank<N>.log (6 ranks)" in run.out, run.out[-3000:]


def test_mpirun_runs_every_rank_over_the_hostfile_with_the_contract(cluster):
    run = train(cluster, "ds-mpirun", "mpirun")
    assert run.rc == 0, run.out[-4000:]
    # mpirun on node 0 collects every rank's output; ranks fill each node's 2 slots in hostfile order.
    assert ok_lines(node_log(cluster, "ds-mpirun", "node0")) == [(r, 6, r // 2, r % 2) for r in range(6)]
    # Open MPI's --tag-output: [<job>,<rank>]<stdout>: before each rank's line, the rank the right one.
    assert tags(node_log(cluster, "ds-mpirun", "node0")) == [(r, r) for r in range(6)]
    assert rank_file_ok_lines(cluster, "ds-mpirun", 5) == ["ok rank 5 of 6 on node 2 local 1 sum 21"]
    for node in ("node1", "node2"):
        assert "takes part through node 0's mpirun" in node_log(cluster, "ds-mpirun", node)


def test_mpirun_a_failing_rank_fails_the_job_and_leaves_nothing(cluster):
    run = train(cluster, "ds-mpirun-fail", "mpirun", "-e", "script_args='--fail-rank 4 --steps 300'")
    assert run.rc != 0
    # Rank 4 exits 3, or aborts on its way out (gloo's threads at exit: SIGABRT); mpirun reports either.
    assert "job ds-mpirun-fail failed on node0 (node_rank 0): global rank 4 (local rank 0 on node2)" in run.out
    assert "rank 4 fails on purpose" in node_log(cluster, "ds-mpirun-fail", "node0")
    wait_gone(cluster, "ds-mpirun-fail", timeout=10)
    assert not any(found["processes"] for found in probe_all(cluster, "ds-mpirun-fail").values())


def test_deepspeed_runs_each_nodes_part_with_gpufleets_node_rank_and_its_ranks_lines_are_tagged(cluster):
    run = train(cluster, "ds-deepspeed", "deepspeed")
    assert run.rc == 0, run.out[-4000:]
    for node_rank, node in enumerate(cluster.nodes):
        lines = ok_lines(node_log(cluster, "ds-deepspeed", node))
        assert lines == [(2 * node_rank + local, 6, node_rank, local) for local in (0, 1)], lines
        # Each rank's file (DeepSpeed's --enable_each_rank_log) copied into the node's log by the supervisor, tagged.
        assert tags(node_log(cluster, "ds-deepspeed", node)) == [(2 * node_rank + local,) * 2 for local in (0, 1)]
        for local in (0, 1):
            rank = 2 * node_rank + local
            assert "[rank%d|%d]: ok rank %d of 6 on node %d local %d" % (rank, local, rank, node_rank, local) in \
                node_log(cluster, "ds-deepspeed", node)
            assert rank_file_ok_lines(cluster, "ds-deepspeed", rank) == [
                "ok rank %d of 6 on node %d local %d sum 21" % (rank, node_rank, local)]


def test_a_platform_script_reading_only_mlp_variables_runs_unchanged(cluster):
    run = train(cluster, "ds-platform", "none", script="mlp_platform.py", nproc=1)
    assert run.rc == 0, run.out[-4000:]
    for rank, node in enumerate(cluster.nodes):
        assert "platform script: worker %d of 3, sum 6" % rank in node_log(cluster, "ds-platform", node)


def test_the_rank_manifest_is_byte_identical_on_every_node_and_across_runs(cluster):
    digests = []
    for _attempt in range(2):
        run = train(cluster, "ds-manifest", "torchrun", nproc=1)
        assert run.rc == 0, run.out[-4000:]
        for node in cluster.nodes:
            data = cluster.node_exec(node, "cat", "/root/.gpufleet/jobs/ds-manifest/ranks.json", check=True).stdout
            digests.append(hashlib.sha256(data).hexdigest())
    assert len(digests) == 6 and len(set(digests)) == 1


def test_the_exported_mpijob_launcher_runs_every_rank_with_the_contract_as_the_operator_runs_it(cluster):
    """export.yml's MPIJob, its launcher's script run as the MPI Operator runs it: on a launcher (node0 here) with the
    manifest's environment, the operator's hostfile (one "<worker> slots=2" line per worker, the test cluster's
    addresses in place of the pods' names, at the operator's /etc/mpi/hostfile path) and sshd on every worker; the
    real Open MPI starts the ranks and each checks the contract (RANK, LOCAL_RANK, WORLD_SIZE, NODE_RANK, MASTER_ADDR
    at the first worker) and all-reduces across the nodes (gloo). The ranks find python through the launcher's PATH,
    which mpirun forwards. Not checked: the operator itself, its pods and its DNS names (no Kubernetes here)."""
    dest = os.path.join(cluster.state, "contract-mpijob.yaml")
    script = "/tmp/gpufleet-mpijob/contract_check.py"
    run = cluster.playbook("export.yml", "-e", "script=%s" % script, "-e", "format=mpijob", "-e", "launcher=mpirun",
                           "-e", "nproc_per_node=2", "-e", "gpus_per_node=0", "-e", "job=contract",
                           "-e", "container_image=registry.example/none:1", "-e", "dest=%s" % dest)
    assert run.rc == 0, run.out[-3000:]
    with open(dest) as handle:
        launcher = yaml.safe_load(handle)["spec"]["mpiReplicaSpecs"]["Launcher"]
    (container,) = launcher["template"]["spec"]["containers"]
    hostfile = "".join("%s slots=2\n" % cluster.addresses[node] for node in cluster.nodes)
    for node in cluster.nodes:
        cluster.node_exec(node, "mkdir", "-p", "/tmp/gpufleet-mpijob", "/etc/mpi", check=True)
        testbed.podman("cp", os.path.join(SCRIPTS, "contract_check.py"),
                       "%s%s:%s" % (testbed.PREFIX, node, script), check=True)
    cluster.node_exec("node0", "sh", "-c", "cat > /etc/mpi/hostfile <<'END'\n%sEND\n" % hostfile, check=True)
    env = ["%s=%s" % (item["name"], item["value"]) for item in container["env"] if "value" in item]
    try:
        done = cluster.node_exec("node0", "env", "PATH=/opt/gpufleet/venv/bin:/usr/sbin:/usr/bin:/sbin:/bin", *env,
                                 *container["command"])
        out = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
        assert done.returncode == 0, out[-4000:]
        assert ok_lines(out) == [(r, 6, r // 2, r % 2) for r in range(6)], out[-4000:]
        assert "[gpufleet] job contract: 6 ranks on %s, rendezvous %s:29500" % (
            ",".join(cluster.addresses[node] for node in cluster.nodes), cluster.addresses["node0"]) in out
    finally:
        cluster.node_exec("node0", "rm", "-rf", "/etc/mpi")
