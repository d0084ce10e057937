"""verify.yml's Gloo report (plugin_utils/_verify/gloo.py): the verdict names every node whose rank gave no
result, however it ended (the module's error, a failed module, an async job that timed out or a wait that gave up),
and a wrong sum; the words for the nodes NCCL did not measure."""

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._verify import gloo

ROWS = [{"size_bytes": 1048576, "count": 262144, "time_us": 1500.0, "algbw_gbps": 0.699, "busbw_gbps": 0.932,
         "wrong": 0},
        {"size_bytes": 67108864, "count": 16777216, "time_us": 60000.0, "algbw_gbps": 1.118, "busbw_gbps": 1.491,
         "wrong": 0}]


def ended(rank, rows=None, **extra):
    """An async_status result of a rank that ended (finished, the module's own keys)."""
    return dict({"finished": 1, "rank": rank, "interface": "eth0", "rows": rows or [], "error": None}, **extra)


def test_every_rank_ended_passes_with_rank_0_s_rows():
    found = gloo.report({"node0": ended(0, ROWS), "node1": ended(1), "node2": ended(2)}, ["node0", "node1", "node2"])
    assert found["verdict"] == {"passed": True, "reasons": [], "peak_busbw_gbps": 1.491}
    assert found["rows"] == ROWS and found["ranks"] == 3 and found["errors"] == {}
    assert found["interfaces"] == {"node0": "eth0", "node1": "eth0", "node2": "eth0"}
    lines = gloo.lines(found)
    assert lines[0] == "Gloo all_reduce across 3 node(s) (node0, node1, node2), one rank each: peak bus bandwidth 1.491 GB/s"
    assert lines[1].split() == ["1048576", "B", "1500.0", "us", "algbw", "0.699", "GB/s", "busbw", "0.932", "GB/s"]


def test_each_way_a_rank_can_fail_is_named_with_its_node():
    results = {
        "node0": ended(0, [], error="the training Python ended with 1: torch.distributed.DistStoreError: Timed out "
                                    "after 121 seconds waiting for clients. 2/3 clients joined."),
        # the module failed (its fail_json, kept by failed_when: false)
        "node1": {"finished": 1, "failed": False, "msg": "no interface of this node holds its cluster address 192.0.2.11"},
        # async_status gave up waiting: not finished, no result
        "node2": {"finished": 0, "attempts": 421},
    }
    found = gloo.report(results, ["node0", "node1", "node2", "node3"])
    assert found["verdict"]["passed"] is False
    assert found["verdict"]["reasons"] == [
        "node0: the training Python ended with 1: torch.distributed.DistStoreError: Timed out after 121 seconds "
        "waiting for clients. 2/3 clients joined.",
        "node1: no interface of this node holds its cluster address 192.0.2.11",
        "node2: no result (its rank did not end)",
        "node3: no result (its rank did not end)"]
    assert found["verdict"]["peak_busbw_gbps"] is None
    assert gloo.lines(found)[0].endswith("peak bus bandwidth - GB/s")


def test_a_wrong_sum_fails_and_so_do_no_rows():
    wrong = [dict(ROWS[0], wrong=3)]
    found = gloo.report({"node0": ended(0, wrong), "node1": ended(1)}, ["node0", "node1"])
    assert found["verdict"]["reasons"] == ["3 wrong sums (an element of the first all_reduce was not the number of ranks)"]
    empty = gloo.report({"node0": ended(0), "node1": ended(1)}, ["node0", "node1"])
    assert empty["verdict"]["reasons"] == ["no result rows from rank 0 (node0)"]


def test_one_node_says_nothing_crossed_the_network():
    found = gloo.report({"node0": ended(0, [dict(ROWS[0], busbw_gbps=0.0)])}, ["node0"])
    assert found["verdict"]["passed"] is True
    assert "  one node: nothing crosses the network (bus bandwidth 0 by definition)" in gloo.lines(found)


def test_the_skipped_nodes_are_grouped_by_why_in_rank_order():
    skipped = {"node1": "no NVIDIA GPU", "node2": "no NVIDIA GPU", "node4": "another reason"}
    assert gloo.skipped_line(skipped) == ("NCCL bandwidth was not measured on node1, node2: no NVIDIA GPU; on node4: "
                                          "another reason")
