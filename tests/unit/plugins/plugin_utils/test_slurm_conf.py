"""slurm.conf and gres.conf from the inventory: what Slurm needs to find each node, and the errors that name the
host and variable at fault."""

import os

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.filter.slurm import gres_conf, slurm_conf
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._provision import slurm

# What slurmd -C printed on a 2-core container node of the test cluster, and on an 8-GPU server.
SLURMD_C_SMALL = ("NodeName=gpufleet-test-node0 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 "
                  "RealMemory=23979\nUpTime=0-09:57:51\n")
SLURMD_C_HGX = ("NodeName=gpu01 CPUs=224 Boards=1 SocketsPerBoard=2 CoresPerSocket=56 ThreadsPerCore=2 "
                "RealMemory=2063700\nUpTime=12-01:02:03\n")


def node(name, hostname=None, address="192.0.2.10", slurmd_c=SLURMD_C_SMALL, gpus=0):
    return {"name": name, "hostname": hostname or name, "address": address, "slurmd_c": slurmd_c, "gpus": gpus}


def test_slurmd_c_is_read_into_the_counts_slurm_conf_needs():
    assert slurm.node_hardware(SLURMD_C_HGX) == {"CPUs": 224, "Boards": 1, "SocketsPerBoard": 2,
                                                 "CoresPerSocket": 56, "ThreadsPerCore": 2, "RealMemory": 2063700}


def test_every_node_gets_one_line_in_inventory_order_with_its_address_and_gpus():
    nodes = [node("gpu02", address="192.0.2.12", slurmd_c=SLURMD_C_HGX, gpus=8),
             node("gpu01", address="192.0.2.11", slurmd_c=SLURMD_C_HGX, gpus=8)]
    text = slurm_conf(nodes, controller="gpu02")
    lines = text.splitlines()
    assert "SlurmctldHost=gpu02(192.0.2.12)" in lines
    assert "GresTypes=gpu" in lines
    node_lines = [line for line in lines if line.startswith("NodeName=")]
    assert node_lines == [
        "NodeName=gpu02 NodeAddr=192.0.2.12 CPUs=224 Boards=1 SocketsPerBoard=2 CoresPerSocket=56 ThreadsPerCore=2 "
        "RealMemory=2063700 Gres=gpu:8 State=UNKNOWN",
        "NodeName=gpu01 NodeAddr=192.0.2.11 CPUs=224 Boards=1 SocketsPerBoard=2 CoresPerSocket=56 ThreadsPerCore=2 "
        "RealMemory=2063700 Gres=gpu:8 State=UNKNOWN",
    ]
    assert lines[-1] == "PartitionName=gpufleet Nodes=gpu02,gpu01 Default=YES MaxTime=INFINITE State=UP"


def test_a_hostname_other_than_the_inventory_name_is_slurms_nodehostname_and_the_controllers_name():
    nodes = [node("node0", hostname="gpufleet-test-node0", address="10.213.77.10"),
             node("node1", hostname="gpufleet-test-node1", address="10.213.77.11")]
    text = slurm_conf(nodes, controller="node0")
    assert "SlurmctldHost=gpufleet-test-node0(10.213.77.10)" in text.splitlines()
    assert "NodeName=node1 NodeHostname=gpufleet-test-node1 NodeAddr=10.213.77.11 CPUs=2 " in text
    assert "GresTypes" not in text and "Gres=" not in text


def test_settings_follow_in_order_and_memory_can_be_held_back():
    text = slurm_conf([node("a")], controller="a", settings={"ProctrackType": "proctrack/linuxproc",
                                                              "TaskPlugin": "task/none"}, memory_reserve_mb=1000)
    lines = text.splitlines()
    assert lines.index("ProctrackType=proctrack/linuxproc") < lines.index("TaskPlugin=task/none")
    assert "RealMemory=22979" in text


@pytest.mark.parametrize("nodes, controller, settings, message", [
    ([node("a")], "b", {}, "slurm_controller: 'b' is not one of the node group's hosts (a)"),
    ([node("a", hostname="bad name")], "a", {}, "a: the hostname 'bad name' is not a name Slurm accepts"),
    ([node("a")], "a", {"SlurmctldHost": "x"}, "slurm_extra_settings: SlurmctldHost are derived from the inventory"),
    ([node("a", slurmd_c="slurmd: error: cannot read config\n")], "a", {}, "a: slurmd -C did not say CPUs"),
])
def test_bad_input_is_refused_naming_the_host_and_variable(nodes, controller, settings, message):
    with pytest.raises(AnsibleFilterError, match="slurm_conf: ") as raised:
        slurm_conf(nodes, controller=controller, settings=settings)
    assert message in str(raised.value)


def test_gres_conf_lists_each_gpus_device_file():
    assert gres_conf(node("gpu01", gpus=2)).splitlines()[1:] == [
        "NodeName=gpu01 Name=gpu File=/dev/nvidia0", "NodeName=gpu01 Name=gpu File=/dev/nvidia1"]
    assert gres_conf(node("cpu01")).splitlines()[1:] == []


def test_each_distributions_paths_from_the_roles_data_reach_slurm_conf():
    vars_file = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "slurm", "vars", "main.yml")
    with open(vars_file) as handle:
        by_family = yaml.safe_load(handle)["_slurm_by_family"]
    assert set(by_family) == {"Debian", "RedHat"}
    el = slurm_conf([node("a")], controller="a", settings=by_family["RedHat"]["settings"]).splitlines()
    debian = slurm_conf([node("a")], controller="a", settings=by_family["Debian"]["settings"]).splitlines()
    assert "StateSaveLocation=/var/spool/slurm/ctld" in el and "SlurmdSpoolDir=/var/spool/slurm/d" in el
    assert "StateSaveLocation=/var/lib/slurm/slurmctld" in debian and "SlurmdSpoolDir=/var/lib/slurm/slurmd" in debian
    assert by_family["RedHat"]["controller_packages"] == ["slurm-slurmctld"]
    assert by_family["Debian"]["controller_packages"] == ["slurmctld"]
