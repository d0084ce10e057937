"""The NVIDIA stack's version rules: numeric comparison, driver/CUDA compatibility, NCCL builds, reboot decision."""

import pytest

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._provision import nvidia
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._provision.nvidia import StackError

TABLE = {"12.4": 550, "12.6": 560, "12.8": 570, "12.9": 575, "13.0": 580}


@pytest.mark.parametrize("left, right, expected", [
    ("10", "8", 1), ("8", "10", -1), ("12.10", "12.9", 1), ("570.124.06", "570.124.6", 0), ("570", "570.0.0", 0),
    ("2.26.2-1+cuda12.8", "2.26.10-1+cuda12.8", -1), ("575.51.03", "570.172.08", 1),
])
def test_versions_compare_numerically(left, right, expected):
    assert nvidia.version_compare(left, right) == expected


def test_string_comparison_would_be_wrong_here():
    assert "10" < "8" and nvidia.version_compare("10", "8") == 1


@pytest.mark.parametrize("bad", ["", "abc", "v12", None, "1..2"])
def test_not_a_version(bad):
    with pytest.raises(StackError):
        nvidia.version_tuple(bad)


def test_cuda_the_driver_supports():
    assert nvidia.check_cuda_driver("12.8", 570, TABLE)["needs"] == 570
    assert nvidia.check_cuda_driver("12.4.1", "580", TABLE)["cuda"] == "12.4"


def test_cuda_newer_than_the_driver_supports_is_refused():
    with pytest.raises(StackError) as err:
        nvidia.check_cuda_driver("13.0", 570, TABLE)
    assert str(err.value) == ("cuda_toolkit_version: CUDA 13.0 needs driver branch 580 or newer, but "
                              "nvidia_driver_branch is 570; the newest CUDA it runs is 12.9")  # 12.x: from 525


def test_cuda_missing_from_the_table_is_refused():
    with pytest.raises(StackError, match="12.7 is not in the compatibility table"):
        nvidia.check_cuda_driver("12.7", 570, TABLE)


@pytest.mark.parametrize("branch", ["latest", "57O", "5700", True, "570.124", ""])
def test_driver_branch_must_be_a_number(branch):
    with pytest.raises(StackError, match="nvidia_driver_branch: .* is not a driver branch"):
        nvidia.driver_branch(branch)


def test_nccl_build_for_the_cuda_version():
    assert nvidia.check_nccl_for_cuda("2.26.2-1+cuda12.8", "12.8") == {"nccl": "2.26.2", "cuda": "12.8",
                                                                       "minor_differs": False}


def test_nccl_built_for_another_minor_of_the_major_runs_where_the_driver_runs_that_minor():
    # NVIDIA built 2.30.4 for 12.9 and 13.2 only: a CUDA 12.8 or 13.1 toolkit gets one of those.
    assert nvidia.check_nccl_for_cuda("2.30.4-1+cuda12.9", "12.8", 580)["minor_differs"] is True
    assert nvidia.check_nccl_for_cuda("2.30.4-1+cuda12.9", "12.8", 525)["cuda"] == "12.9"
    assert nvidia.check_nccl_for_cuda("2.30.4-1+cuda13.2", "13.1", 580)["nccl"] == "2.30.4"
    assert nvidia.check_nccl_for_cuda("2.26.2-1+cuda12.4", "12.8")["minor_differs"] is True  # no branch: not judged


@pytest.mark.parametrize("nccl, cuda, branch, needle", [
    ("2.26.2-1+cuda11.8", "12.8", 580, "another CUDA major"),
    ("2.30.4-1+cuda12.9", "13.0", 580, "another CUDA major"),
    ("2.30.4-1+cuda12.9", "12.8", 520, "which driver branch 520 cannot run .* needs 525 or newer"),
    ("2.26.2-1+cuda11.4", "11.8", 580, "pin the build for cuda_toolkit_version 11.8"),
    ("2.26.2", "12.8", 580, "is not a package version"),
])
def test_wrong_nccl_build_is_refused(nccl, cuda, branch, needle):
    with pytest.raises(StackError, match="nccl_version: .*" + needle):
        nvidia.check_nccl_for_cuda(nccl, cuda, branch)


@pytest.mark.parametrize("installed, loaded, gpu, allowed, reboot", [
    ("570.124.06", "570.124.06", True, True, False),   # wanted driver already loaded: left alone
    ("570.124.06", "560.35.03", True, True, True),     # upgraded: reboot to load it
    ("570.124.06", None, True, True, True),            # installed, nothing loaded
    ("570.124.06", "560.35.03", True, False, False),   # needed, but reboots not allowed
    ("570.124.06", None, False, True, False),          # no GPU: never
    (None, None, True, True, False),                   # nothing installed
])
def test_reboot_only_when_the_loaded_driver_differs(installed, loaded, gpu, allowed, reboot):
    assert nvidia.reboot_decision(installed, loaded, gpu, allowed)["reboot"] is reboot


def test_the_roles_table_runs_every_cuda_13_on_the_580_long_term_branch_through_minor_version_compatibility():
    import os  # pylint: disable=import-outside-toplevel

    import yaml  # pylint: disable=import-outside-toplevel

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
    with open(os.path.join(repo, "roles", "cuda_toolkit", "defaults", "main.yml")) as handle:
        table = yaml.safe_load(handle)["cuda_toolkit_driver_minimum"]
    assert (table["13.1"], table["13.2"], table["13.3"], table["13.4"]) == (590, 595, 610, 616)
    # NVIDIA's support matrix: all of CUDA 13.x on R580 (minor version compatibility), 12.x on 525 and later.
    for cuda in ("13.0", "13.1", "13.2", "13.3", "13.4"):
        assert nvidia.check_cuda_driver(cuda, 580, table)["compatibility"] is (cuda != "13.0")
    assert nvidia.check_cuda_driver("13.2", 595, table) == {"cuda": "13.2", "driver_branch": 595, "needs": 595,
                                                           "compatibility": False}
    assert nvidia.check_cuda_driver("12.9", 550, table)["compatibility"] is True
    with pytest.raises(nvidia.StackError, match="CUDA 13.4 needs driver branch 580 or newer, but nvidia_driver_branch "
                                                "is 575; the newest CUDA it runs is 12.9"):
        nvidia.check_cuda_driver("13.4", 575, table)
