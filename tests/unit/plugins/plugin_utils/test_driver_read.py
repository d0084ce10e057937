"""The one rule of when an NVIDIA role uses the driver role's read of a node (issue 49: it was six Jinja conditions
in six roles' vars): held against what the nvidia_facts module really returns, run through its entry point on a
fake sysfs."""

import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpufleet.cluster.plugins.filter.nvidia import FilterModule
from ansible_collections.gpufleet.cluster.plugins.modules import nvidia_facts
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._provision.driver_read import covers

DRIVER_PACKAGES = ["nvidia-driver-580-open", "nvidia-open"]


def read_node(capsys, sys_root, packages=()):
    with patch_module_args({"sys_root": str(sys_root), "driver_packages": list(packages)}):
        with pytest.raises(SystemExit):
            nvidia_facts.main()
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def sysfs(tmp_path):
    (tmp_path / "bus" / "pci" / "devices").mkdir(parents=True)
    return tmp_path


def test_the_driver_roles_read_stands_for_a_read_of_the_same_sysfs_and_packages(capsys, sysfs):
    read = read_node(capsys, sysfs, DRIVER_PACKAGES)
    assert read["read_of"] == {"sys_root": str(sysfs), "driver_packages": DRIVER_PACKAGES}
    assert covers(read, str(sysfs))                       # the PCI bus, the HCAs (repo, MPI, nccl-tests, peermem, DCGM)
    assert covers(read, str(sysfs) + "/")                 # the same folder, written with a slash
    assert covers(read, str(sysfs), DRIVER_PACKAGES)      # the driver's package version too (Fabric Manager, IMEX)


def test_another_sysfs_other_packages_or_a_driver_installed_since_mean_a_read_of_the_roles_own(capsys, sysfs):
    read = read_node(capsys, sysfs, DRIVER_PACKAGES)
    assert not covers(read, "/sys")
    assert not covers(read, str(sysfs), ["nvidia-driver-570-open", "nvidia-open"])  # another branch's packages
    assert not covers(read, str(sysfs), list(reversed(DRIVER_PACKAGES)))           # another first package found
    assert not covers(read, str(sysfs), DRIVER_PACKAGES, driver_moved=True)
    assert covers(read, str(sysfs), driver_moved=True)  # an install moves the version, not the PCI bus
    assert not covers(read_node(capsys, sysfs), str(sysfs), DRIVER_PACKAGES)        # no package was asked


@pytest.mark.parametrize("read", [None, {}, {"skipped": True, "changed": False}, {"gpus": [], "gpu_present": False},
                                  "not a read"])
def test_no_read_a_skipped_one_or_one_that_does_not_say_what_it_read_is_never_used(read):
    assert covers(read, "/sys") is False


def test_the_roles_filter_is_the_rule(capsys, sysfs):
    rule = FilterModule().filters()["driver_read"]
    read = read_node(capsys, sysfs, DRIVER_PACKAGES)
    assert rule(read, str(sysfs), DRIVER_PACKAGES, False) is True
    assert rule(read, str(sysfs), DRIVER_PACKAGES, True) is False
    assert rule(None, str(sysfs)) is False
