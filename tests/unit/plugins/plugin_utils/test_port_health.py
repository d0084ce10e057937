"""The network ports' health: the one reader of /sys/class/infiniband (netinfo.infiniband) on a tree in the kernel's
own formats (tests/fixtures/sysfs_infiniband), and the gate's rule on what it reads (port_health.py): a port down
refuses naming the node, the device and the port; a 4X link trained at 1X, and an error counter that rose, warn."""

import json
import os

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import ib_counters
from ansible_collections.gpufleet.cluster.plugins.module_utils._node import netinfo, node
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import node_plan, port_health

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "sysfs_infiniband")


def tree(root, document="handmade-four-hcas.txt", only=None):
    """The document written out as /sys/class/infiniband under root (only: the HCAs to keep); root, as sys_root."""
    with open(os.path.join(FIXTURES, document)) as handle:
        for line in handle:
            path, _space, content = line.rstrip("\n").partition(" ")
            if only is not None and path.split("/")[0] not in only:
                continue
            target = root / "class" / "infiniband" / path
            if content:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content + "\n")
            else:
                target.mkdir(parents=True, exist_ok=True)
    return str(root)


def reading(root, ib_hca=None, before=None, only=None):
    return {"hcas": netinfo.infiniband(tree(root, only=only)), "ib_hca": ib_hca, "before": before}


def said(found, host="gpu-b08"):
    return [(finding.refuse, finding.message(host)) for finding in found]


def test_the_reader_reads_each_port_as_the_kernel_writes_it(tmp_path):
    hcas = {hca["name"]: hca for hca in netinfo.infiniband(tree(tmp_path))}
    assert sorted(hcas) == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    port = hcas["mlx5_0"]["ports"][0]
    assert (port["state"], port["phys_state"], port["link_layer"]) == ("4: ACTIVE", "5: LinkUp", "InfiniBand")
    assert port["link"] == {"rate_gbps": 200.0, "width": 4, "speed": "HDR"}
    assert port["errors"]["symbol_error"] == 12 and port["errors"]["link_downed"] == 1
    assert hcas["mlx5_0"]["netdevs"] == ["ib0"]
    # SDR has no speed name; a device that answers no performance query says so instead of a number.
    assert hcas["mlx5_2"]["ports"][0]["link"] == {"rate_gbps": 10.0, "width": 4, "speed": ""}
    assert hcas["mlx5_3"]["ports"][0]["errors"]["symbol_error"] is None
    assert hcas["mlx5_3"]["ports"][0]["errors"]["port_rcv_errors"] is None  # no file at all
    assert hcas["mlx5_3"]["ports"][0]["xmit_data"] == 0  # its traffic counters say so too: no traffic read
    assert netinfo.active_hcas(list(hcas.values())) == ["mlx5_0:1", "mlx5_1:1", "mlx5_3:1"]


@pytest.mark.parametrize("text, parsed", [
    ("400 Gb/sec (4X NDR)", {"rate_gbps": 400.0, "width": 4, "speed": "NDR"}),
    ("2.5 Gb/sec (1X)", {"rate_gbps": 2.5, "width": 1, "speed": ""}),
    ("100 Gb/sec (2X NDR)\n", {"rate_gbps": 100.0, "width": 2, "speed": "NDR"}),
    ("Unknown", None),
    ("", None),
])
def test_the_rate_as_rate_show_formats_it(text, parsed):
    assert netinfo.parse_rate(text) == parsed


def test_a_port_in_use_that_is_down_refuses_naming_the_node_the_device_and_the_port(tmp_path):
    found = said(port_health.findings(reading(tmp_path, "=mlx5_0:1,mlx5_2:1", only=("mlx5_0", "mlx5_2"))))
    assert found == [(True, "gpu-b08 mlx5_2 port 1: the link is not up (its state is 1: DOWN, its physical state "
                            "2: Polling): NCCL would fail or hang on it; NCCL_IB_HCA==mlx5_0:1,mlx5_2:1 names it: "
                            "check its cable and the switch port at its other end (ibstat mlx5_2 1), or run "
                            "provision.yml --tags nccl_env so that NCCL_IB_HCA names the ports that are up")]


def test_without_nccl_ib_hca_a_port_that_is_down_is_not_in_use(tmp_path):
    """NCCL takes the ports that are up: the one down is not judged."""
    assert said(port_health.findings(reading(tmp_path, None, only=("mlx5_0", "mlx5_2")))) == []


def test_a_4x_link_trained_at_1x_warns(tmp_path):
    found = said(port_health.findings(reading(tmp_path, "=mlx5_0:1,mlx5_1:1", only=("mlx5_0", "mlx5_1"))))
    assert found == [(False, "gpu-b08 mlx5_1 port 1: the link trained at 50 Gb/sec (1X HDR), the node's other ports "
                             "in use run at 200 Gb/sec: a degraded link (lanes down, a bad cable or transceiver) slows "
                             "every collective of the job; reseat or replace the cable or transceiver, then check the "
                             "rate (cat /sys/class/infiniband/mlx5_1/ports/1/rate)")]


def test_a_lone_port_below_the_rate_the_inventory_expects_warns(tmp_path):
    only_slow = reading(tmp_path, "=mlx5_1", only=("mlx5_1",))
    assert port_health.findings(only_slow) == []  # nothing to compare it with
    found = said(port_health.findings(only_slow, 200))
    assert len(found) == 1 and "50 Gb/sec (1X HDR), gpufleet_ib_rate_gbps is 200" in found[0][1]
    assert not found[0][0]


def test_an_error_counter_that_rose_since_the_last_reading_warns(tmp_path):
    before = {"at": 1795800000.0, "errors": {"mlx5_0:1": {"symbol_error": 2, "link_downed": 1, "port_rcv_errors": 0}}}
    found = said(port_health.findings(reading(tmp_path, "=mlx5_0:1", before, only=("mlx5_0",))))
    assert found == [(False, "gpu-b08 mlx5_0 port 1: symbol_error rose by 10 since 2026-11-27 17:20:00 UTC (2 to 12): "
                             "symbol errors (bits received wrong on the link's lanes); watch it (a counter that keeps "
                             "rising is a failing link: reseat or replace its cable or transceiver)")]


def test_counters_lower_than_before_were_reset_and_say_nothing(tmp_path):
    before = {"at": 1795800000.0, "errors": {"mlx5_0:1": {"symbol_error": 500, "link_downed": 9}}}
    assert port_health.findings(reading(tmp_path, "=mlx5_0:1", before, only=("mlx5_0",))) == []


@pytest.mark.parametrize("ib_hca, used, missing", [
    ("=mlx5_0:1,mlx5_3:1", ["mlx5_0:1", "mlx5_3:1"], []),
    ("mlx5", ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1"], []),  # NCCL's default: name prefixes
    ("^=mlx5_2,mlx5_3", ["mlx5_0:1", "mlx5_1:1"], []),
    ("=mlx5_0:1,mlx5_7:1", ["mlx5_0:1"], ["mlx5_7:1"]),
    ("=mlx5_0:2", [], ["mlx5_0:2"]),
])
def test_the_ports_nccl_ib_hca_names(tmp_path, ib_hca, used, missing):
    taken, absent = port_health.ports_in_use(netinfo.infiniband(tree(tmp_path)), ib_hca)
    assert ["%s:%d" % (hca, port["port"]) for hca, port in taken] == used and absent == missing


def test_a_port_nccl_ib_hca_names_that_the_node_does_not_have_warns(tmp_path):
    """NCCL leaves a name it does not find out (TCP sockets where no port is left): the job runs, slower."""
    found = said(port_health.findings(reading(tmp_path, "=mlx5_0:1,mlx5_7:1", only=("mlx5_0",))))
    assert found == [(False, "gpu-b08 mlx5_7:1: NCCL_IB_HCA==mlx5_0:1,mlx5_7:1 names it, and the node has no such port: "
                             "NCCL leaves it out, and falls back to TCP sockets where no port is left; correct "
                             "NCCL_IB_HCA (nccl_env_ib_hca), or run provision.yml --tags nccl_env to have the ports "
                             "that are up found")]


@pytest.mark.parametrize("value, error", [
    ("fast", "gpu-b08: gpufleet_ib_rate_gbps='fast' is not a number of Gb/sec (e.g. 400 for NDR 4X)"),
    (0, "gpu-b08: gpufleet_ib_rate_gbps=0 must be more than 0"),
])
def test_a_rate_setting_that_is_not_a_rate_is_refused_naming_the_host(tmp_path, value, error):
    assert said(port_health.node_findings({}, value)) == [(True, error + "; correct it in the inventory")]
    only_slow = reading(tmp_path, "=mlx5_1", only=("mlx5_1",))
    assert port_health.node_findings(only_slow, None) == []
    assert said(port_health.node_findings(only_slow, "400"))[0][1].startswith(
        "gpu-b08 mlx5_1 port 1: the link trained at 50 Gb/sec (1X HDR), gpufleet_ib_rate_gbps is 400")


def test_the_launch_plan_refuses_the_node_with_a_port_down_and_shows_the_warnings(tmp_path):
    """node_plan, as job_nodes runs it: the port down is the node's problem, the slow port a warning."""
    probe = {"gpu_count": 0, "gpu_health": {}, "python": {"found": True, "torch": True, "path": "/usr/bin/python3"},
             "ib_ports": reading(tmp_path, "=mlx5_0:1,mlx5_1:1,mlx5_2:1", only=("mlx5_0", "mlx5_1", "mlx5_2"))}
    settings = node_plan.NodeSettings(python="python3", container_engine="docker", ib_rate={"gpu-b08": "bad"})
    found = [(f.refuse, f.message("gpu-b08")) for f in node_plan.gpu_findings("gpu-b08", probe, settings, 1)]
    assert (True, "gpu-b08: gpufleet_ib_rate_gbps='bad' is not a number of Gb/sec (e.g. 400 for NDR 4X); correct it "
                  "in the inventory") in found
    settings = node_plan.NodeSettings(python="python3", container_engine="docker")
    found = node_plan.gpu_findings("gpu-b08", probe, settings, 1)
    assert [(f.refuse, f.gpu) for f in found] == [(False, "mlx5_1 port 1"), (True, "mlx5_2 port 1")]


def test_the_probe_remembers_the_counters_for_the_next_launch(tmp_path):
    hcas = netinfo.infiniband(tree(tmp_path / "sys", only=("mlx5_0", "mlx5_3")))
    jobs_dir = str(tmp_path / "jobs")
    assert ib_counters.read(jobs_dir) is None
    ib_counters.write(jobs_dir, hcas, now=1795800000.0)
    assert ib_counters.read(jobs_dir) == {"at": 1795800000.0, "errors": {
        "mlx5_0:1": {"symbol_error": 12, "link_error_recovery": 0, "link_downed": 1, "port_rcv_errors": 0,
                     "local_link_integrity_errors": 0, "excessive_buffer_overrun_errors": 0},
        "mlx5_3:1": {name: None for name in netinfo.ERROR_COUNTERS}}}
    assert oct(os.stat(ib_counters.memory_path(jobs_dir)).st_mode & 0o777) == "0o600"
    ib_counters.write(str(tmp_path / "none"), [])  # a node without a port writes nothing
    assert not os.path.exists(tmp_path / "none")
    (tmp_path / "jobs" / ib_counters.MEMORY_FILE).write_text(json.dumps(["not", "a", "reading"]))
    assert ib_counters.read(jobs_dir) is None


def test_nccl_ib_hca_is_read_from_the_environment_files_the_launch_sources(tmp_path):
    first, second = tmp_path / "nccl.env", tmp_path / "site.env"
    first.write_text("# Ansible managed\nexport NCCL_IB_HCA='=mlx5_0:1,mlx5_1:1'\nexport NCCL_SOCKET_IFNAME='=eth0'\n")
    assert node.env_file_value([str(first)], "NCCL_IB_HCA") == "=mlx5_0:1,mlx5_1:1"
    second.write_text("NCCL_IB_HCA=^mlx5_4  # the switch ports\n")
    assert node.env_file_value([str(first), str(second), str(tmp_path / "absent")], "NCCL_IB_HCA") == "^mlx5_4"
    assert node.env_file_value([str(first)], "NCCL_IB_GID_INDEX") is None


def test_verify_judges_the_network_ports_as_the_launchs_gate_does(tmp_path):
    """verify.yml's health table (stack_report): the port down refuses there too, named in its row and its problem;
    the 1X port warns; a bad gpufleet_ib_rate_gbps is the node's refusal."""
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils._verify import verify

    results = {"gpu-b08": {"gpu_health": {}, "ib_ports": reading(tmp_path, "=mlx5_0:1,mlx5_1:1,mlx5_2:1",
                                                                 only=("mlx5_0", "mlx5_1", "mlx5_2"))}}
    found = verify.health_findings(results, {}, {})
    assert [(f.refuse, f.gpu) for f in found["gpu-b08"]] == [(False, "mlx5_1 port 1"), (True, "mlx5_2 port 1")]
    rows = [line.split(None, 5) for line in verify.health_table(found, results).splitlines()[2:]]
    assert [row[:5] for row in rows] == [["gpu-b08", "mlx5_1", "port", "1", "warn"],
                                         ["gpu-b08", "mlx5_2", "port", "1", "refuse"]]
    bad = verify.health_findings(results, {}, {}, ib_rate={"gpu-b08": "fast"})["gpu-b08"]
    assert bad[-1].refuse and bad[-1].fact == "gpufleet_ib_rate_gbps='fast' is not a number of Gb/sec (e.g. 400 for NDR 4X)"
