"""The GPU health gate: what refuses a launch and what only warns, each naming the GPU, the fact and the fix.

Fed with gpu_health.read's shape, written out here; the reader's parsing is test_gpu_health.py's."""

import os
import datetime

import pytest

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import gpu_gate

T0 = datetime.datetime(2026, 11, 25, 10, 2, 11, tzinfo=datetime.timezone.utc).timestamp()


def gpu(index, **values):
    found = {"index": index, "uuid": "GPU-%d" % index, "bus_id": "00000000:%02X:00.0" % (0x18 + index),
             "name": "NVIDIA H100 80GB HBM3", "error": "", "temperature": 31.0, "utilization": 0.0, "memory_used": 0.0,
             "memory_total": 81559.0, "power": 69.5, "sm_clock": 345.0, "sm_clock_max": 1980.0, "ecc_uncorrected": 0.0,
             "pcie_width": 16.0, "pcie_width_max": 16.0, "event_reasons": 1, "retired_pending": False,
             "remap_pending": False, "remap_failure": False}
    found.update(values)
    return found


def health(gpus=None, **more):
    found = {"nvidia_smi": True, "gpus": gpus if gpus is not None else [gpu(0), gpu(1)], "lost": [], "error": "",
             "processes": [], "nvlink": {}, "xids": [], "kernel_log": "/dev/kmsg", "pci_gpus": 2}
    found.update(more)
    return found


def messages(found, refuse=True):
    return [finding.message("node2") for finding in found if finding.refuse is refuse]


def xid(number, kind="hardware", at=T0, bus="0000:19:00"):
    return {"bus_id": bus, "xid": number, "meaning": gpu_gate.gpu_health.XID_MEANINGS.get(number, "XID"),
            "class": kind, "detail": "", "time": at}


def test_a_healthy_node_has_nothing_to_say():
    assert gpu_gate.findings(health(), gpu_gate.GateSettings()) == []


def test_a_node_without_gpus_costs_nothing_and_says_so_once():
    assert gpu_gate.findings({"nvidia_smi": False, "pci_gpus": 0}, gpu_gate.GateSettings()) == []
    assert not gpu_gate.has_gpus({"nvidia_smi": False, "pci_gpus": 0})
    found = gpu_gate.findings({"nvidia_smi": False, "pci_gpus": 8}, gpu_gate.GateSettings())
    assert messages(found, refuse=False) == [
        "node2: 8 NVIDIA GPUs on the PCI bus but nvidia-smi is not installed, so the job runs without them here; "
        "install the driver (playbooks/provision.yml --tags nvidia_driver)"]


def test_a_lost_gpu_is_named_by_its_bus_id():
    found = gpu_gate.findings(health([gpu(0)], lost=[{"bus_id": "0000:19:00.0", "error": "Unknown Error"}]),
                              gpu_gate.GateSettings())
    assert messages(found) == ["node2 GPU at 0000:19:00.0: nvidia-smi cannot reach it (Unknown Error); reboot the node, "
                               "or leave it out of the inventory until it is repaired"]


def test_fewer_gpus_than_the_pci_bus_or_gpufleet_gpus():
    found = gpu_gate.findings(health([gpu(0)]), gpu_gate.GateSettings())
    assert messages(found)[0].startswith("node2: nvidia-smi lists 1 GPU, the node has 2 on its PCI bus; see the kernel")
    found = gpu_gate.findings(health([gpu(0)], pci_gpus=None), gpu_gate.GateSettings(expected=2))
    assert messages(found) == ["node2: nvidia-smi lists 1 GPU, gpufleet_gpus says 2; reboot the node if a GPU was "
                               "lost, or correct gpufleet_gpus"]


@pytest.mark.parametrize("values, fact, fix", [
    ({"error": "[GPU requires reset]"}, "nvidia-smi reports [GPU requires reset]", "reset the GPU (nvidia-smi -r -i 1"),
    ({"ecc_uncorrected": 3.0}, "3 uncorrectable ECC errors since the driver loaded", "reset the GPU"),
    ({"remap_pending": True}, "a row remap is pending", "reset the GPU (nvidia-smi -r -i 1, with nothing running on it) "
                                                         "or reboot the node"),
    ({"retired_pending": True}, "a page retirement is pending", "reset the GPU"),
    ({"remap_failure": True, "remap_pending": True}, "row remapping failed", "contact the vendor"),
])
def test_gpu_states_that_refuse(values, fact, fix):
    found = messages(gpu_gate.findings(health([gpu(0), gpu(1, **values)]), gpu_gate.GateSettings()))
    assert len(found) == 1 and found[0].startswith("node2 GPU 1 (0000:19:00.0): " + fact) and fix in found[0]


def test_a_gpu_the_job_takes_held_by_another_process():
    busy = health(processes=[{"bus_id": "00000000:19:00.0", "pid": 4242, "user": "alice", "command": "python3",
                              "memory": 10240.0}])
    assert messages(gpu_gate.findings(busy, gpu_gate.GateSettings())) == [
        "node2 GPU 1 (0000:19:00.0): is held by another process: pid 4242 (alice, python3, 10240 MiB); stop that "
        "process, or launch with -e allow_busy_gpus=true to share the GPU"]
    # Not a GPU the job takes (one rank: GPU 0), let through, or held by this job itself (force=true stops it first).
    for settings in (gpu_gate.GateSettings(used=1), gpu_gate.GateSettings(allow_busy=True),
                     gpu_gate.GateSettings(job_running=True)):
        assert gpu_gate.findings(busy, settings) == []


def test_a_hardware_xid_refuses_until_acknowledged():
    logged = health(xids=[xid(79), xid(79, at=T0 - 60), xid(13, "application")])
    found = messages(gpu_gate.findings(logged, gpu_gate.GateSettings()))
    assert found == ["node2 GPU 1 (0000:19:00.0): XID 79 (GPU has fallen off the bus) 2 times, last at 2026-11-25 "
                     "10:02:11 UTC, a hardware or driver fault, in the kernel log since boot; reset the GPU "
                     "(nvidia-smi -r -i 1, with nothing running on it) or reboot the node; once it is fixed without a "
                     "reboot, acknowledge it with gpufleet_xids_acknowledged_before: '2026-11-25T10:02:12+00:00' in "
                     "the node's host variables"]
    acknowledged = gpu_gate.acknowledgement_time("2026-11-25T10:02:12+00:00")
    assert gpu_gate.findings(logged, gpu_gate.GateSettings(acknowledged_before=acknowledged)) == []
    # A later XID is not covered by the acknowledgement.
    later = health(xids=[xid(79), xid(48, at=T0 + 3600)])
    assert [m.split(": ")[1][:6] for m in messages(gpu_gate.findings(later, gpu_gate.GateSettings(
        acknowledged_before=acknowledged)))] == ["XID 48"]


def test_an_xid_of_a_gpu_nvidia_smi_no_longer_lists():
    found = messages(gpu_gate.findings(health([gpu(0)], pci_gpus=None, xids=[xid(79, bus="0000:c6:00")]),
                                       gpu_gate.GateSettings()))
    assert found[0].startswith("node2 GPU at 0000:c6:00.0: XID 79") and "reboot the node; once" in found[0]


@pytest.mark.parametrize("text, expected", [
    ("2026-11-25T10:02:12+00:00", T0 + 1), ("2026-11-25T10:02:12Z", T0 + 1), ("2026-11-25 10:02:12", T0 + 1),
    ("2026-11-25T11:02:12+01:00", T0 + 1), ("", None), (None, None)])
def test_acknowledgement_times(text, expected):
    assert gpu_gate.acknowledgement_time(text) == expected


def test_a_bad_acknowledgement_time_is_an_error():
    with pytest.raises(ValueError):
        gpu_gate.acknowledgement_time("yesterday")


def test_an_nvlink_link_down_among_links_up():
    found = messages(gpu_gate.findings(health(nvlink={"0": {"up": 18, "down": []}, "1": {"up": 16, "down": [3, 7]}}),
                                       gpu_gate.GateSettings()))
    assert found == ["node2 GPU 1 (0000:19:00.0): NVLink links 3, 7 down while 34 other links of the node's GPUs are "
                     "up; check the NVLink fabric (nvidia-smi nvlink --status; Fabric Manager on NVSwitch systems), "
                     "or reboot the node"]
    # No link up anywhere: GPUs without NVLink, or PCIe cards without their bridge.
    assert gpu_gate.findings(health(nvlink={"0": {"up": 0, "down": [0, 1]}, "1": {"up": 0, "down": [0, 1]}}),
                             gpu_gate.GateSettings()) == []


def test_a_narrow_pcie_link_and_clocks_held_down_only_warn():
    found = gpu_gate.findings(health([gpu(0, pcie_width=8.0), gpu(1, event_reasons=0x1 | 0x40 | 0x80)]),
                              gpu_gate.GateSettings())
    assert messages(found) == []
    assert messages(found, refuse=False) == [
        "node2 GPU 0 (0000:18:00.0): its PCIe link runs at x8, narrower than its x16; the job runs, with slower host "
        "transfers; reseat the GPU or check its riser and slot",
        "node2 GPU 1 (0000:19:00.0): its clocks are held down (HW thermal slowdown, HW power brake slowdown) at 0% "
        "utilisation; the job runs, slower; check the node's cooling and power supply"]


UNREADABLE = ("unreadable: /dev/kmsg: Operation not permitted; journalctl shows this user no kernel message of this "
              "boot (exit 0)")


def test_an_unreadable_kernel_log_warns_that_xids_were_not_checked_or_refuses_where_required():
    found = gpu_gate.findings(health(kernel_log=UNREADABLE), gpu_gate.GateSettings())
    assert messages(found) == []
    assert messages(found, refuse=False) == [
        "node2: XIDs were not checked: the kernel log is %s; run as a user who may read /dev/kmsg or the kernel's "
        "journal (root, or the adm or systemd-journal group); gpufleet_xid_check_required=true refuses such a node "
        "instead" % UNREADABLE]
    required = gpu_gate.judge(health(kernel_log=UNREADABLE), xid_check_required="true")
    assert messages(required) == [
        "node2: XIDs were not checked: the kernel log is %s; run as a user who may read /dev/kmsg or the kernel's "
        "journal (root, or the adm or systemd-journal group)" % UNREADABLE]


def test_a_kernel_log_path_that_cannot_be_one_refuses_naming_the_variable():
    found = gpu_gate.findings(health(kernel_log="invalid: /var/log is neither a file nor a character device"),
                              gpu_gate.GateSettings())
    assert messages(found) == ["node2: gpufleet_kernel_log: /var/log is neither a file nor a character device; point "
                               "it at /dev/kmsg (the default) or at a file in /dev/kmsg's record format"]


def test_nvidia_smi_failing_on_a_gpu_node_refuses():
    found = gpu_gate.findings(health([], error="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                                              "driver."), gpu_gate.GateSettings())
    assert messages(found)[0].startswith("node2: nvidia-smi fails: NVIDIA-SMI has failed")


def test_refusals_come_first_in_order():
    found = gpu_gate.findings(health([gpu(0, pcie_width=8.0), gpu(1, ecc_uncorrected=1.0)], xids=[xid(79)],
                                     lost=[{"bus_id": "0000:1a:00.0", "error": "GPU is lost"}], pci_gpus=3),
                              gpu_gate.GateSettings())
    assert [finding.refuse for finding in found] == [True, True, True, False]
    assert [finding.fact.split(" ")[0] for finding in found] == ["nvidia-smi", "1", "XID", "its"]


def _diag(name, rc, level=1):
    from ansible_collections.gpufleet.cluster.plugins.module_utils._node import dcgm_diag

    with open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "dcgm", name)) as handle:
        return dict(dcgm_diag.parse(handle.read(), rc), present=True, level=level)


def test_dcgm_s_diagnostic_with_health_diag():
    """health_diag=1: gpufleet.cluster.dcgm_diag's result under the health's dcgm, from the corpus in
    tests/fixtures/dcgm (a real persistence-mode warning; a pending page retirement, made from DCGM's source)."""
    found = gpu_gate.findings(health(dcgm=_diag("dcgm-4.5.2-r1-pending-retirement.json", 226)), gpu_gate.GateSettings())
    assert messages(found) == [
        "node2 GPU 1: fails DCGM's level-1 diagnostic (software (fail: RESET): Page Retirement/Row Remap: A pending "
        "retired page has been detected in GPU 1. Monitor - this GPU can still perform workload); see dcgmi diag -r 3 "
        "on the node; reset the GPU, or take it out of service"]
    warned = gpu_gate.findings(health(dcgm=_diag("dcgm-4.2.3-r1-persistence-disabled.json", 226)),
                               gpu_gate.GateSettings())
    assert messages(warned) == []  # a warning does not refuse the launch
    assert messages(warned, refuse=False) == [
        "node2 GPU 0: DCGM's level-1 diagnostic warns (software (warn: CONFIG): Persistence Mode: Persistence mode for "
        'GPU 0 is disabled. Enable persistence mode by running "nvidia-smi -i <gpuId> -pm 1 " as root.); the job runs; '
        "fix what DCGM names"]
    assert messages(gpu_gate.findings(health(dcgm={"present": False}), gpu_gate.GateSettings()), refuse=False) == [
        "node2: health_diag=1 asks for DCGM's diagnostic, and DCGM is not installed; provision the node with "
        "-e dcgm_enabled=true, or leave health_diag out"]
    assert gpu_gate.findings(health(dcgm={"skipped": True}), gpu_gate.GateSettings()) == []


def test_the_tests_dcgm_did_not_run_are_warned_of_never_passed_in_silence():
    """The real level-2 capture (GB10, DCGM 4.5.2) whose memory and pcie plugins DCGM skipped, giving no reason: the
    GPU is warned of by name, with DCGM's own way to run them; the job still runs. With them allowed (the capture's
    pair) only the persistence-mode warning is left."""
    skipped = gpu_gate.findings(health(dcgm=_diag("dcgm-4.5.2-r2-memory-pcie-skipped.json", 226, level=2)),
                                gpu_gate.GateSettings())
    assert messages(skipped) == []
    assert messages(skipped, refuse=False) == [
        "node2 GPU 0: DCGM's level-2 diagnostic did not run memory, pcie on it; the job runs, without those tests' "
        "word on this GPU; DCGM runs a test only on the GPU models its diag-skus.yaml allows it for: dcgmi diag -r 2 "
        "-p memory.is_allowed=true runs it anyway",
        "node2 GPU 0: DCGM's level-2 diagnostic warns (software (warn: CONFIG): Persistence Mode: Persistence mode for "
        'GPU 0 is disabled. Enable persistence mode by running "nvidia-smi -i <gpuId> -pm 1 " as root.); the job runs; '
        "fix what DCGM names"]
    allowed = gpu_gate.findings(health(dcgm=_diag("dcgm-4.5.2-r2-memory-pcie-allowed.json", 226, level=2)),
                                gpu_gate.GateSettings())
    assert [finding.fact.split(" (")[0] for finding in allowed] == ["DCGM's level-2 diagnostic warns"]
    # A GPU on which nothing ran at all, and DCGM 3's deployment checks (words, no is_allowed parameter to name).
    nothing = {"present": True, "level": 1, "gpus": [
        {"gpu": 1, "entity": "GPU 1", "result": "Skip", "failed": [], "messages": [], "skipped": ["Persistence Mode"]}]}
    assert messages(gpu_gate.findings(health(dcgm=nothing), gpu_gate.GateSettings()), refuse=False) == [
        "node2 GPU 1: none of DCGM's level-1 tests ran on it (skipped: Persistence Mode); the job runs, without those "
        "tests' word on this GPU"]


def test_xid_154_advises_the_recovery_action_it_names():
    event = dict(xid(154), action="Node Reboot Required",
                 detail="GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)")
    (refusal,) = messages(gpu_gate.findings(health(xids=[event]), gpu_gate.GateSettings()))
    assert "XID 154 (GPU recovery action changed: Node Reboot Required)" in refusal
    assert "; reboot the node (the driver asks for it: Node Reboot Required); once it is fixed" in refusal
    drain = dict(event, action="Drain P2P")
    assert "stop the processes that transfer peer-to-peer with this GPU (the driver asks to drain P2P)" in messages(
        gpu_gate.findings(health(xids=[drain]), gpu_gate.GateSettings()))[0]
    # A change back to None says the GPU recovered: nothing to refuse.
    assert gpu_gate.findings(health(xids=[dict(event, action="None")]), gpu_gate.GateSettings()) == []


def test_a_recovery_action_nvidia_smi_reports_refuses_naming_it():
    found = gpu_gate.findings(health([gpu(0, recovery_action="Reset"), gpu(1, recovery_action="None")]),
                              gpu_gate.GateSettings())
    assert messages(found) == ["node2 GPU 0 (0000:18:00.0): the driver asks for a recovery action: Reset; reset the GPU "
                               "(nvidia-smi -r -i 0, with nothing running on it) or reboot the node"]


def test_a_gpu_whose_nvlink_fabric_is_not_completed_refuses_naming_its_state():
    found = gpu_gate.findings(health([gpu(0, fabric_state="Completed", fabric_status="Success"),
                                      gpu(1, fabric_state="In Progress", fabric_status="N/A")]),
                              gpu_gate.GateSettings())
    assert messages(found) == [
        "node2 GPU 1 (0000:19:00.0): its NVLink fabric is In Progress (status N/A), not Completed with Success: CUDA "
        "cannot start on it; check Fabric Manager (systemctl status nvidia-fabricmanager; its log "
        "/var/log/fabricmanager.log), wait while it is In Progress, or reboot the node"]


def _nvlink_capture(name):
    import subprocess

    with open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "nvidia_smi", name)) as handle:
        out = handle.read()
    return gpu_gate.gpu_health.nvlink_states(lambda cmd, **_kw: subprocess.CompletedProcess(cmd, 0, out, ""))


def test_a_gpu_with_no_nvlink_link_up_beside_gpus_with_theirs_is_named():
    """A GPU for which nvidia-smi prints "all links are inActive" while the node's other GPUs have links up: on a
    workstation (no NVLink switch; the real capture of three RTX A6000s, GPU 2 without a bridge) a warning; on an
    NVSwitch board (GPU 2's real lines from an HGX B200 beside two GPUs with their 18 links up) a refusal: NCCL
    would reach it over PCIe, or not at all, and nothing else says so. Without any link up on a node without a
    switch (two A100 PCIe without a bridge, real) there is nothing to say."""
    workstation = [gpu(0), gpu(1), gpu(2)]
    found = gpu_gate.findings(health(workstation, nvlink=_nvlink_capture("nvlink-status-rtx-a6000-one-gpu-unbridged.txt"),
                                     pci_gpus=3), gpu_gate.GateSettings())
    assert messages(found) == []
    assert messages(found, refuse=False) == [
        "node2 GPU 2 (0000:1a:00.0): none of its NVLink links is up (nvidia-smi: all links are inActive) while 8 links "
        "of the node's other GPUs are up; the job runs, reaching it over PCIe; fit or reseat its NVLink bridge"]
    board = dict(_nvlink_capture("nvlink-status-b200-gpu2-all-inactive-excerpt.txt"),
                 **{"0": {"up": 18, "down": []}, "1": {"up": 18, "down": []}})
    refused = gpu_gate.findings(health(workstation, nvlink=board, pci_gpus=3, fabric_switches=2), gpu_gate.GateSettings())
    assert messages(refused) == [
        "node2 GPU 2 (0000:1a:00.0): none of its NVLink links is up (nvidia-smi: all links are inActive) while 36 "
        "links of the node's other GPUs are up, on a node with 2 NVLink switches: it is cut off from the fabric; check "
        "Fabric Manager (systemctl status nvidia-fabricmanager; /var/log/fabricmanager.log) and the GPU's fabric state "
        "(nvidia-smi -q), or reboot the node"]
    unbridged = _nvlink_capture("nvlink-status-a100-pcie-no-bridge.txt")
    assert gpu_gate.findings(health(nvlink=unbridged), gpu_gate.GateSettings()) == []
    # The same GPUs on a node with NVLink switches: the whole fabric is down.
    assert [f.fact.split(":")[0] for f in gpu_gate.findings(health(nvlink=unbridged, fabric_switches=4),
                                                            gpu_gate.GateSettings())] == [
        "no NVLink link is up on any GPU, and the node has 4 NVLink switches (an NVSwitch or NVLink5 system)"]


def test_no_nvlink_up_on_a_node_with_nvlink_switches_is_a_refusal_not_no_nvlink():
    down = {"0": {"up": 0, "down": [0, 1]}, "1": {"up": 0, "down": [0, 1]}}
    assert gpu_gate.findings(health(nvlink=down), gpu_gate.GateSettings()) == []  # PCIe GPUs, no switch
    found = gpu_gate.findings(health(nvlink=down, fabric_switches=4), gpu_gate.GateSettings())
    assert messages(found) == [
        "node2: no NVLink link is up on any GPU, and the node has 4 NVLink switches (an NVSwitch or NVLink5 system): "
        "its fabric is down; check Fabric Manager (systemctl status nvidia-fabricmanager; /var/log/fabricmanager.log) "
        "and nvidia-smi nvlink --status, or reboot the node"]


def test_a_fatal_nvswitch_sxid_refuses_naming_the_switch_and_a_non_fatal_one_does_not():
    fatal = {"bus_id": "0000:06:00.0", "xid": 20034, "sxid": True, "switch": "nvswitch1", "class": "hardware",
             "meaning": "NVSwitch fatal error", "detail": "Link 48 LTSSM Fault Up", "time": T0}
    found = gpu_gate.findings(health(xids=[fatal, dict(fatal, time=T0 + 1)]), gpu_gate.GateSettings())
    (refusal,) = messages(found)
    assert refusal.startswith("node2 NVSwitch at 0000:06:00.0 (nvidia-nvswitch1): SXid 20034 (NVSwitch fatal error: "
                              "Link 48 LTSSM Fault Up) 2 times, last at ")
    assert "; reboot the node, which resets the NVSwitches and GPUs of its NVLink fabric; once it is fixed" in refusal
    non_fatal = dict(fatal, xid=12028, **{"class": "non-fatal"})
    assert gpu_gate.findings(health(xids=[non_fatal]), gpu_gate.GateSettings()) == []


@pytest.mark.parametrize("imex, refuse, fact", [
    (None, None, None),  # not a multi-node NVLink node
    ({"installed": True, "state": "active", "channels": ["channel0"]}, None, None),
    ({"installed": True, "state": "active", "channels": []}, True, "the node has no IMEX channel"),
    ({"installed": True, "state": "failed"}, True, "NVIDIA IMEX is failed on a multi-node NVLink node"),
    ({"installed": True, "state": "inactive"}, True, "NVIDIA IMEX is inactive on a multi-node NVLink node"),
    ({"installed": False, "state": "not installed"}, False, "NVIDIA IMEX is not installed"),
    ({"installed": True, "state": "no systemd"}, False, "systemd is not this node's init"),
])
def test_imex_on_a_gb200_node_refuses_when_installed_and_not_running(imex, refuse, fact):
    """GB200/GB300 NVL trays share GPU memory across the NVLink domain through IMEX; without it NCCL falls back to
    the network between trays with no error. Installed and not active refuses, naming the service and its log; not
    installed (the role turned off) and a node without systemd only warn; running without an IMEX channel refuses
    (the driver creates none by default, and CUDA's fabric-handle calls then fail with a permission error)."""
    found = gpu_gate.findings(health(imex=imex), gpu_gate.GateSettings())
    if refuse is None:
        assert found == []
        return
    assert len(found) == 1 and found[0].refuse is refuse and fact in found[0].fact, found
    if refuse and imex["state"] != "active":
        assert "systemctl status nvidia-imex" in found[0].fix and "/var/log/nvidia-imex.log" in found[0].fix
    if refuse and imex["state"] == "active":
        assert "nvidia_imex_channel0" in found[0].fix
