"""job_report's part in the fleet's history (action job_report.py _record_faults): a job's faults are appended
once, however often its report is read (train.yml, then stop.yml on the same run), and a history it cannot read is
said and left as it is."""

import json

from ansible_collections.gpufleet.cluster.plugins.action import job_report
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import history

XID = "node1 GPU 1 (0000:19:00.0): XID 79, GPU has fallen off the bus"
RESULTS = [{"host": "node0", "state": "stopped", "run_id": "r1"},
           {"host": "node1", "state": "failed", "gpu_fault": XID, "run_id": "r1", "ended_at": 1_800_000_000.0}]


def test_the_faults_are_appended_once(tmp_path):
    job_report._record_faults(str(tmp_path), "llm", RESULTS)
    job_report._record_faults(str(tmp_path), "llm", RESULTS)
    lines = (tmp_path / "history.jsonl").read_text().splitlines()
    assert [(r["node"], r["class"], r["fact"], r["job"], r["run"]) for r in map(json.loads, lines)] == [
        ("node1", "gpu", XID, "llm", "r1")]


def test_a_history_that_cannot_be_read_is_left_as_it_is(tmp_path, capsys):
    (tmp_path / "history.jsonl").write_text("not json\n")
    job_report._record_faults(str(tmp_path), "llm", RESULTS)
    assert (tmp_path / "history.jsonl").read_text() == "not json\n"
    assert "the job's faults were not recorded: the fleet's history" in capsys.readouterr().err.replace("\n", " ")


TORCH = "/opt/gpufleet/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
IN_ALL_REDUCE = [["all_reduce", TORCH, 2941], ["train_step", "/work/train.py", 42]]
IN_LOADER = [["__next__", "/opt/gpufleet/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", 708],
             ["train_step", "/work/train.py", 38]]


def hung(host, ranks, state="hung"):
    return {"host": host, "state": state, "run_id": "r2", "stacks": {"file": "stacks.txt", "error": None, "ranks": [
        {"rank": rank, "local_rank": 0, "pid": 100 + rank, "error": None, "frames": frames} for rank, frames in ranks]}}


def test_a_hang_records_the_node_its_stacks_name_and_the_fault_does_not_count(tmp_path):
    """The stacks of a hung job (stack_groups.py) name rank 3 on node1: recorded as a hang, which is not a hardware
    fault, so it never counts toward quarantine. A job that failed for another reason records no hang."""
    results = [hung("node0", [(0, IN_ALL_REDUCE), (1, IN_ALL_REDUCE)]), hung("node1", [(2, IN_ALL_REDUCE), (3, IN_LOADER)])]
    job_report._record_faults(str(tmp_path), "llm", results)
    records = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [(r["node"], r["class"], r["fact"], r["run"]) for r in records] == [
        ("node1", "hang", "the job hung; the stacks name rank 3 as the likely cause", "r2")]
    assert history.counted(records, "node1", 86400.0, records[0]["at"]) == []
    failed = [dict(results[0], state="failed", run_id="r3"), dict(results[1], state="stopped", run_id="r3")]
    job_report._record_faults(str(tmp_path / "other"), "llm", failed)
    assert not (tmp_path / "other" / "history.jsonl").exists()
