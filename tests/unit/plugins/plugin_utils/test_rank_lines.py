"""The rank tags of the nodes' logs read on the controller (plugin_utils/_postmortem/rank_lines.py): torchrun's prefix as
launchers.TORCHRUN_LINE_PREFIX renders it, Open MPI 4's --tag-output as mpirun prints it."""

from ansible_collections.gpufleet.cluster.plugins.module_utils._job.launchers import TORCHRUN_LINE_PREFIX
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._postmortem import rank_lines
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._postmortem.report import failure_message


def torchrun_tag(rank, local_rank):
    return TORCHRUN_LINE_PREFIX.replace("${rank}", str(rank)).replace("${local_rank}", str(local_rank))


def test_each_launcher_s_tag_gives_the_global_rank():
    assert rank_lines.rank_of(torchrun_tag(12, 4) + "step 3") == 12
    assert rank_lines.rank_of("[1,7]<stdout>: ok rank 7") == 7 and rank_lines.rank_of("[1,7]<stderr>:boom") == 7
    assert rank_lines.rank_of("[rank3]: Traceback (most recent call last):") is None  # torch's own, untagged
    assert rank_lines.rank_of("W1125 13:33:35.828000 3793 torch/distributed/elastic/...") is None


def test_the_node_logs_split_into_one_file_per_rank(tmp_path):
    (tmp_path / "node0.log").write_text("[gpufleet] attempt 1\n%sa0\n%sa1\n%sb0\n" % (
        torchrun_tag(0, 0), torchrun_tag(1, 1), torchrun_tag(0, 0)))
    (tmp_path / "node1.log").write_text("%sc2\n" % torchrun_tag(2, 0))
    written = rank_lines.split_by_rank([str(tmp_path / "node0.log"), str(tmp_path / "node1.log"),
                                        str(tmp_path / "gone.log")], str(tmp_path))
    assert written == [str(tmp_path / "ranks" / ("rank%d.log" % rank)) for rank in (0, 1, 2)]
    assert [open(path).read() for path in written] == ["a0\nb0\n", "a1\n", "c2\n"]
    assert rank_lines.split_by_rank([str(tmp_path / "node9.log")], str(tmp_path / "untagged")) == []


def test_the_failing_rank_s_lines_come_first_in_the_report():
    tail = [torchrun_tag(2, 0) + "step 9", torchrun_tag(3, 1) + "ValueError: bad batch", torchrun_tag(2, 0) + "step 10",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"]
    failed = {"host": "node1", "node_rank": 1, "state": "failed", "exit_code": 1, "first_exit_at": 1.0,
              "root_cause": {"rank": 3, "local_rank": 1, "exit_code": 1}, "log_tail": tail, "log": "logs/j/node1.log"}
    message = failure_message("j", [failed])
    assert message.endswith("\n".join([tail[1], "(the other lines of the tail:)", tail[0], tail[2], tail[3]])), message
    assert rank_lines.failing_rank_first(tail, 5) == tail and rank_lines.failing_rank_first(tail, None) == tail


def test_the_master_rank_s_last_lines_come_from_rank_0_s_file_or_the_master_node_s_own_lines(tmp_path):
    """Rank 0's last lines (examples/train.py's last word is rank 0's); a launcher that tags nothing (launcher none):
    the master node's log without the supervisor's lines."""
    (tmp_path / "node0.log").write_text("".join(
        ["[gpufleet] attempt 1 of 1, master port 29500\n"] + ["%sepoch %d\n" % (torchrun_tag(r, r), e)
                                                             for e in range(1, 8) for r in (0, 1)]
        + [torchrun_tag(0, 0) + "final test_accuracy 0.9972 world_size 2\n", "[gpufleet] attempt 1 ended\n"]))
    written = rank_lines.split_by_rank([str(tmp_path / "node0.log")], str(tmp_path))
    found_in, lines = rank_lines.last_words(written, str(tmp_path / "node0.log"))
    assert found_in == str(tmp_path / "ranks" / "rank0.log")
    assert lines == ["epoch 4", "epoch 5", "epoch 6", "epoch 7", "final test_accuracy 0.9972 world_size 2"]
    (tmp_path / "plain.log").write_text("loading\ndone: loss 0.12\n[gpufleet] the job succeeded\n")
    assert rank_lines.last_words([], str(tmp_path / "plain.log"), count=1) == (str(tmp_path / "plain.log"),
                                                                                ["done: loss 0.12"])
    # Tagged lines but none of rank 0's: nothing said rather than another rank's or the launcher's lines.
    assert rank_lines.last_words(written[1:], str(tmp_path / "node0.log")) == ("", [])
    assert rank_lines.last_words([], None) == ("", []) and rank_lines.last_words([], str(tmp_path / "gone")) == ("", [])
