"""health.yml on the local two-node inventory: every node checked as a launch's gate checks it, each check and each
hardware finding recorded in the fleet's history, once for as long as it stands; the launch's gate records its own
findings there too; a node that keeps failing is quarantined, and train.yml refuses it.

There is no GPU or InfiniBand port here: the network port that is down is a /sys/class/infiniband tree in the
kernel's formats (tests/fixtures/sysfs_infiniband, hand-made, its sources named there) under gpufleet_sys_root, and
NCCL_IB_HCA names it in an environment file as the nccl_env role writes one. The GPU faults' path is the same
writer's (unit tests: test_health_check.py, on real nvidia-smi captures)."""

import json
import os
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO) + "/tests/unit/plugins/plugin_utils")
from test_port_health import tree  # noqa: E402

pytestmark = pytest.mark.integration


def records(local):
    path = local.logs / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def port_down(tmp_path):
    """gpufleet_sys_root and gpufleet_env_files (as JSON) for nodes whose NCCL_IB_HCA names a port that is down."""
    env = tmp_path / "nccl.env"
    env.write_text("NCCL_IB_HCA==mlx5_0:1,mlx5_2:1\n")
    return ["-e", "gpufleet_sys_root=%s" % tree(tmp_path / "sys"),
            "-e", json.dumps({"gpufleet_env_files": [str(env)]})]


def metrics(local, node, name):
    """A node's metrics file as its node exporter would read it: {'name{labels}': value}."""
    path = local.nodes / node / "metrics" / name
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in path.read_text().splitlines()
            if line and not line.startswith("#")}


def test_health_records_each_check_and_a_standing_fault_once_and_quarantine_follows(local, tmp_path):
    # node0 has a node exporter's textfile folder (monitor.yml's), node1 none: it gets no metrics, and no error.
    (local.nodes / "node0" / "metrics").mkdir(parents=True)
    exporter = ("-e", "gpufleet_metrics_dir=%s/{{ inventory_hostname }}/metrics" % local.nodes)
    healthy = local.playbook("health.yml", *exporter)
    assert healthy.rc == 0, healthy.out[-3000:]
    assert metrics(local, "node0", "gpufleet_node_health.prom")['gpufleet_node_health_check_result{result="passed"}'] == 1
    assert metrics(local, "node0", "gpufleet_node_standing.prom")['gpufleet_node_state{state="in_service"}'] == 1
    assert not (local.nodes / "node1" / "metrics").exists()
    assert [(r["node"], r["kind"], r["result"], r["fact"]) for r in records(local)] == [
        ("node0", "check", "passed", "healthy (no GPU)"), ("node1", "check", "passed", "healthy (no GPU)")]
    shown = local.playbook("fleet.yml")
    rows = [line.split() for line in shown.out.splitlines() if line.startswith(("node0  in", "node1  in"))]
    assert [row[:3] + row[5:8] for row in rows] == [["node0", "in", "service", "passed", "-", "-"],
                                                    ["node1", "in", "service", "passed", "-", "-"]], shown.out[-3000:]

    checked = local.playbook("health.yml", "--check", *port_down(tmp_path))
    said = " ".join(checked.out.split())
    assert checked.rc != 0 and "(check mode: nothing recorded)" in said
    for node in ("node0", "node1"):
        assert "%s mlx5_2 port 1: the link is not up (its state is 1: DOWN" % node in said, said[-3000:]
    assert len(records(local)) == 2

    # The launch's gate refuses the same port, and records it, with the job.
    launch = local.playbook("train.yml", "-e", "script=examples/train.py", "-e", "job=llm", *port_down(tmp_path))
    assert launch.rc != 0 and "mlx5_2 port 1: the link is not up" in launch.out, launch.out[-3000:]
    faults = [r for r in records(local) if r["kind"] == "fault"]
    assert [(r["node"], r["class"], r["gpu"], r["job"]) for r in faults] == [
        ("node0", "network", "mlx5_2 port 1", "llm"), ("node1", "network", "mlx5_2 port 1", "llm")]
    assert not any(local.nodes.rglob("llm")), "a node was touched"

    # health.yml sees the same fault again: a new check each, no new fault; node0's exporter is told of the check.
    again = local.playbook("health.yml", *port_down(tmp_path), *exporter)
    assert again.rc != 0
    told = metrics(local, "node0", "gpufleet_node_health.prom")
    assert told['gpufleet_node_health_check_result{result="refused"}'] == 1, again.out[-3000:]
    assert told['gpufleet_node_health_check_findings{class="network",verdict="refused"}'] == 1
    assert metrics(local, "node0", "gpufleet_node_standing.prom")['gpufleet_node_hardware_faults{class="network"}'] == 1
    assert [(r["node"], r["kind"], r.get("result")) for r in records(local)[4:]] == [
        ("node0", "check", "refused"), ("node1", "check", "refused")], again.out[-3000:]
    assert "in service (1 fault)" in again.out

    # One hardware fault quarantines where gpufleet_quarantine_after=1: the next launch is refused naming it.
    strict = ("-e", "gpufleet_quarantine_after=1")
    refused = local.playbook("train.yml", "-e", "script=examples/train.py", *strict)
    said = " ".join(refused.out.split())
    assert refused.rc != 0 and "node0 is quarantined: 1 hardware faults within 7d" in said, said[-3000:]
    assert "(job llm): the link is not up" in said
    quarantined = local.playbook("health.yml", *strict, *exporter)
    assert metrics(local, "node0", "gpufleet_node_standing.prom")['gpufleet_node_state{state="quarantined"}'] == 1, \
        quarantined.out[-3000:]
    # fleet.yml's release in check mode records nothing; the release itself tells node0's exporter.
    checked = local.playbook("fleet.yml", "--check", "-e", "release=node0", *strict, *exporter)
    assert checked.rc == 0 and records(local)[-1]["kind"] == "check", checked.out[-3000:]
    assert "check mode: the release as it would be; nothing recorded" in checked.out
    assert metrics(local, "node0", "gpufleet_node_standing.prom")['gpufleet_node_state{state="quarantined"}'] == 1
    released = local.playbook("fleet.yml", "-e", "release=node0", *strict, *exporter)
    assert released.rc == 0 and records(local)[-1]["kind"] == "release", released.out[-3000:]
    assert metrics(local, "node0", "gpufleet_node_standing.prom")['gpufleet_node_state{state="in_service"}'] == 1
    assert os.path.exists(local.logs / "history.jsonl")


def test_a_bad_dcgm_level_is_refused_before_any_node_is_probed(local):
    bad = local.playbook("health.yml", "-e", "health_dcgm_level=5")
    assert bad.rc != 0 and "health_dcgm_level=5 is not 0 (no diagnostic) or a dcgmi diag level 1 to 4" in bad.out
    assert "Probe every node" not in bad.out and records(local) == []
