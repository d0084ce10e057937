"""What the port check remembers on a node (module_utils/_job/port_memory.py), in a real jobs folder, with a clock
the test moves."""

import json
import os

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import port_memory

NODES = [["node0", "192.0.2.10"], ["node1", "192.0.2.11"], ["node2", "192.0.2.12"]]


class Clock:
    def __init__(self, now=1_000_000.0):
        self.now = now

    def __call__(self):
        return self.now


def test_a_pass_is_read_back_with_its_age_by_the_nodes_clock(tmp_path):
    clock = Clock()
    port_memory.remember(str(tmp_path / "jobs"), "node1", 29517, NODES, "node0", True, True, now=clock)
    clock.now += 90
    assert port_memory.read(str(tmp_path / "jobs"), now=clock) == {
        "node1:29517": {"host": "node1", "port": 29517, "nodes": NODES, "master": "node0", "tcp": True,
                        "age_s": 90.0}}
    # Only the record: no temporary file left beside it, and the folder is the user's alone.
    assert os.listdir(tmp_path / "jobs") == [".port-checks.json"]
    assert oct(os.stat(tmp_path / "jobs").st_mode & 0o777) == "0o700"


def test_a_failed_probe_forgets_the_earlier_pass_of_that_host_on_that_port_only(tmp_path):
    """Two inventory hosts on one machine (the local demo) share the file: each keeps its own record."""
    clock = Clock()
    for host in ("node0", "node1"):
        port_memory.remember(str(tmp_path), host, 29517, NODES, "node0", host != "node0", True, now=clock)
    port_memory.remember(str(tmp_path), "node1", 29600, NODES, "node0", True, True, now=clock)
    port_memory.remember(str(tmp_path), "node1", 29517, NODES, "node0", True, False, now=clock)
    assert sorted(port_memory.read(str(tmp_path), now=clock)) == ["node0:29517", "node1:29600"]


def test_old_records_are_dropped_at_the_next_write_and_future_ones_are_not_read(tmp_path):
    clock = Clock()
    port_memory.remember(str(tmp_path), "node1", 29517, NODES, "node0", True, True, now=clock)
    clock.now += port_memory.KEEP_S + 1
    port_memory.remember(str(tmp_path), "node1", 29600, NODES, "node0", True, True, now=clock)
    assert sorted(port_memory.read(str(tmp_path), now=clock)) == ["node1:29600"]
    clock.now -= 3600  # the node's clock set back: a record from the future is not a pass
    assert port_memory.read(str(tmp_path), now=clock) == {}


def test_a_file_not_in_the_shape_written_reads_as_nothing_remembered(tmp_path):
    path = tmp_path / ".port-checks.json"
    whole = {"host": "node1", "port": 29517, "nodes": NODES, "master": "node0", "tcp": True, "at": 1.0}
    for text in ("not json", "[1, 2]", json.dumps({"node1:29517": {"nodes": NODES}}), json.dumps({"node1:29517": "x"}),
                 json.dumps({"node2:29517": whole})):  # a key that is not its record's host and port
        path.write_text(text)
        assert port_memory.read(str(tmp_path)) == {}, text
    assert port_memory.read(str(tmp_path / "missing")) == {}


def test_the_master_prefers_fresh_ports_it_remembers_for_the_same_nodes():
    def record(port, host="node0", nodes=NODES, master="node0", age=10.0):
        return {"host": host, "port": port, "nodes": nodes, "master": master, "tcp": False, "age_s": age}
    records = {"node0:29517": record(29517, age=100.0), "node0:29600": record(29600, age=4000.0),
               "node0:29700": record(29700, nodes=NODES[:2]), "node1:29800": record(29800, host="node1"),
               "node0:29900": record(29900, master="node1")}
    assert port_memory.fresh_ports(records, NODES, 3600) == [29517]
    assert port_memory.fresh_ports(records, NODES, 0) == []


def test_a_record_whose_time_is_not_a_number_is_dropped_at_the_next_write(tmp_path):
    (tmp_path / ".port-checks.json").write_text(json.dumps({"node1:29517": {"at": "yesterday"}, "x": [1]}))
    port_memory.remember(str(tmp_path), "node1", 29600, NODES, "node0", True, True, now=Clock())
    assert sorted(json.loads((tmp_path / ".port-checks.json").read_text())) == ["node1:29600"]
