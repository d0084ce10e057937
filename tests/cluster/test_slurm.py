"""Slurm from provision.yml (-e slurm_enabled=true --tags slurm) on three container nodes whose init is systemd,
with Debian's own packages (munge, slurmd, slurmctld, slurm-client): converge, idempotence, check mode, every node
idle in sinfo, a job step across all three, one MUNGE key everywhere. Two of the nodes call themselves something
other than their inventory name (Slurm's NodeHostname). What this does not check: GPUs (there are none here; the
Gres and gres.conf lines are unit-tested in tests/unit/plugins/plugin_utils/test_slurm_conf.py) and EL's packages (its
paths and package names are rendered and unit-tested there)."""

import hashlib

import pytest

import testbed
from harness import Cluster

ARGS = ("-e", "slurm_enabled=true", "--tags", "slurm")


@pytest.fixture(scope="module")
def slurm_cluster(cluster):
    info = testbed.start_nodes(cluster.state, list(testbed.SLURM_NODES), name="slurm.yml")
    try:
        yield Cluster(info, cluster.state)
    finally:
        testbed.remove_nodes(list(testbed.SLURM_NODES))


@pytest.fixture(scope="module")
def slurm_runs(slurm_cluster):
    # Bad input first, on untouched nodes: refused before anything is changed.
    refused = slurm_cluster.playbook("provision.yml", *ARGS, "-e", "slurm_controller=node99")
    runs = {"refused": refused}
    # Check mode on nodes that have none of Slurm's packages yet: it says what it would do and changes nothing.
    runs["check_first"] = slurm_cluster.playbook("provision.yml", *ARGS, "--check")
    runs["check_first"].slurmd_installed = [
        node for node in slurm_cluster.nodes
        if slurm_cluster.node_exec(node, "dpkg-query", "--show", "slurmd").returncode == 0]
    runs["converge"] = slurm_cluster.playbook("provision.yml", *ARGS)
    runs["idempotence"] = slurm_cluster.playbook("provision.yml", *ARGS)
    runs["check"] = slurm_cluster.playbook("provision.yml", *ARGS, "--check", "--diff")
    return runs


def _sinfo(slurm_cluster):
    head = slurm_cluster.nodes[0]
    return slurm_cluster.node_exec(head, "sinfo", "--noheader", "--Node", "--format", "%N %T").stdout.decode()


def test_a_controller_outside_the_group_is_refused_before_anything_changes(slurm_cluster, slurm_runs):
    refused = slurm_runs["refused"]
    assert refused.rc != 0
    assert "slurm_controller=\"node99\" must be one of the hosts of slurm_group=gpu_nodes (node7, node8, node9)" \
        in refused.out
    assert all(counts["changed"] == 0 for counts in refused.recap().values()), refused.recap()


def test_check_mode_on_fresh_nodes_reports_the_install_and_changes_nothing(slurm_cluster, slurm_runs):
    run = slurm_runs["check_first"]
    assert run.rc == 0, run.out[-4000:]
    assert all(run.recap()[node]["changed"] > 0 for node in slurm_cluster.nodes), run.recap()
    assert "would install munge, slurmd, slurm-client, slurmctld" in run.out
    assert run.slurmd_installed == [], "check mode installed slurmd on %s" % run.slurmd_installed


def test_converge_then_nothing_changes_and_check_mode_agrees(slurm_runs):
    assert slurm_runs["converge"].rc == 0, slurm_runs["converge"].out[-4000:]
    assert any(counts["changed"] for counts in slurm_runs["converge"].recap().values())
    for name in ("idempotence", "check"):
        run = slurm_runs[name]
        assert run.rc == 0, run.out[-4000:]
        assert all(counts["changed"] == 0 for counts in run.recap().values()), (name, run.recap())


def test_every_node_is_idle_and_a_step_runs_on_all_three(slurm_cluster, slurm_runs):
    assert slurm_runs["converge"].rc == 0
    assert sorted(_sinfo(slurm_cluster).split("\n")[:-1]) == ["node7 idle", "node8 idle", "node9 idle"], \
        _sinfo(slurm_cluster)
    step = slurm_cluster.node_exec("node8", "srun", "--nodes=3", "--ntasks-per-node=1", "--label", "hostname")
    assert step.returncode == 0, step.stderr.decode()
    assert sorted(step.stdout.decode().split()) == sorted(["0:", "1:", "2:", "head-a07", "gpu-b08", "node9"])


def test_slurm_conf_names_each_node_as_the_inventory_does_and_as_it_calls_itself(slurm_cluster, slurm_runs):
    assert slurm_runs["converge"].rc == 0
    text = slurm_cluster.node_exec("node9", "cat", "/etc/slurm/slurm.conf").stdout.decode()
    assert "SlurmctldHost=head-a07(%s)" % slurm_cluster.addresses["node7"] in text
    assert "NodeName=node8 NodeHostname=gpu-b08 NodeAddr=%s " % slurm_cluster.addresses["node8"] in text
    assert "NodeName=node9 NodeAddr=%s " % slurm_cluster.addresses["node9"] in text
    assert "PartitionName=gpufleet Nodes=node7,node8,node9 Default=YES" in text


def test_one_munge_key_owner_only_on_every_node_and_never_printed(slurm_cluster, slurm_runs):
    assert slurm_runs["converge"].rc == 0
    keys = {}
    for node in slurm_cluster.nodes:
        key = slurm_cluster.node_exec(node, "cat", "/etc/munge/munge.key").stdout
        mode = slurm_cluster.node_exec(node, "stat", "-c", "%a %U", "/etc/munge/munge.key").stdout.decode().split()
        assert mode == ["400", "munge"], (node, mode)
        keys[node] = hashlib.sha256(key).hexdigest()
        for run in slurm_runs.values():
            assert key.strip().decode() not in run.out
    assert len(set(keys.values())) == 1, keys
