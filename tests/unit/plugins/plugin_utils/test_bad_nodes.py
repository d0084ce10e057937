"""A node a spare replaced for a hardware fault is remembered on the controller, and the next job with it warns
(plugin_utils/_control/bad_nodes.py); a node replaced because it was lost is not (a network blip is not a bad node)."""

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import bad_nodes

FAULT = {"node_rank": 1, "by": "node3", "attempt": 2, "at": 1700000000.0, "hardware_fault": True,
         "why": "node1 (node_rank 1) failed: node1 GPU 0 (0000:17:00.0): XID 79; node3 takes node_rank 1"}


def test_a_node_replaced_for_a_hardware_fault_warns_in_the_next_job_until_cleared(tmp_path):
    written = bad_nodes.remember(str(tmp_path), "llm", {"node1": FAULT, "node2": dict(FAULT, hardware_fault=False)})
    assert written == [str(tmp_path / "bad-nodes" / "node1")]  # lost, not faulted: node2 is not remembered
    said = bad_nodes.warnings(str(tmp_path), ["node0", "node1", "node2"])
    assert len(said) == 1 and said[0].startswith("node1 was replaced for a hardware fault (job llm, ")
    assert "replaced by node3 from attempt 2 after: node1 (node_rank 1) failed: node1 GPU 0 (0000:17:00.0): XID 79" \
        in said[0]
    assert said[0].endswith("check it (ansible-playbook gpufleet.cluster.verify --limit node1) and, once it is "
                            "mended, clear this warning with rm %s" % written[0])
    (tmp_path / "bad-nodes" / "node1").unlink()
    assert bad_nodes.warnings(str(tmp_path), ["node1"]) == []


def test_nothing_is_remembered_without_a_replacement_and_a_host_name_cannot_leave_the_folder(tmp_path):
    assert bad_nodes.remember(str(tmp_path), "llm", {}) == [] and not (tmp_path / "bad-nodes").exists()
    written = bad_nodes.remember(str(tmp_path), "llm", {"../../etc/x": FAULT})
    assert written == [str(tmp_path / "bad-nodes" / "x")]
