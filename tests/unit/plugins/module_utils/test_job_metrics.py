"""A node's part of a job as Prometheus metrics (module_utils/_runtime/job_metrics.py), written by the one writer of
its record (state_file.py): the text is what Prometheus's own promtool accepts as the exposition format, the file is
replaced whole and readable by the node exporter's user, a node without the folder is left alone, and a folder that
cannot be written is said once in the part's events while the job goes on."""

import os
import stat

from prometheus_tools import prometheus_tool, run
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import job_metrics
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.state_file import StateFile

RECORD = {"job": "train", "state": "running", "attempt": 2, "restarts_used": 1, "max_restarts": 3, "node_rank": 1,
          "members": [["node1", "192.0.2.11"], ["node2", "192.0.2.12"]], "started_at": 1764400000.25,
          "peers_lost": {"node3": 1764400100.5}, "events": []}


def test_a_running_part_s_metrics_name_its_state_attempt_restarts_and_the_peer_it_lost():
    text = job_metrics.render("train", "alice", RECORD, 1764400200.125)
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    labels = 'gpufleet_job="train",user="alice"'
    assert 'gpufleet_job_state{%s,state="running"} 1' % labels in lines
    assert sum(line.startswith("gpufleet_job_state{") and line.endswith(" 1") for line in lines) == 1
    assert len([line for line in lines if line.startswith("gpufleet_job_state{")]) == len(job_metrics.PART_STATES)
    for name, value in (("attempt", "2"), ("restarts", "1"), ("max_restarts", "3"), ("nodes", "2"), ("node_rank", "1"),
                        ("gpu_fault", "0"), ("started_timestamp_seconds", "1764400000.25"),
                        ("updated_timestamp_seconds", "1764400200.125")):
        assert "gpufleet_job_%s{%s} %s" % (name, labels, value) in lines, (name, text)
    assert 'gpufleet_job_peer_lost{%s,peer="node3"} 1' % labels in lines


def test_promtool_reads_the_text_as_prometheus_s_exposition_format_and_finds_nothing_to_lint():
    for record in (RECORD, {"state": "queued"}, dict(RECORD, state="hung", gpu_fault=[0, 79], peers_lost={})):
        done = run(prometheus_tool("promtool"), "check", "metrics", input_text=job_metrics.render(
            'a "quoted" job\\', "bob", record, 5.0))
        assert done.returncode == 0 and done.stdout + done.stderr == "", done.stdout + done.stderr


def test_the_file_is_replaced_whole_readable_by_the_exporter_and_named_after_the_job(tmp_path):
    metrics = job_metrics.JobMetrics(str(tmp_path), "my job/1")
    assert metrics.write(RECORD) is None
    written = tmp_path / "gpufleet_job_root_my_job_1.prom"
    assert stat.S_IMODE(os.stat(written).st_mode) == 0o644
    assert 'gpufleet_job="my job/1",user="root"' in written.read_text()  # the tests run as root
    assert sorted(os.listdir(tmp_path)) == ["gpufleet_job_root_my_job_1.prom"]  # no temporary file left


def test_a_node_without_the_folder_is_left_alone_and_says_nothing(tmp_path):
    metrics = job_metrics.JobMetrics(str(tmp_path / "no-node-exporter"), "train")
    assert metrics.write(RECORD) is None and not (tmp_path / "no-node-exporter").exists()
    assert job_metrics.JobMetrics("", "train").write(RECORD) is None


def test_a_folder_that_cannot_be_written_is_said_once_in_the_part_s_events_and_the_record_is_still_written(tmp_path):
    folder = tmp_path / "textfile"
    folder.mkdir()
    job_dir = tmp_path / "jobs" / "train"
    job_dir.mkdir(parents=True)
    # What the rename needs cannot be made: a folder where the temporary file would go (the tests run as root, whom
    # file modes do not stop).
    (folder / ("gpufleet_job_root_train.prom.%d.tmp" % os.getpid())).mkdir()
    states = StateFile(str(job_dir), "run-1", str(folder))
    states.write(dict(RECORD, state="starting", events=[]))
    states.write(dict(states.read(), state="running"))
    states.write(dict(states.read(), state="succeeded"))
    events = [text for _when, text in states.read()["events"]]
    assert [text for text in events if text.startswith("job metrics not written")] == [
        "job metrics not written to %s: Is a directory (job_metrics_dir; monitor.yml's node_exporter role lets "
        "node_exporter_metrics_users write there)" % folder], events
    assert states.read()["state"] == "succeeded"
    assert not (folder / "gpufleet_job_root_train.prom").exists()


def test_the_record_s_writer_writes_the_metrics_of_each_state_it_records(tmp_path):
    job_dir = tmp_path / "train"
    job_dir.mkdir()
    states = StateFile(str(job_dir), "run-1", str(tmp_path))
    states.write(dict(RECORD, state="starting", events=[]))
    assert 'state="starting"} 1' in (tmp_path / "gpufleet_job_root_train.prom").read_text()
    states.write(dict(states.read(), state="running"))
    text = (tmp_path / "gpufleet_job_root_train.prom").read_text()
    assert 'state="running"} 1' in text and 'state="starting"} 0' in text
