"""The dcgm role's decisions: CUDA major per driver branch, package names and versions, refusals."""

import pytest

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._provision import dcgm
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._provision.nvidia import StackError


@pytest.mark.parametrize("branch, major", [(580, 13), ("590", 13), (575, 12), (570, 12), (525, 12), (535, 12),
                                           (470, 11), (450, 11)])
def test_the_driver_branch_gives_the_cuda_major_nvidia_smi_reports(branch, major):
    assert dcgm.driver_cuda_major(branch) == major
    assert dcgm.cuda_major("", branch) == major


def test_a_given_cuda_major_wins_and_one_dcgm_is_not_built_for_is_refused():
    assert dcgm.cuda_major("12", 580) == 12
    for wrong in ("10", "14", "12.8", True, "x"):
        with pytest.raises(StackError, match="dcgm_cuda_major: .* is not a CUDA major DCGM 4 is built for"):
            dcgm.cuda_major(wrong, 580)
    with pytest.raises(StackError, match="older than any branch DCGM 4 supports"):
        dcgm.driver_cuda_major(418)


def test_apt_specifications_carry_nvidias_epoch_and_any_revision_dnf_the_upstream_version():
    assert dcgm.package_specs(13, "4.5.2", "apt", False) == ["datacenter-gpu-manager-4-core=1:4.5.2-*",
                                                             "datacenter-gpu-manager-4-cuda13=1:4.5.2-*"]
    assert dcgm.package_specs("12", "4.5.2", "dnf", "false") == ["datacenter-gpu-manager-4-core-4.5.2",
                                                                "datacenter-gpu-manager-4-cuda12-4.5.2"]
    assert dcgm.package_names(12, False) == ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12"]


def test_the_proprietary_modules_the_cuda_build_recommends_are_pinned_and_held_with_it():
    """datacenter-gpu-manager-4-cuda<N> recommends DCGM's proprietary modules: left to apt's recommends they come at
    their newest version, unheld. Named with the rest (Azure/azhpc-images' install_dcgm.sh installs the four at one
    version), they are at dcgm_version and held."""
    assert dcgm.package_names(13) == ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13",
                                      "datacenter-gpu-manager-4-proprietary",
                                      "datacenter-gpu-manager-4-proprietary-cuda13"]
    assert dcgm.package_specs(12, "4.5.2", "apt")[2:] == ["datacenter-gpu-manager-4-proprietary=1:4.5.2-*",
                                                          "datacenter-gpu-manager-4-proprietary-cuda12=1:4.5.2-*"]
    assert dcgm.package_specs(12, "4.5.2", "dnf")[2:] == ["datacenter-gpu-manager-4-proprietary-4.5.2",
                                                          "datacenter-gpu-manager-4-proprietary-cuda12-4.5.2"]


@pytest.mark.parametrize("version", ["3.3.9", "1:4.5.2-1", "4.5.2-1", "4.5", "", None])
def test_versions_other_than_dcgm_4_upstream_are_refused_naming_the_variable(version):
    assert dcgm.preflight_error(version, "", 580).startswith("dcgm_version: ")


def test_good_inputs_have_no_problem():
    assert dcgm.preflight_error("4.5.2", "", 580) == ""
    assert dcgm.preflight_error("4.5.2", "", "nope").startswith("nvidia_driver_branch: ")


def test_the_node_gets_the_build_for_the_driver_it_runs():
    """The nvidia_driver role's branch where it manages the driver (node_driver None); the node's own driver where it
    does not (a driver the user installed or kept): a 570 driver reports CUDA 12 although the inventory says 580."""
    assert dcgm.node_cuda_major("", 580) == 13
    assert dcgm.node_cuda_major("", 580, node_driver="570.133.20") == 12
    assert dcgm.node_cuda_major("", 570, node_driver="580.95.05") == 13
    assert dcgm.node_cuda_major("13", 570, node_driver="570.133.20") == 13  # dcgm_cuda_major given wins


def test_a_gpu_older_than_turing_gets_the_cuda_12_build_on_a_cuda_13_driver():
    """CUDA 13 builds nothing for Maxwell, Pascal or Volta (CUDA 13.0 release notes): a V100 (10de:1db1) node on
    driver 580 gets cuda12; an H100 (10de:2330) node cuda13; an unknown device ID does not change it."""
    assert dcgm.node_cuda_major("", 580, devices=["0x1db1", "0x1db1"]) == 12
    assert dcgm.node_cuda_major("", 580, devices=["0x2330"]) == 13
    assert dcgm.node_cuda_major("", 580, devices=["0xffff"]) == 13
    assert dcgm.node_cuda_major("", 570, devices=["0x1db1"]) == 12


def test_the_exporter_is_the_release_built_against_dcgm_version_unless_one_is_given():
    assert dcgm.exporter_spec("", "4.5.2", "apt") == "datacenter-gpu-manager-exporter=4.8.1-*"
    assert dcgm.exporter_spec("", "4.5.3", "dnf") == "datacenter-gpu-manager-exporter-4.8.2"
    assert dcgm.exporter_spec("4.9.0", "4.5.2", "apt") == "datacenter-gpu-manager-exporter=4.9.0-*"
    assert dcgm.preflight_error("4.5.2", "", 580, "") == ""


@pytest.mark.parametrize("exporter, dcgm_version, said", [
    ("", "4.4.0", "dcgm_exporter_version: no DCGM exporter release is known here to be built against DCGM 4.4.0 "
                  "(known: 4.8.1 for 4.5.2, 4.8.2 for 4.5.3)"),
    ("4.5.2-4.8.1", "4.5.2", "dcgm_exporter_version: '4.5.2-4.8.1' is not a DCGM exporter release such as 4.8.1"),
    ("latest", "4.5.2", "dcgm_exporter_version: 'latest' is not"),
])
def test_an_exporter_release_that_cannot_be_installed_is_refused_naming_the_variable(exporter, dcgm_version, said):
    assert dcgm.preflight_error(dcgm_version, "", 580, exporter).startswith(said)
    assert dcgm.preflight_error(dcgm_version, "", 580) == ""  # the same DCGM without its exporter is fine
