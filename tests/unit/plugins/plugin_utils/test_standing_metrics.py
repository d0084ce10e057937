"""Each node's standing and last health check as Prometheus metrics (standing_metrics.py): what health.yml and
fleet.yml write for the node exporter, each file accepted by Prometheus's own promtool (check metrics).

The nodes' facts come from the real readers: nvidia-smi's answers on a real H200 (tests/fixtures/nvidia_smi), the
NVLink states from `nvidia-smi nvlink --status` as the reader
reads it (tests/fixtures/nvidia_smi/handmade-nvlink-status-a100-two-links-down.txt: the A100 capture with two links
written inactive, hand-made as its README says), the InfiniBand ports from a /sys/class/infiniband tree in the
kernel's formats (tests/fixtures/sysfs_infiniband)."""

import os
import subprocess

from ansible_collections.gpufleet.cluster.plugins.module_utils._node import netinfo
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import gpu_health
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import (health_check, history, node_plan,
                                                                               standing_metrics)

from prometheus_tools import prometheus_tool, run
from test_health_check import smi
from test_port_health import tree

SMI = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "nvidia_smi")
NOW = 1795800000.0
SETTINGS = node_plan.NodeSettings(python="", container_engine="")


def samples(text):
    """{'name{labels}': value} of a text, the comments left out."""
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def promtool_accepts(text):
    done = run(prometheus_tool("promtool"), "check", "metrics", input_text=text)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_quarantined_node_s_standing_with_its_faults_by_class():
    faults = [history.record("gpu-a", "fault", "XID 79", klass="gpu", at=NOW - 60 * i) for i in range(2)]
    faults.append(history.record("gpu-a", "fault", "mlx5_2 port 1: the link is not up", klass="network", at=NOW))
    faults.append(history.record("gpu-a", "fault", "the job hung", klass="hang", at=NOW))  # not counted
    entry = history.standing(faults, ["gpu-a"], 3, 86400, NOW)["gpu-a"]
    text = standing_metrics.standing(entry, 3)
    promtool_accepts(text)
    assert samples(text) == {
        'gpufleet_node_state{state="in_service"}': 0, 'gpufleet_node_state{state="in_maintenance"}': 0,
        'gpufleet_node_state{state="quarantined"}': 1, 'gpufleet_node_hardware_faults{class="gpu"}': 2,
        'gpufleet_node_hardware_faults{class="network"}': 1, "gpufleet_node_quarantine_after": 3}
    released = history.standing(faults + [history.record("gpu-a", "release", "returned to service", at=NOW + 1)],
                                ["gpu-a"], 3, 86400, NOW + 2)["gpu-a"]
    after = samples(standing_metrics.standing(released, 3))
    assert after['gpufleet_node_state{state="in_service"}'] == 1 and after['gpufleet_node_state{state="quarantined"}'] == 0
    assert after['gpufleet_node_hardware_faults{class="gpu"}'] == 0


def replay(name):
    with open(os.path.join(SMI, name)) as handle:
        out = handle.read()
    return lambda cmd, **_kwargs: subprocess.CompletedProcess(cmd, 0, out, "")


def test_a_refused_check_with_a_port_down_and_nvlink_links_down(tmp_path):
    nvlink = gpu_health.nvlink_states(replay("handmade-nvlink-status-a100-two-links-down.txt"))
    ports = {"hcas": netinfo.infiniband(tree(tmp_path / "sys")), "ib_hca": "=mlx5_0:1,mlx5_1:1,mlx5_2:1",
             "before": {"at": NOW - 86400, "errors": {"mlx5_0:1": {"symbol_error": 2}}}}
    probe = {"gpu_health": dict(smi(tmp_path), nvlink=nvlink), "ib_ports": ports}
    check = health_check.judge(["gpu-a"], {"gpu-a": probe}, {}, SETTINGS)["gpu-a"]
    text = standing_metrics.health(check, NOW, probe)
    promtool_accepts(text)
    found = samples(text)
    assert found["gpufleet_node_health_check_timestamp_seconds"] == NOW
    assert [key for key, value in found.items() if key.startswith("gpufleet_node_health_check_result") and value] == [
        'gpufleet_node_health_check_result{result="refused"}']
    # GPU 3's links 4 and 9 refused; mlx5_2 port 1 down refused; mlx5_1's 1X link and mlx5_0's errors warned.
    assert found['gpufleet_node_health_check_findings{class="gpu",verdict="refused"}'] == 1
    assert found['gpufleet_node_health_check_findings{class="network",verdict="refused"}'] == 1
    assert found['gpufleet_node_health_check_findings{class="network",verdict="warned"}'] == 2
    assert {key: value for key, value in found.items() if key.startswith("gpufleet_node_nvlink")} == {
        'gpufleet_node_nvlink_links_down{gpu="%d"}' % gpu: (2 if gpu == 3 else 0) for gpu in range(8)}


def test_a_gpu_with_no_nvlink_link_up_has_no_links_down_series_rather_than_a_zero():
    """The real capture of three RTX A6000s, GPU 2 without a bridge: nvidia-smi gives no link count for it."""
    nvlink = gpu_health.nvlink_states(replay("nvlink-status-rtx-a6000-one-gpu-unbridged.txt"))
    check = health_check.NodeCheck(health_check.WARNED, {"gpu": [], "network": []}, 0, "")
    found = samples(standing_metrics.health(check, NOW, {"gpu_health": {"nvlink": nvlink}}))
    assert {key: value for key, value in found.items() if key.startswith("gpufleet_node_nvlink")} == {
        'gpufleet_node_nvlink_links_down{gpu="0"}': 0, 'gpufleet_node_nvlink_links_down{gpu="1"}': 0}


def test_a_passed_check_without_nvlink_has_no_link_series_and_a_node_not_checked_has_no_file():
    check = health_check.NodeCheck(health_check.PASSED, {"gpu": [], "network": []}, 0, "")
    text = standing_metrics.health(check, NOW, {"gpu_health": {"nvlink": {"0": {"up": 0, "down": [0, 1]}}}})
    promtool_accepts(text)
    assert samples(text)['gpufleet_node_health_check_result{result="passed"}'] == 1
    assert "nvlink" not in text  # no link up anywhere: GPUs without NVLink (or a fabric down, a gpu finding)
    assert standing_metrics.health(health_check.NodeCheck(health_check.NOT_CHECKED, why="no answer"), NOW) == ""
