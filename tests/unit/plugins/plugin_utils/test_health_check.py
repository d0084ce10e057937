"""Health between jobs (health_check.py) and the gate's findings at a launch, in the fleet's history.

The nodes' facts are read by the real readers from fixtures: nvidia-smi's answers on a real H200
(tests/fixtures/nvidia_smi, real captures), the NVIDIA driver's XID lines (tests/fixtures/kmsg/handmade-xids.txt:
hand-made record headers, real lines), a /sys/class/infiniband tree in the kernel's formats
(tests/fixtures/sysfs_infiniband)."""

import os
import subprocess

from ansible_collections.gpufleet.cluster.plugins.action import job_nodes
from ansible_collections.gpufleet.cluster.plugins.module_utils._node import netinfo
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import gpu_health
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import health_check, history, node_plan

from test_port_health import tree

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures")
NOW = 1795800000.0
DAY = 86400.0


def smi(tmp_path, kmsg=None, busy=False):
    """The real reader's answer on the real H200 capture (its process list empty unless busy), with the kernel log
    given (a file in /dev/kmsg's format; none: a real capture without an XID)."""
    answers = {"--query-gpu": "h200-query-health.csv", "--query-compute-apps": "h200-compute-apps.csv"}

    def run(cmd, **_kwargs):
        name = next(answers[key] for key in answers if cmd[1].startswith(key))
        with open(os.path.join(FIXTURES, "nvidia_smi", name)) as handle:
            out = handle.read() if busy or key_of(cmd) != "--query-compute-apps" else ""
        return subprocess.CompletedProcess(cmd, 0, out, "")

    (tmp_path / "stat").write_text("btime 1764000000\n")
    log = os.path.join(FIXTURES, "kmsg", kmsg or "linux-6.18.44-records.txt")
    return gpu_health.read(log, run, proc=str(tmp_path))


def key_of(cmd):
    return cmd[1].split("=")[0]


def probe(health=None, ib_ports=None):
    return {"gpu_health": health or {}, "ib_ports": ib_ports or {}}


SETTINGS = node_plan.NodeSettings(python="", container_engine="")


def test_a_healthy_node_passes_and_a_gpu_held_by_a_job_is_not_its_fault(tmp_path):
    checks = health_check.judge(["gpu-a"], {"gpu-a": probe(smi(tmp_path, busy=True))}, {}, SETTINGS)
    assert checks["gpu-a"].result == "passed" and checks["gpu-a"].gpus == 1
    assert checks["gpu-a"].driver == "580.159.04"
    assert health_check.summary(checks["gpu-a"]) == "healthy (1 GPUs)"
    # The launch's gate refuses the same GPU held by that process: health.yml does not.
    at_launch = node_plan.gpu_findings("gpu-a", probe(smi(tmp_path, busy=True)), SETTINGS, None)
    assert [f.refuse for f in at_launch] == [True] and "held by another process" in at_launch[0].fact
    assert not at_launch[0].counts  # a use, not the hardware


def test_a_gpu_node_without_dcgm_passes_unless_the_user_asked_for_a_level(tmp_path):
    """dcgm_diag on a node without DCGM says present=false (plugins/modules/dcgm_diag.py). health.yml's default level
    runs the diagnostic where DCGM is installed: such a node passes. Where -e health_dcgm_level was given, it is
    warned of, naming that variable (seen on a real H200 without DCGM: every check warned before)."""
    absent = {"gpu-a": {"changed": False, "present": False, "level": 1, "version": None, "gpus": [], "error": None}}
    health = probe(smi(tmp_path))
    assert health_check.judge(["gpu-a"], {"gpu-a": health}, absent, SETTINGS)["gpu-a"].result == "passed"
    asked = health_check.judge(["gpu-a"], {"gpu-a": health}, absent, SETTINGS, 2)["gpu-a"]
    assert asked.result == "warned"
    assert [f.message("gpu-a") for f in asked.all()] == [
        "gpu-a: health_dcgm_level=2 asks for DCGM's diagnostic, and DCGM is not installed; provision the node with "
        "-e dcgm_enabled=true, or leave health_dcgm_level out"]


def test_a_hardware_xid_refuses_and_is_recorded_once_for_as_long_as_it_stands(tmp_path):
    checks = health_check.judge(["gpu-a", "gpu-b"], {"gpu-a": probe(smi(tmp_path, "handmade-xids.txt")),
                                                     "gpu-b": probe(smi(tmp_path))}, {}, SETTINGS)
    assert [checks[h].result for h in ("gpu-a", "gpu-b")] == ["refused", "passed"]
    refused = health_check.refusals(checks)
    assert list(refused) == ["gpu-a"] and "XID 119" in refused["gpu-a"] and refused["gpu-a"].startswith("gpu-a ")
    first = health_check.records(checks, [], at=NOW)
    faults = [r for r in first if r["kind"] == "fault"]
    # XIDs 119, 79 and 154 are the hardware's (three GPUs' refusals); 109 is the application's and says nothing.
    assert {r["node"] for r in faults} == {"gpu-a"} and all(r["class"] == "gpu" for r in faults)
    assert not any("109" in r["fact"] for r in faults)
    assert [(r["node"], r["result"]) for r in first if r["kind"] == "check"] == [("gpu-a", "refused"),
                                                                                ("gpu-b", "passed")]
    # The next check sees the same XIDs: only the check records are new.
    again = health_check.records(checks, first, at=NOW + 3600)
    assert [r["kind"] for r in again] == ["check", "check"]


def test_a_port_down_refuses_and_a_degraded_or_erring_link_warns_and_counts(tmp_path):
    before = {"at": NOW - DAY, "errors": {"mlx5_0:1": {"symbol_error": 2}}}
    ports = {"hcas": netinfo.infiniband(tree(tmp_path / "sys")), "ib_hca": "=mlx5_0:1,mlx5_1:1,mlx5_2:1",
             "before": before}
    checks = health_check.judge(["gpu-a"], {"gpu-a": probe(ib_ports=ports)}, {}, SETTINGS)
    found = [(f.refuse, f.gpu, f.counts) for f in checks["gpu-a"].findings["network"]]
    assert (True, "mlx5_2 port 1", True) in found  # down
    assert (False, "mlx5_1 port 1", True) in found  # trained at 1X
    assert (False, "mlx5_0 port 1", True) in found  # symbol_error rose
    assert checks["gpu-a"].result == "refused" and checks["gpu-a"].gpus is None
    recorded = health_check.records(checks, [], at=NOW)
    assert sorted(r["gpu"] for r in recorded if r["kind"] == "fault") == ["mlx5_0 port 1", "mlx5_1 port 1",
                                                                           "mlx5_2 port 1"]
    assert all(r["class"] == "network" for r in recorded if r["kind"] == "fault")


def test_a_setting_the_gate_refuses_is_not_the_hardwares_fault(tmp_path):
    settings = node_plan.NodeSettings(python="", container_engine="", acknowledged={"gpu-a": "yesterday"})
    checks = health_check.judge(["gpu-a"], {"gpu-a": probe(smi(tmp_path))}, {}, settings)
    assert checks["gpu-a"].result == "refused"
    assert [r["kind"] for r in health_check.records(checks, [], at=NOW)] == ["check"]


def test_a_node_that_does_not_answer_is_unreachable_and_no_fault(tmp_path):
    probes = {"gpu-b": {"unreachable": True, "msg": "Failed to connect to the host via ssh: timed out"}}
    checks = health_check.judge(["gpu-a", "gpu-b"], probes, {}, SETTINGS)
    assert checks["gpu-a"].result == checks["gpu-b"].result == "not checked"
    assert health_check.summary(checks["gpu-b"]) == "not checked: Failed to connect to the host via ssh: timed out"
    assert health_check.summary(checks["gpu-a"]) == "not checked: no answer"
    assert [r["kind"] for r in health_check.records(checks, [], at=NOW)] == ["check", "check"]


def test_three_checks_finding_three_faults_quarantine_the_node_and_the_table_shows_it(tmp_path):
    held = []
    for day, counter in enumerate((1, 5, 9)):
        before = {"at": NOW + (day - 1) * DAY, "errors": {"mlx5_0:1": {"symbol_error": counter}}}
        ports = {"hcas": netinfo.infiniband(tree(tmp_path / ("sys%d" % day), only=("mlx5_0",))),
                 "ib_hca": "=mlx5_0:1", "before": before}
        checks = health_check.judge(["gpu-a"], {"gpu-a": probe(ib_ports=ports)}, {}, SETTINGS)
        held += health_check.records(checks, held, at=NOW + day * DAY)
    found = history.standing(held, ["gpu-a"], 3, 7 * DAY, NOW + 2 * DAY)
    assert found["gpu-a"]["state"] == "quarantined" and found["gpu-a"]["last_check"]["result"] == "warned"
    table = health_check.table(checks, found).splitlines()
    assert table[0].split()[:4] == ["node", "result", "GPUs", "driver"]
    assert "quarantined (3 faults)" in table[2] and "symbol_error rose by 3" in table[2]
    shown = history.standing_table(found).splitlines()
    assert shown[0].split()[:4] == ["node", "state", "faults", "last"] and "warned" in shown[2]


def test_the_launch_records_the_gates_hardware_refusals_once(tmp_path):
    """job_nodes, as train.yml's preflight runs it: a refused GPU's XIDs go to the history with the job and run; the
    same refusal at the next launch records nothing more, an unacknowledged application XID nothing at all."""
    plan = {"job": "llm", "run_id": "r1", "logs_dir": str(tmp_path / "logs"), "hosts": ["gpu-a"],
            "nodes": [{"host": "gpu-a", "ip": "192.0.2.10"}], "master_host": "gpu-a", "nnodes": 1, "scheduler": "ssh"}
    refused = dict(probe(smi(tmp_path, "handmade-xids.txt")), gpu_count=1, python={"found": True, "torch": True},
                   job={"running": False})
    decided = node_plan.decide(plan, {"gpu-a": refused}, node_plan.NodeSettings(python="python3",
                                                                                container_engine="docker"), False)
    assert decided.gate_faults and all(f["node"] == "gpu-a" and f["class"] == "gpu" for f in decided.gate_faults)
    first = job_nodes.record_gate_faults(plan, decided.gate_faults)
    assert first and all(r["job"] == "llm" and r["run"] == "r1" for r in first)
    assert history.read(history.path_of(plan["logs_dir"])) == first
    assert job_nodes.record_gate_faults(dict(plan, run_id="r2"), decided.gate_faults) == []
