"""Finding the cluster interface and the InfiniBand HCAs, on recorded `ip -j addr` output and a fake sysfs tree."""

import subprocess

from ansible_collections.gpufleet.cluster.plugins.module_utils._node import netinfo

IP_JSON = """[{"ifindex":1,"ifname":"lo","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8},
{"family":"inet6","local":"::1","prefixlen":128}]},
{"ifindex":2,"ifname":"eno1","addr_info":[{"family":"inet","local":"192.0.2.11","prefixlen":24}]},
{"ifindex":3,"ifname":"ib0","addr_info":[{"family":"inet","local":"198.51.100.11","prefixlen":24},
{"family":"inet6","local":"2001:db8::11","prefixlen":64}]},
{"ifindex":4,"ifname":"docker0","addr_info":[]}]"""


def run_ip(cmd, **_kwargs):
    return subprocess.CompletedProcess(cmd, 0, stdout=IP_JSON, stderr="")


def test_interface_holding_the_address():
    found = netinfo.interfaces(run=run_ip)
    assert found["docker0"] == [] and found["eno1"] == ["192.0.2.11"]
    assert netinfo.interface_of("198.51.100.11", found) == "ib0"
    assert netinfo.interface_of("2001:DB8::11", found) == "ib0"
    assert netinfo.interface_of("192.0.2.99", found) is None


def no_ip(cmd, **_kwargs):
    raise FileNotFoundError(2, "No such file or directory", cmd[0])


def test_a_node_without_iproute2_is_read_through_the_kernel(tmp_path):
    """Seen on a GPU machine built from a minimal Ubuntu image: no `ip`; the addresses come from the kernel."""
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "if_inet6").write_text(
        "00000000000000000000000000000001 01 80 10 80       lo\n"
        "20010db8000000000000000000000011 03 40 00 80      ib0\n")
    held = {"lo": "127.0.0.1", "ib0": "198.51.100.11"}
    found = netinfo.kernel_interfaces(str(tmp_path), ipv4_of=held.get, names=lambda: [(1, "lo"), (2, "eno1")])
    assert found["lo"] == ["127.0.0.1", "::1"] and found["eno1"] == []
    assert netinfo.interface_of("2001:db8::11", found) == "ib0"
    assert netinfo.interface_of("198.51.100.11", found) == "ib0"


def test_the_kernel_reading_agrees_with_this_machine(tmp_path):
    """For real, on this machine: loopback holds 127.0.0.1 through SIOCGIFADDR, with or without `ip` asked."""
    found = netinfo.interfaces(run=no_ip)
    assert "127.0.0.1" in found["lo"]
    assert netinfo.interface_of("127.0.0.1", found) == "lo"


def make_hca(root, name, ports, netdevs, xmit=0):
    for port, state in ports.items():
        port_dir = root / "class" / "infiniband" / name / "ports" / str(port)
        (port_dir / "counters").mkdir(parents=True, exist_ok=True)
        (port_dir / "state").write_text(state + "\n")
        (port_dir / "link_layer").write_text("InfiniBand\n")
        (port_dir / "counters" / "port_xmit_data").write_text("%d\n" % xmit)
        (port_dir / "counters" / "port_rcv_data").write_text("%d\n" % (xmit * 2))
    for dev in netdevs:
        (root / "class" / "infiniband" / name / "device" / "net" / dev).mkdir(parents=True)


def test_infiniband_hcas_and_active_ports(tmp_path):
    make_hca(tmp_path, "mlx5_0", {1: "4: ACTIVE"}, ["ib0"])
    make_hca(tmp_path, "mlx5_1", {1: "1: DOWN"}, ["ib1"])
    hcas = netinfo.infiniband(str(tmp_path))
    assert [h["name"] for h in hcas] == ["mlx5_0", "mlx5_1"]
    assert hcas[0]["netdevs"] == ["ib0"] and hcas[0]["ports"][0]["link_layer"] == "InfiniBand"
    assert netinfo.active_hcas(hcas) == ["mlx5_0:1"]


def test_an_nvlink5_systems_switch_management_ports_are_left_out_of_nccls_hcas(tmp_path):
    """NVLink5 trays carry their NVSwitches' management ports as InfiniBand devices whose VPD says SW_MNG
    (nvidia_node.nvlink5_switch_devices, after NVIDIA's gpu-driver-container); NCCL's traffic must not go there."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils._node import nvidia_node

    make_hca(tmp_path, "mlx5_0", {1: "4: ACTIVE"}, ["ib0"])
    make_hca(tmp_path, "mlx5_4", {1: "4: ACTIVE"}, [])
    (tmp_path / "class/infiniband/mlx5_4/device").mkdir()
    (tmp_path / "class/infiniband/mlx5_4/device/vpd").write_bytes(b"\x82\x10NVIDIA SW_MNG port\x78")
    switches = nvidia_node.nvlink5_switch_devices(str(tmp_path))
    assert switches == ["mlx5_4"]
    assert netinfo.active_hcas(netinfo.infiniband(str(tmp_path)), switches) == ["mlx5_0:1"]


def test_no_infiniband(tmp_path):
    assert netinfo.infiniband(str(tmp_path)) == []


def test_ib_traffic_between_two_readings(tmp_path):
    make_hca(tmp_path, "mlx5_0", {1: "4: ACTIVE"}, ["ib0"], xmit=1000)
    before = netinfo.infiniband(str(tmp_path))
    (tmp_path / "class/infiniband/mlx5_0/ports/1/counters/port_xmit_data").write_text("251000\n")
    (tmp_path / "class/infiniband/mlx5_0/ports/1/counters/port_rcv_data").write_text("2002\n")
    after = netinfo.infiniband(str(tmp_path))
    assert netinfo.ib_traffic_bytes(before, after) == {"mlx5_0:1": {"sent": 1000000, "received": 8}}


def test_interface_holding_is_empty_when_no_interface_or_no_ip_tool():
    assert netinfo.interface_holding("192.0.2.11", run=run_ip) == "eno1"
    assert netinfo.interface_holding("192.0.2.99", run=run_ip) == ""

    def no_ip(cmd, **_kwargs):
        raise FileNotFoundError(cmd[0])

    assert netinfo.interface_holding("192.0.2.11", run=no_ip) == ""


def test_a_loopback_address_other_than_127_0_0_1_is_held_by_loopback():
    """The kernel routes all of 127.0.0.0/8 to lo (its `local 127.0.0.0/8 dev lo` route): the demo inventory's
    node1 at 127.0.0.2 is on lo, while no interface holds an address outside what it carries."""
    found = {"lo": ["127.0.0.1", "::1"], "eth0": ["192.0.2.2"]}
    assert netinfo.interface_of("127.0.0.2", found) == "lo"
    assert netinfo.interface_of("127.255.0.9", found) == "lo"
    assert netinfo.interface_of("192.0.2.3", found) is None
    assert netinfo.interface_of("::2", found) is None
    assert netinfo.interface_of("127.0.0.2", {"eth0": ["192.0.2.2"]}) is None
