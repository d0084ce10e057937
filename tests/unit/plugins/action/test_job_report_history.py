"""job_report's part in the fleet's history (action job_report.py _record_faults): a job's faults are appended
once, however often its report is read (train.yml, then stop.yml on the same run), and a history it cannot read is
said and left as it is."""

import json

from ansible_collections.gpufleet.cluster.plugins.action import job_report

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
