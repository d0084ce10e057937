"""pytest-testinfra verifiers of provision.yml, run on every node of the molecule cluster (--hosts=ansible://gpu_nodes)."""

import json


def cluster_nodes(host):
    """(name, address) of every node, from the generated MPI hostfile's order and /etc/hosts."""
    entries = []
    inside = False
    # Only the etc_hosts role's block: a runtime-managed /etc/hosts (node1's) has a line of podman's for the node too.
    for line in host.file("/etc/hosts").content_string.splitlines():
        if line.startswith("# BEGIN gpufleet etc_hosts") or line.startswith("# END gpufleet etc_hosts"):
            inside = line.startswith("# BEGIN")
            continue
        parts = line.split()
        if inside and len(parts) >= 2:
            entries.append((parts[1], parts[0]))
    return entries


def test_hostname_resolves_to_the_cluster_address(host):
    address = host.run("getent ahostsv4 $(hostname)").stdout.split()[0]
    assert not address.startswith("127.")
    assert address in host.file("/etc/gpufleet/hostfile").content_string


def test_every_node_by_name_and_address_over_ssh(host):
    nodes = cluster_nodes(host)
    assert len(nodes) == 3
    for name, address in nodes:
        for target in (name, address):
            out = host.run("ssh -o BatchMode=yes -o StrictHostKeyChecking=yes %s hostname", target)
            assert out.rc == 0 and out.stdout.strip() == name


def test_nccl_conf_names_the_cluster_interface(host):
    address = host.run("getent ahostsv4 $(hostname)").stdout.split()[0]
    links = json.loads(host.check_output("ip -j addr show"))
    iface = next(l["ifname"] for l in links if any(a.get("local") == address for a in l.get("addr_info", [])))
    # "=": NCCL takes the name exactly, not as a prefix (eth0 would also take eth01).
    conf = host.file("/etc/nccl.conf").content_string
    assert "NCCL_SOCKET_IFNAME==%s\n" % iface in conf
    # node1's fake HCA (tests/cluster/testbed.py FAKE_SYS): its active port, exactly (mlx5_0 alone, not mlx5_0*).
    if host.file("/fake-sys/class/infiniband/mlx5_0").exists:
        assert "NCCL_IB_HCA==mlx5_0:1\n" in conf
    else:
        assert "NCCL_IB_HCA" not in conf


def test_venv_has_torch(host):
    out = host.run("/opt/gpufleet/venv/bin/python -c 'import torch; print(torch.__version__)'")
    assert out.rc == 0 and out.stdout.startswith("2.13.0")


def test_mpi_hostfile_lists_every_node_with_slots(host):
    lines = [l for l in host.file("/etc/gpufleet/hostfile").content_string.splitlines() if not l.startswith("#")]
    assert len(lines) == 3 and all(l.endswith("slots=1") for l in lines)
