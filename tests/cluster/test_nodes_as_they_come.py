"""Nodes as users have them (shared/TESTBED.md, last section), on the container cluster.

- node1 keeps the runtime's /etc/hosts, a bind mount that an atomic rename cannot replace;
- node2's sshd listens on port 2222 (ansible_port in the inventory), as Docker-based nodes' often do;
- every node starts with a Debian installer's `127.0.1.1 <hostname>` line.

Servers gpufleet never provisioned are test_bare_nodes.py's (nodes of their own).
"""

import re

import pytest

import testbed

pytestmark = pytest.mark.cluster


def test_a_bind_mounted_etc_hosts_is_written_in_place(cluster, provisioned):
    assert provisioned["converge"].rc == 0, provisioned["converge"].out[-3000:]
    host = cluster.host("node1")
    mounts = host.file("/proc/self/mountinfo").content_string
    assert re.search(r"^(\S+ ){4}/etc/hosts ", mounts, re.M), "node1's /etc/hosts should be the runtime's bind mount"
    hosts = host.file("/etc/hosts").content_string
    assert "# BEGIN gpufleet etc_hosts" in hosts and "127.0.1.1" not in hosts
    for target in cluster.nodes:
        assert host.run("getent ahostsv4 %s", target).stdout.split()[0] == cluster.addresses[target]
    # The nodes that are not mount points were written as usual: node0's /etc/hosts is a plain file.
    assert not re.search(r"^(\S+ ){4}/etc/hosts ", cluster.host("node0").file("/proc/self/mountinfo").content_string,
                         re.M)


def test_the_mesh_reaches_a_node_whose_sshd_listens_on_another_port(cluster, provisioned):
    assert provisioned["converge"].rc == 0, provisioned["converge"].out[-3000:]
    assert testbed.ssh_port(2) == 2222
    # Nothing listens on node2's port 22: plain `ssh node2` works only through the mesh's ~/.ssh/config.
    assert 22 not in cluster.view.listening_ports("node2") and 2222 in cluster.view.listening_ports("node2")
    for node in cluster.nodes:
        host = cluster.host(node)
        config = host.file("/root/.ssh/config").content_string
        assert re.search(r"^Host node2 10\.213\.77\.12\n\s+HostName 10\.213\.77\.12\n\s+Port 2222$", config, re.M), config
        known = host.file("/root/.ssh/known_hosts").content_string
        assert "[node2]:2222,[10.213.77.12]:2222 ssh-ed25519 " in known
        for target in cluster.nodes:
            for name in (target, cluster.addresses[target]):
                # What mpirun and DeepSpeed's pdsh do: plain ssh, with host keys checked.
                out = host.run("ssh -o BatchMode=yes -o StrictHostKeyChecking=yes %s hostname", name)
                assert out.rc == 0 and out.stdout.strip() == target, (node, name, out.stderr)


def test_mpirun_across_every_node_with_one_on_another_ssh_port(cluster, provisioned):
    assert provisioned["converge"].rc == 0, provisioned["converge"].out[-3000:]
    out = cluster.host("node0").run(
        "mpirun --allow-run-as-root --hostfile /etc/gpufleet/hostfile -np 3 --map-by node hostname")
    assert out.rc == 0, out.stderr
    assert sorted(out.stdout.split()) == ["node0", "node1", "node2"]
