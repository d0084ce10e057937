"""verify.yml's judgements: stack agreement, GPU counts, the slow pair, and the report and plot files."""

import json
import os

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._verify import nccl_tests, verify

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "nccl_tests")
NODE = {"gpu_count": 8, "gpu_models": ["NVIDIA H100 80GB HBM3"], "driver": "570.124.06", "cuda": "12.8",
        "nccl": "2.26.2-1+cuda12.8", "torch": "2.13.0"}


def test_agreeing_nodes_have_no_problems_and_a_table():
    results = {"gpu01": dict(NODE), "gpu02": dict(NODE)}
    assert verify.stack_problems(results, {"gpu01": 8, "gpu02": None}) == []
    lines = verify.stack_table(results).splitlines()
    assert lines[0].split() == ["node", "GPUs", "model", "driver", "CUDA", "NCCL", "torch"]
    assert lines[2].startswith("gpu01") and "570.124.06" in lines[2]


def test_disagreements_and_missing_gpus_are_named():
    results = {"gpu01": dict(NODE), "gpu02": dict(NODE, driver="560.35.03", gpu_count=7), "gpu03": dict(NODE)}
    problems = verify.stack_problems(results, {"gpu02": 8})
    assert problems == ["the nodes' driver differ: 560.35.03 on gpu02; 570.124.06 on gpu01, gpu03",
                        "gpu02 has 7 GPUs, its inventory says 8 (gpufleet_gpus)"]


def test_the_node_in_every_slow_pair_is_the_suspect():
    good = nccl_tests.parse(open(os.path.join(FIXTURES, "two_node_mpirun.txt")).read())
    slow = json.loads(json.dumps(good))
    for row in slow["rows"]:
        row["out_of_place"]["busbw_gbps"] /= 4
        row["in_place"]["busbw_gbps"] /= 4
    summary = verify.pair_summary({"n0+n1": good, "n0+n2": slow, "n1+n2": slow, "n0+n3": good, "n1+n3": good,
                                   "n2+n3": slow})
    assert summary["slow_pairs"] == ["n0+n2", "n1+n2", "n2+n3"]
    assert summary["suspect_nodes"] == ["n2"]


def test_report_and_plot_files(tmp_path):
    report = nccl_tests.parse(open(os.path.join(FIXTURES, "single_node_8gpu.txt")).read())
    path = verify.write_report(str(tmp_path), "all_reduce", report)
    assert json.load(open(path))["avg_busbw_gbps"] == 102.614
    png = verify.plot_busbw(str(tmp_path / "busbw.png"), {"all nodes": report}, expected=300)
    with open(png, "rb") as handle:
        assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(png) > 5000


def test_fabric_manager_must_be_the_drivers_version_and_run_where_nvswitches_are():
    results = {
        "n0": {"fabricmanager": None, "fabricmanager_needed": False, "persistence_mode": "Enabled", "peermem": True,
               "gpudirect_rdma": "peermem"},
        # NVIDIA's apt packages: the driver's revision is Ubuntu-style, Fabric Manager's -1; the versions are equal.
        "n1": {"fabricmanager": "570.124.06-1", "driver_package": "570.124.06-0ubuntu1", "fabricmanager_state": "active",
               "fabricmanager_needed": True, "persistence_mode": "Enabled", "peermem": False,
               "gpudirect_rdma": "DMA-BUF"},
        "n2": {"fabricmanager": "570.133.20-1", "driver_package": "570.124.06-1", "fabricmanager_state": "active",
               "fabricmanager_needed": True},
        "n3": {"fabricmanager": "570.124.06-1", "driver_package": "570.124.06-1", "fabricmanager_state": "no systemd",
               "fabricmanager_needed": True},
        "n4": {"fabricmanager": None, "driver_package": "570.124.06-1", "fabricmanager_needed": True},
    }
    assert verify.services_problems(results) == [
        "n2: Fabric Manager 570.133.20-1 is not the driver's version 570.124.06-1; they must be equal",
        "n3: the node has NVSwitches, so CUDA needs Fabric Manager running, but it is not running (systemd is not "
        "this node's init)",
        "n4: the node has NVSwitches, so CUDA needs Fabric Manager running, but it is not installed"]
    table = verify.services_table(results).splitlines()
    assert table[0].split() == ["node", "Fabric", "Manager", "state", "persistence", "GPUDirect", "RDMA", "IMEX"]
    assert table[2].split() == ["n0", "not", "needed", "-", "Enabled", "peermem", "not", "needed"]
    assert table[3].split() == ["n1", "570.124.06-1", "active", "Enabled", "DMA-BUF", "not", "needed"]


def test_the_services_table_shows_imex_on_a_multi_node_nvlink_node_and_the_gate_fails_it_when_stopped():
    """A GB200 NVL tray (nvidia_node.imex_state) whose IMEX is installed and failed: the table shows the state, and
    verify.yml fails the node through the health gate's refusal, which names the service and its log."""
    gpus = [{"index": 0, "bus_id": "00000009:01:00.0", "name": "NVIDIA GB200"}]
    results = {"gb1": {"fabricmanager_needed": False, "gpu_count": 1,
                       "gpu_health": {"nvidia_smi": True, "pci_gpus": 1, "gpus": gpus, "kernel_log": "/dev/kmsg",
                                      "imex": {"installed": True, "state": "failed", "channels": []}}}}
    table = verify.services_table(results).splitlines()
    assert table[2].split()[-1] == "failed"
    findings = verify.health_findings(results, {}, {})
    assert [(f.refuse, f.fact.split(":")[0]) for f in findings["gb1"]] == [
        (True, "NVIDIA IMEX is failed on a multi-node NVLink node (GB200/GB300 NVL)")]
    assert "systemctl status nvidia-imex" in findings["gb1"][0].fix


def _diag(name):
    from ansible_collections.gpufleet.cluster.plugins.module_utils._node import dcgm_diag

    with open(os.path.join(FIXTURES, "..", "dcgm", name)) as handle:
        return dict(dcgm_diag.parse(handle.read()), present=True, level=1)


def test_dcgm_table_shows_each_gpu_and_a_failed_gpu_is_named_with_its_node_test_and_message():
    results = {"gpu01": _diag("dcgm-4.5.2-r1-pass.json"), "gpu02": _diag("dcgm-4.5.2-r1-pending-retirement.json"),
               "spark1": _diag("dcgm-4.2.3-r1-persistence-disabled.json")}
    lines = verify.dcgm_table(results).splitlines()
    assert lines[0].split()[:4] == ["node", "GPU", "or", "entity"]
    assert [line.split()[:4] for line in lines[2:]] == [
        ["gpu01", "GPU", "0", "(serial"], ["gpu01", "GPU", "1", "(serial"], ["gpu02", "GPU", "0", "(serial"],
        ["gpu02", "GPU", "1", "(serial"], ["spark1", "GPU", "0", "Warn"]]
    assert "Fail" in lines[5] and "software (fail: RESET)" in lines[5]
    assert "software (warn: CONFIG)" in lines[6] and "Persistence mode for GPU 0 is disabled" in lines[6]
    # The real persistence-mode warning (dcgmi wrote "Fail") is shown, not failed on; the failed GPU is named with
    # its node, test, DCGM's severity and message.
    assert verify.dcgm_problems(results, {}) == [
        "gpu02: GPU 1 (serial 1650123000002) failed DCGM's diagnostic (level 1): software (fail: RESET): Page "
        "Retirement/Row Remap: A pending retired page has been detected in GPU 1. Monitor - this GPU can still "
        "perform workload"]


def test_dcgm_table_names_the_tests_dcgm_did_not_run_and_they_are_no_problem():
    """The real level-2 capture (GB10, DCGM 4.5.2): memory and pcie skipped, DCGM giving no reason."""
    results = {"spark1": dict(_diag("dcgm-4.5.2-r2-memory-pcie-skipped.json"), level=2)}
    (row,) = verify.dcgm_table(results).splitlines()[2:]
    assert row.split()[:4] == ["spark1", "GPU", "0", "Warn"]
    assert "software (warn: CONFIG), memory (not run), pcie (not run)" in row
    assert verify.dcgm_problems(results, {}) == []


def test_dcgm_missing_where_required_or_without_a_result_is_a_problem_and_not_run_is_not():
    results = {"gpu01": {"present": False, "gpus": []}, "gpu02": {"present": False, "gpus": []},
               "gpu03": dict(_diag("dcgm-4.5.2-runtime-error.json")), "gpu04": {"skipped": True}}
    assert verify.dcgm_problems(results, {"gpu01": True, "gpu02": False, "gpu04": True}) == [
        "gpu01: dcgm_enabled is true but dcgmi is not installed; run provision.yml --tags dcgm",
        "gpu03: DCGM's diagnostic (level 1) gave no result: dcgmi diag could not run: Error: Unable to complete "
        "diagnostic for entities *,cpu:*. Return: (-11) : Timeout"]
    rows = [line.split()[:3] for line in verify.dcgm_table(results).splitlines()[2:]]
    assert rows == [["gpu01", "-", "no"], ["gpu02", "-", "no"], ["gpu03", "-", "error"], ["gpu04", "-", "not"]]


def test_the_gpu_health_table_and_its_refusals():
    """verify.yml judges each node's gpu_health as train.yml's gate does (plugin_utils/_control/gpu_gate.py)."""
    def gpu(index, **values):
        found = {"index": index, "bus_id": "00000000:%02X:00.0" % (0x18 + index), "error": "", "pcie_width": 16.0,
                 "pcie_width_max": 16.0, "event_reasons": 1}
        found.update(values)
        return found

    results = {
        "gpu01": {"gpu_health": {"nvidia_smi": True, "gpus": [gpu(0), gpu(1)], "pci_gpus": 2, "kernel_log": "/dev/kmsg"}},
        "gpu02": {"gpu_health": {"nvidia_smi": True, "gpus": [gpu(0, remap_pending=True), gpu(1, pcie_width=8.0)],
                                 "pci_gpus": 2, "kernel_log": "/dev/kmsg", "xids": [{
                                     "bus_id": "0000:19:00", "xid": 79, "meaning": "GPU has fallen off the bus",
                                     "class": "hardware", "detail": "", "time": 1764064800.0}]}},
        "cpu01": {"gpu_health": {"nvidia_smi": False, "pci_gpus": 0}},
    }
    found = verify.health_findings(results, {}, {"gpu02": "2026-11-25T10:00:01Z"})
    assert [finding.message("gpu02") for finding in found["gpu02"] if finding.refuse] == [
        "gpu02 GPU 0 (0000:18:00.0): a row remap is pending; reset the GPU (nvidia-smi -r -i 0, with nothing running "
        "on it) or reboot the node"]  # the XID logged before the acknowledgement does not count
    lines = verify.health_table(found, results).splitlines()
    assert [line.split("  ")[0] for line in lines[2:]] == ["gpu01", "gpu02", "gpu02", "cpu01"]
    assert set(lines[1]) == {"-", " "}
    assert [" ".join(line.split()) for line in lines[:1] + lines[2:]] == [
        "node GPU or port verdict fact",
        "gpu01 - ok healthy (2 GPUs)",
        "gpu02 GPU 0 (0000:18:00.0) refuse a row remap is pending",
        "gpu02 GPU 1 (0000:19:00.0) warn its PCIe link runs at x8, narrower than its x16",
        "cpu01 - ok no GPU"]
    assert lines[0].index("verdict") == lines[3].index("refuse") == lines[4].index("warn")  # aligned columns
    assert verify.health_findings(results, {}, {"gpu01": "soon"})["gpu01"][0].fact == \
        "gpufleet_xids_acknowledged_before='soon' is not a date and time"


GPU_LESS = {"gpu_count": 0, "gpu_models": [], "driver": None, "cuda": None, "nccl": None, "torch": "2.13.0+cpu"}


def test_gpu_less_nodes_are_not_held_to_the_gpu_nodes_stack_but_torch_must_agree():
    """A CPU node beside GPU nodes has no model, driver, CUDA or NCCL and a CPU build of torch: no disagreement. Its
    torch's version without the local label is still compared with every node's."""
    gpu = dict(NODE, torch="2.13.0+cu128")
    assert verify.stack_problems({"gpu01": gpu, "gpu02": dict(gpu), "login": dict(GPU_LESS)}, {}) == []
    older = verify.stack_problems({"gpu01": gpu, "login": dict(GPU_LESS, torch="2.12.1+cpu")}, {})
    assert older == ["the nodes' torch (without the build's local label, +cpu or +cu128) differ: 2.12.1 on login; "
                     "2.13.0 on gpu01"]
    # The GPU nodes' own stacks are still compared, torch's build label included, and torch said once.
    mixed = verify.stack_problems({"gpu01": gpu, "gpu02": dict(gpu, torch="2.13.0+cu126"),
                                   "cpu01": dict(GPU_LESS, torch="2.12.0")}, {})
    assert mixed == ["the nodes' torch differ: 2.13.0+cu126 on gpu02; 2.13.0+cu128 on gpu01"]


def test_nodes_without_any_gpu_compare_torch_only():
    """No node has a GPU (a first try on VMs): a build host's CUDA on one of them is not a disagreement."""
    nodes = {"vm1": dict(GPU_LESS), "vm2": dict(GPU_LESS, cuda="12.8", nccl="2.26.2-1+cuda12.8")}
    assert verify.stack_problems(nodes, {}) == []
    assert verify.stack_problems(dict(nodes, vm3=dict(GPU_LESS, torch="2.11.0")), {}) == [
        "the nodes' torch (without the build's local label, +cpu or +cu128) differ: 2.11.0 on vm3; 2.13.0 on vm1, vm2"]
