"""Fabric Manager and nvidia-persistenced run for real on a node whose init is systemd (node6).

node6 boots systemd as its init (shared/TESTBED.md, "systemd as a node's init") and has a fake H100 and NVSwitch in
its sysfs (tests/cluster/testbed.py FAKE_SYS), so the driver role installs the driver and starts persistenced, and
the Fabric Manager role installs, enables and starts Fabric Manager. What this checks: that systemd runs the units
the roles leave (enabled, active, started again after a daemon restart), and the command lines it really runs:
nvidia-persistenced without --no-persistence-mode, which NVIDIA's Debian unit passes. Stand-ins: the daemons are
scripts that record their arguments and leave a process named as the daemon (tests/cluster/standin_repo.py); no
GPU, no NVSwitch and no NVIDIA software is involved.
"""

import pytest

import testbed
from harness import Cluster

pytestmark = pytest.mark.cluster

NODE = 6
TAGS = ("--tags", "nvidia_driver,nvidia_fabricmanager")


@pytest.fixture(scope="module")
def systemd_node(cluster):
    info = testbed.start_nodes(cluster.state, [NODE], name="systemd.yml")
    try:
        yield Cluster(info, cluster.state)
    finally:
        testbed.remove_nodes([NODE])


def systemctl(host, *args: str) -> str:
    return host.run("systemctl " + " ".join(args)).stdout.strip()


def test_fabric_manager_and_persistence_run_under_systemd(systemd_node):
    node = systemd_node
    name = node.nodes[0]
    host = node.host(name)
    assert systemctl(host, "is-system-running") in ("running", "degraded")
    first = node.playbook("provision.yml", *TAGS)
    assert first.rc == 0, first.out[-4000:]
    for unit in ("nvidia-fabricmanager", "nvidia-persistenced"):
        assert systemctl(host, "is-active", unit) == "active", host.run("systemctl status %s" % unit).stdout
    assert systemctl(host, "is-enabled", "nvidia-fabricmanager") == "enabled"
    # What systemd started: the drop-in's command line, not the packaged one that turns persistence mode off.
    args = host.file("/var/run/nvidia-persistenced/gpufleet-standin-args").content_string.strip()
    assert args == "--verbose", args
    assert "--no-persistence-mode" not in systemctl(host, "show", "-p", "ExecStart", "nvidia-persistenced")
    assert host.file("/run/gpufleet-standin/nv-fabricmanager-args").content_string.strip() == \
        "-c /usr/share/nvidia/nvswitch/fabricmanager.cfg"
    # The daemons' processes (the kernel keeps 15 characters of a name: matched on the command line).
    assert host.run("pgrep -f '^nv-fabricmanager '").rc == 0 and host.run("pgrep -f '^nvidia-persistenced '").rc == 0
    # Nothing changes the second time, the services running.
    second = node.playbook("provision.yml", *TAGS)
    assert second.rc == 0 and second.recap()[name]["changed"] == 0, second.out[-4000:]
    # Fabric Manager is enabled at boot: systemd starts it again after it is stopped and the manager re-executes.
    assert host.run("systemctl stop nvidia-fabricmanager && systemctl daemon-reexec").rc == 0
    assert systemctl(host, "start", "multi-user.target") == ""
    assert systemctl(host, "is-active", "nvidia-fabricmanager") == "active"
