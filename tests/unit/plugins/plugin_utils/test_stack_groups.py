"""Which rank a hang is stuck in (plugin_utils/_postmortem/stack_groups.py), from stacks as the nodes keep them in state.json."""

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._postmortem import stack_groups

TORCH = "/opt/gpufleet/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
IN_ALL_REDUCE = [["all_reduce", TORCH, 2941], ["wrapper", TORCH.replace("distributed_c10d", "c10d_logger"), 81],
                 ["train_step", "/work/train.py", 42], ["<module>", "/work/train.py", 60]]
IN_LOADER = [["__next__", "/opt/gpufleet/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", 708],
             ["train_step", "/work/train.py", 38], ["<module>", "/work/train.py", 60]]


def node(host, ranks, error=None):
    return {"host": host, "stacks": {"file": "stacks.txt" if ranks else None, "error": error, "ranks": [
        {"rank": rank, "local_rank": rank % 2, "pid": 100 + rank, "error": None, "frames": frames}
        for rank, frames in ranks]}}


def test_the_odd_rank_is_named_with_its_node_and_frame():
    results = [node("node0", [(0, IN_ALL_REDUCE), (1, IN_ALL_REDUCE)]), node("node1", [(2, IN_ALL_REDUCE), (3, IN_LOADER)]),
               node("node2", [(4, IN_ALL_REDUCE), (5, IN_ALL_REDUCE)])]
    assert stack_groups.verdict(results) == (
        "ranks 0–2, 4, 5 in all_reduce (train.py:42), rank 3 in __next__ (train.py:38): rank 3 on node1 is the "
        "likely cause")


def test_every_rank_in_the_same_frame_blames_no_rank():
    results = [node("node0", [(0, IN_ALL_REDUCE), (1, IN_ALL_REDUCE)]), node("node1", [(2, IN_ALL_REDUCE)])]
    assert stack_groups.verdict(results) == "ranks 0–2 in all_reduce (train.py:42): no rank stands out"


def test_two_groups_of_the_same_size_blame_no_rank():
    results = [node("node0", [(0, IN_ALL_REDUCE), (1, IN_LOADER)])]
    assert stack_groups.verdict(results) == "rank 0 in all_reduce (train.py:42), rank 1 in __next__ (train.py:38)"


def test_a_node_without_stacks_is_named_and_the_others_still_judged():
    results = [node("node0", [(0, IN_ALL_REDUCE), (1, IN_ALL_REDUCE)]), node("node1", [(2, IN_LOADER)]),
               node("node2", [], error="py-spy is not on this node (neither beside /v/bin/python nor on PATH)")]
    results[1]["stacks"]["ranks"].append({"rank": 3, "local_rank": 1, "pid": 7, "error": "py-spy: denied",
                                          "frames": []})
    assert stack_groups.verdict(results) == (
        "ranks 0, 1 in all_reduce (train.py:42), rank 2 in __next__ (train.py:38): rank 2 on node1 is the likely "
        "cause; no stack of node1's pid 7: py-spy: denied; no stacks from node2: py-spy is not on this node "
        "(neither beside /v/bin/python nor on PATH)")


def test_no_stacks_taken_says_nothing():
    assert stack_groups.verdict([{"host": "node0", "state": "hung"}]) is None


def test_frames_only_in_library_code_name_the_innermost():
    frames = [["wait", "/usr/lib/python3.11/threading.py", 320], ["<module>", "<frozen runpy>", 88]]
    assert stack_groups.where(frames) == "wait (threading.py:320)"
    assert stack_groups.where(IN_LOADER) == "__next__ (train.py:38)"


def test_rank_lists_are_short():
    assert stack_groups.rank_list([4]) == "rank 4"
    assert stack_groups.rank_list([5, 0, 1, 2, 3, 7, 9, 10]) == "ranks 0–3, 5, 7, 9, 10"
