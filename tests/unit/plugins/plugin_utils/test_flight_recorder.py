"""The flight recorder's dumps read on the controller (plugin_utils/_postmortem/flight_recorder.py).

The dumps are written by the stand-in the cluster tests' ranks use (tests/cluster/scripts/faulty_train.py:
FlightRecorderStandIn, torch 2.13's format), and torch's own analyser (the venv's torch) reads the same files, which
shows the stand-in's format is the one torch reads. Not checked here: a dump written by NCCL itself (no GPU here).
"""

import importlib.util
import os
import pickle

import pytest

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._postmortem import flight_recorder

FAULTY = os.path.join(os.path.dirname(__file__), "..", "..", "..", "cluster", "scripts", "faulty_train.py")


@pytest.fixture(scope="module")
def standin():
    spec = importlib.util.spec_from_file_location("faulty_train", FAULTY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FlightRecorderStandIn


def all_reduce_in_the_step(recorder, seq, name="all_reduce", sizes=(1,)):
    recorder.entering(seq, name, list(sizes))


CALLED_AT = all_reduce_in_the_step.__code__.co_firstlineno + 1  # the line of the call the dumps' frames hold


def write_dumps(folder, standin, monkeypatch, world=6, steps=7, behind=None, odd=None):
    """Each rank's dump after `steps` collectives; rank `behind` stopped before the last; rank `odd` called an
    all_gather of 4 instead of the last all_reduce. The last collective is left started (waiting), unless every
    rank entered it and none is odd (then completed)."""
    monkeypatch.setenv("TORCH_FR_DUMP_TEMP_FILE", os.path.join(str(folder), "rank_"))
    for rank in range(world):
        recorder = standin(rank, world)
        for seq in range(1, (steps - 1 if rank == behind else steps) + 1):
            if rank == odd and seq == steps:
                all_reduce_in_the_step(recorder, seq, "all_gather", (4,))
            else:
                all_reduce_in_the_step(recorder, seq)
            if seq < steps or (behind is None and odd is None):
                recorder.completed()
    return sorted(os.listdir(str(folder)))


def test_a_rank_that_never_entered_the_collective_the_others_wait_in_is_named_with_where_they_wait(
        tmp_path, standin, monkeypatch):
    names = write_dumps(tmp_path, standin, monkeypatch, behind=4)
    dumps, unread = flight_recorder.read_dumps(str(tmp_path), names)
    assert sorted(dumps) == [0, 1, 2, 3, 4, 5] and unread == []
    assert flight_recorder.verdict(dumps) == (
        "ranks 0–3, 5 wait in nccl:all_reduce #7 of process group default_pg at all_reduce "
        "(test_flight_recorder.py:%d); rank 4 never entered it (rank 4's last: #6, completed): the likely cause"
        % CALLED_AT)
    # torch's own analyser, on the same files, says the same.
    output, said = flight_recorder.torch_analyser(str(tmp_path), names)
    assert said == ("Not all ranks joining collective, sequence number: 7; group info: 0:default_pg; "
                    "collective: nccl:all_reduce; missing ranks: {4}"), output


def test_ranks_that_called_different_collectives_at_the_same_place_are_a_mismatch(tmp_path, standin, monkeypatch):
    names = write_dumps(tmp_path, standin, monkeypatch, world=4, odd=3)
    dumps, _unread = flight_recorder.read_dumps(str(tmp_path), names)
    assert flight_recorder.verdict(dumps) == (
        "collective #7 of process group default_pg differs between ranks: ranks 0–2 nccl:all_reduce [[1]], "
        "rank 3 nccl:all_gather [[4]]")


def test_every_rank_done_with_the_same_last_collective_blames_none(tmp_path, standin, monkeypatch):
    names = write_dumps(tmp_path, standin, monkeypatch, world=3)
    dumps, _unread = flight_recorder.read_dumps(str(tmp_path), names)
    assert flight_recorder.verdict(dumps) is None


def test_missing_dumps_are_named(tmp_path, standin, monkeypatch):
    names = write_dumps(tmp_path, standin, monkeypatch, world=6, behind=4)
    os.remove(os.path.join(str(tmp_path), "rank_5"))
    dumps, _unread = flight_recorder.read_dumps(str(tmp_path), [n for n in names if n != "rank_5"])
    assert flight_recorder.verdict(dumps).endswith("the likely cause; no dump from rank 5")


def entry(group, desc, seq, state):
    return {"process_group": (group, desc), "collective_seq_id": seq, "profiling_name": "nccl:all_reduce",
            "input_sizes": [[8]], "state": state, "is_p2p": False, "frames": []}


def test_a_rank_outside_a_process_group_is_never_behind_in_it():
    """Four ranks; process group 1 (desc dp) holds ranks 0 and 1 only: rank 0 waits in its collective #5 that rank 1
    never entered; ranks 2 and 3, which have no collective of that group, are not blamed for it."""
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
              "1": {"name": "1", "desc": "dp", "ranks": "[0, 1]"}}
    default = [entry("0", "default_pg", seq, "completed") for seq in (1, 2, 3)]
    dumps = {0: {"pg_config": config, "entries": default + [entry("1", "dp", 4, "completed"), entry("1", "dp", 5, "started")]},
             1: {"pg_config": config, "entries": default + [entry("1", "dp", 4, "completed")]},
             2: {"pg_config": config, "entries": list(default)}, 3: {"pg_config": config, "entries": list(default)}}
    assert flight_recorder.verdict(dumps) == (
        "rank 0 waits in nccl:all_reduce #5 of process group dp; rank 1 never entered it (rank 1's last: #4, "
        "completed): the likely cause")
    # A group that pg_config gives no member with an entry says nothing (and does not fail).
    assert flight_recorder.group_verdict({2: dumps[2]}, "1") is None


class RunsCode:
    def __reduce__(self):
        return (open, ("/tmp/should-never-exist-%d" % os.getpid(), "w"))


def test_a_file_that_names_a_class_or_function_is_refused_and_nothing_in_it_runs(tmp_path):
    (tmp_path / "rank_0").write_bytes(pickle.dumps({"entries": [RunsCode()]}))
    (tmp_path / "rank_1").write_bytes(b"not a pickle")
    (tmp_path / "rank_2").write_bytes(pickle.dumps(["a list"]))
    dumps, unread = flight_recorder.read_dumps(str(tmp_path), ["rank_0", "rank_1", "rank_2"])
    assert dumps == {}
    assert unread[0] == "rank_0 not read: a flight recorder dump holds no class, and this file names io.open", unread
    assert unread[1].startswith("rank_1 not read: ") and unread[2] == "rank_2 not read: not a flight recorder dump " \
        "(no entries list)"
    assert not os.path.exists("/tmp/should-never-exist-%d" % os.getpid())


def test_without_torch_on_the_controller_only_gpufleet_s_reading_is_said(tmp_path, standin, monkeypatch):
    """A Python without torch answers `-m torch.distributed...` with its own error (the text CPython 3.11 prints,
    kept here): the analyser is then said nothing of, not reported as failed."""
    folder = tmp_path / "dumps"
    folder.mkdir()
    names = write_dumps(folder, standin, monkeypatch, world=2, behind=1)
    python = tmp_path / "python-without-torch"
    python.write_text("#!/bin/sh\necho \"$0: Error while finding module specification for "
                      "'torch.distributed.flight_recorder.fr_trace' (ModuleNotFoundError: No module named 'torch')\" "
                      ">&2\nexit 1\n")
    python.chmod(0o755)
    assert flight_recorder.torch_analyser(str(folder), names, python=str(python)) == ("", "")


def test_the_report_reads_the_dumps_this_run_fetched_and_keeps_torch_s_output(tmp_path, standin, monkeypatch):
    folder = tmp_path / "flight_recorder"
    folder.mkdir()
    write_dumps(folder, standin, monkeypatch, world=4, behind=2)
    os.rename(str(folder / "rank_3"), str(folder / "rank_9"))  # an older run's file: not this run's
    results = [{"host": "node0", "flight_recorder": {"dumps": ["rank_0", "rank_1"]}},
               {"host": "node1", "flight_recorder": {"dumps": ["rank_2"]}}, {"host": "node2"}]
    found = flight_recorder.summary(str(tmp_path), results)
    assert found["dumps"] == [str(folder / name) for name in ("rank_0", "rank_1", "rank_2")]
    assert found["said"].startswith("ranks 0, 1 wait in nccl:all_reduce #7 of process group default_pg at all_reduce ("
                                    "test_flight_recorder.py:%d); " % CALLED_AT), found
    # torch's analyser cannot judge a collective without every member's dump, and says so.
    assert ("rank 2 never entered it (rank 2's last: #6, completed): the likely cause; no dump from rank 3; torch's "
            "analyser: We cannot decide what's wrong with this collective entry because we missed FR dumps from ranks "
            "({3}) so we don't have enough information (%s)" % (folder / "fr_trace.txt")) in found["said"], found
    assert found["said"].endswith("(3 dumps in %s)" % folder)
    assert found["analyser"] == str(folder / "fr_trace.txt") and "FR dumps from ranks ({3})" in open(found["analyser"]).read()
    assert flight_recorder.summary(str(tmp_path), [{"host": "node0"}]) == {"said": "", "dumps": [], "analyser": ""}
