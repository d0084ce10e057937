"""GPU generations from PCI device IDs: the open kernel modules' Turing floor, NVLSM, and nvcc's -gencode list."""

import pytest

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._provision import nvidia_hardware as hw
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._provision.nvidia import StackError

V100, P100, T4, A100, H100, H200, L40S, B200 = "0x1db1", "0x15f8", "0x1eb8", "0x20b0", "0x2330", "0x2335", "0x26b9", "0x2901"


def test_compute_capability_by_device_id():
    assert [hw.gpu_model(d)["capability"] for d in (P100, V100, T4, A100, H100, H200, L40S, B200)] == [
        (6, 0), (7, 0), (7, 5), (8, 0), (9, 0), (9, 0), (8, 9), (10, 0)]
    assert hw.gpu_model("0x0001") == {"device": "0x0001", "capability": None, "chip": "unknown"}
    with pytest.raises(StackError):
        hw.gpu_model("GV100")


def test_open_modules_refuse_volta_and_accept_hopper():
    refusal = hw.open_modules_refusal("node3", [V100], "open")
    assert refusal and refusal.startswith("node3: nvidia_driver_flavor=open needs Turing or newer GPUs")
    assert "0x1db1 (Volta GV100" in refusal
    assert hw.open_modules_refusal("node3", [P100], "open")
    assert hw.open_modules_refusal("node3", [H100, H200], "open") is None
    assert hw.open_modules_refusal("node3", [T4], "open") is None
    assert hw.open_modules_refusal("node3", [V100], "proprietary") is None
    # An older chip outside the table (Kepler, 0x1024) is still below Turing's block.
    assert hw.open_modules_refusal("node3", ["0x1024"], "open")


def test_nvlsm_on_nvlink5_systems_and_with_blackwell_data_center_gpus():
    # HGX B200/B300 have no NVSwitch on the PCI bus: their switch management ports (nvlink5) or their GPUs tell.
    assert hw.needs_nvlsm([B200] * 8, nvlink5_count=0)
    assert hw.needs_nvlsm(["0x3182"] * 8, nvlink5_count=0)  # B300
    assert hw.needs_nvlsm([], nvlink5_count=2)  # found by the switch ports, GPUs not read (gpu-less test nodes)
    assert not hw.needs_nvlsm([H100] * 8, nvlink5_count=0)
    assert not hw.needs_nvlsm(["0x2b85"], nvlink5_count=0)  # RTX PRO 6000 Blackwell: not a data-center part


def test_blackwell_ultra_is_in_the_device_table():
    # Driver README, Appendix A: B300 10de:3182, GB300 10de:31c2; compute capability 10.3.
    assert hw.gpu_model("0x3182")["capability"] == hw.gpu_model("0x31c2")["capability"] == (10, 3)


def test_gencode_follows_the_gpus_found():
    assert hw.nvcc_gencode("13.0", [H100, H100, A100]) == (
        "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90 "
        "-gencode=arch=compute_90,code=compute_90")
    assert hw.nvcc_gencode("12.8", [B200]) == (
        "-gencode=arch=compute_100,code=sm_100 -gencode=arch=compute_100,code=compute_100")


def test_gencode_without_known_gpus_is_the_toolkits_default():
    assert hw.nvcc_gencode("13.0", []) == " ".join(
        ["-gencode=arch=compute_%s,code=sm_%s" % (c, c) for c in ("75", "80", "90", "100", "120")]
        + ["-gencode=arch=compute_120,code=compute_120"])
    assert "compute_70" in hw.nvcc_gencode("12.8", []) and "compute_100" in hw.nvcc_gencode("12.8", [])
    assert "compute_100" not in hw.nvcc_gencode("12.4", [])


def test_gencode_refuses_a_gpu_the_toolkit_cannot_build_for():
    with pytest.raises(StackError, match="node2: CUDA 13.0 builds no code for compute capability 7.0"):
        hw.nvcc_gencode("13.0", [V100], host="node2")
    with pytest.raises(StackError, match="CUDA 12.4 builds no code for compute capability 10.0"):
        hw.nvcc_gencode("12.4", [B200])


def test_gencode_refuses_a_b300_below_cuda_12_9_which_added_sm_103():
    """CUDA 12.8's range reaches 12.0, yet sm_103 (B300, device 0x3182) arrived in 12.9 (CUDA 12.9 features)."""
    with pytest.raises(StackError, match=r"node4: CUDA 12\.8 builds no code for compute capability 10\.3 \(the node's "
                                         r"GPUs\), which CUDA 12\.9 added; set cuda_toolkit_version to 12\.9 or later"):
        hw.nvcc_gencode("12.8", ["0x3182"], host="node4")
    assert hw.nvcc_gencode("12.9", ["0x3182"]) == (
        "-gencode=arch=compute_103,code=sm_103 -gencode=arch=compute_103,code=compute_103")
    assert "sm_103" in hw.nvcc_gencode("13.0", ["0x3182", B200])


def test_the_device_id_blocks_do_not_overlap():
    blocks = sorted(hw.COMPUTE_CAPABILITY_BY_DEVICE_ID)
    for (first, last, _c, chip), (next_first, _l, _n, next_chip) in zip(blocks, blocks[1:]):
        assert first <= last < next_first, (chip, next_chip)


def test_branches_above_580_are_refused_before_turing_and_the_proprietary_modules_on_blackwell_and_grace_hopper():
    refusal = hw.branch_flavor_refusal("node3", [H100, V100], 590, "proprietary")
    assert refusal == ("node3: nvidia_driver_branch=590 does not support the GPU 0x1db1 (Volta GV100 (Tesla V100, "
                       "TITAN V)): 580 is the last driver branch for Maxwell, Pascal and Volta GPUs; set "
                       "nvidia_driver_branch: 580 for this node")
    assert hw.branch_flavor_refusal("node3", [P100], "600", "proprietary")
    assert hw.branch_flavor_refusal("node3", ["0x13bb"], 590, "proprietary")  # Maxwell, outside the table
    assert hw.branch_flavor_refusal("node3", [V100, P100], 580, "proprietary") is None
    assert hw.branch_flavor_refusal("node3", [T4, H100], 590, "proprietary") is None
    blackwell = hw.branch_flavor_refusal("node4", [B200], 580, "proprietary")
    assert blackwell and blackwell.startswith("node4: nvidia_driver_flavor=proprietary cannot drive the GPU 0x2901")
    assert "set nvidia_driver_flavor: open" in blackwell
    assert "Grace Hopper GH200" in hw.branch_flavor_refusal("node5", ["0x2342"], 580, "proprietary")
    assert hw.branch_flavor_refusal("node4", [B200, "0x2342"], 580, "open") is None
    assert hw.branch_flavor_refusal("node4", [V100], "latest", "open") is None  # the branch check names that one
