"""DeepSpeed's ranks' files followed into the node's log, tagged (module_utils/_runtime/rank_output.py), without a launcher:
the files are written here as deepspeed/launcher/launch.py names them. The whole path with DeepSpeed's own launcher
is tests/cluster/test_cluster_launchers.py."""

import os

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.rank_output import RANK_OUTPUT_DIR, RankOutput, first_rank
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._postmortem.rank_lines import rank_of

NODES = [["node0", "192.0.2.10"], ["node1", "192.0.2.11"], ["node2", "192.0.2.12"]]


def test_a_node_s_first_rank_counts_the_ranks_of_the_nodes_before_it():
    assert first_rank({"node_rank": 2, "nodes": NODES, "nproc_per_node": 2}) == 4
    assert first_rank({"node_rank": 2, "nodes": NODES, "slots": [8, 4, 8]}) == 12
    assert first_rank({"node_rank": 0}) == 0


def test_each_complete_line_reaches_the_log_once_tagged_with_its_global_and_local_rank(tmp_path):
    folder = tmp_path / RANK_OUTPUT_DIR
    folder.mkdir()
    log = tmp_path / "job.log"
    log.write_bytes(b"[gpufleet] attempt 1 of 1\n")
    (folder / "20260101000000_rank1.log").write_bytes(b"an earlier run's line\n")  # there before: not copied
    spec = {"launcher": "deepspeed", "node_rank": 1, "nodes": NODES[:2], "nproc_per_node": 2}
    other = RankOutput(str(tmp_path), str(log), dict(spec, launcher="torchrun"))  # not DeepSpeed: reads nothing there
    output = RankOutput(str(tmp_path), str(log), spec)
    output.follow()  # nothing new yet
    with open(str(folder / "20260102000000_rank2.log"), "ab") as rank2, \
            open(str(folder / "20260102000000_rank3.log"), "ab") as rank3:
        rank2.write(b"step 1 rank 2\nstep 2 ")
        rank3.write(b"step 1 rank 3\n")
        rank2.flush()
        rank3.flush()
        output.follow()
        rank2.write(b"rank 2\n")
        rank2.flush()
        output.follow()
        output.follow()  # nothing new: nothing written twice
        rank3.write(b"Traceback without a newline")
    other.follow(final=True)
    output.follow(final=True)
    lines = log.read_text().splitlines()
    assert lines == ["[gpufleet] attempt 1 of 1", "[rank2|0]: step 1 rank 2", "[rank3|1]: step 1 rank 3",
                     "[rank2|0]: step 2 rank 2", "[rank3|1]: Traceback without a newline"]
    assert [rank_of(line + "\n") for line in lines] == [None, 2, 3, 2, 3]  # the report's split reads the tags


def test_no_folder_no_log_change(tmp_path):
    log = tmp_path / "job.log"
    log.write_bytes(b"x\n")
    RankOutput(str(tmp_path), str(log), {"launcher": "deepspeed"}).follow(final=True)
    assert log.read_bytes() == b"x\n"
