"""logs/<job>/report.html (plugin_utils/_postmortem/report_page.py): the job's story as one page, self-contained, the
failing node, rank and reason before anything else."""

import html.parser
import os

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._postmortem import gpu_report, report, report_page

from test_gpu_report import write as write_samples  # the GPU watch's CSV columns, written as test_gpu_report does


class Page(html.parser.HTMLParser):
    """What a browser would load or run from the page: its tags, every URL it names, and its text in order."""

    def __init__(self, text):
        super().__init__()
        self.tags, self.urls, self.text = [], [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.urls.extend(value for name, value in attrs if name in ("src", "href", "srcset", "action", "data"))

    def handle_data(self, data):
        self.text.append(data)


def failed_job(tmp_path):
    logs = tmp_path / "logs" / "train"
    (logs / "ranks").mkdir(parents=True)
    for host in ("node0", "node1", "node2"):
        (logs / ("%s.log" % host)).write_text("step 1\n")
    (logs / "ranks" / "rank5.log").write_text("Traceback ...\n")
    (logs / "node2.stacks.txt").write_text("=== node2 rank 5 ===\n")
    (logs / "node0.stacks.txt").write_text("an earlier run's\n")  # this run took none on node0: not linked
    (logs / "events.log").write_text("".join("2026-11-29 05:00:%02d.000  node0  event %d\n" % (i % 60, i)
                                             for i in range(1000)))
    results = [
        {"host": "node0", "node_rank": 0, "state": "stopped", "ended_at": 5.0, "stopped_for": "node2",
         "log": str(logs / "node0.log")},
        {"host": "node1", "node_rank": 1, "state": "stopped", "ended_at": 5.0, "stopped_for": "node2",
         "log": str(logs / "node1.log")},
        {"host": "node2", "node_rank": 2, "state": "failed", "exit_code": 1, "ended_at": 4.0,
         "root_cause": {"rank": 5, "local_rank": 1, "exit_code": 3}, "log_tail": ["ValueError: <bad> & worse"],
         "log": str(logs / "node2.log"), "stacks": {"file": "stacks.txt", "error": None, "ranks": []}},
    ]
    write_samples(logs, "node2", [(80, 30000, 1980, 0)])
    gpus = gpu_report.job_gpus(str(logs), results)
    story = report_page.Story("train", results, str(logs), report.failure_message("train", results),
                              sections={"Restarts": "", "Spares": "node3 replaced node1"}, gpu_lines=gpus["lines"],
                              picture=gpus["picture"], last_from=str(logs / "ranks" / "rank0.log"),
                              last_lines=["final loss 0.1"], rank_logs=[str(logs / "ranks" / "rank5.log")],
                              events_log=str(logs / "events.log"))
    return logs, story


def test_the_failing_node_rank_and_reason_come_first(tmp_path):
    _logs, story = failed_job(tmp_path)
    page = Page(report_page.page(story))
    text = " ".join(" ".join(page.text).split())
    first = text.index("job train failed on node2 (node_rank 2): global rank 5 (local rank 1) exited with code 3")
    assert first < text.index("node0") and first < text.index("node rank state")  # before the table
    assert text.index("job train: failed on node2 (node_rank 2)") < first  # the headline
    assert "ValueError: <bad> & worse" in text  # escaped, shown as written
    assert "Spares node3 replaced node1" in text and "Restarts" not in text  # empty sections left out


def test_the_page_loads_nothing_from_elsewhere_and_runs_no_script(tmp_path):
    logs, story = failed_job(tmp_path)
    page = Page(report_page.page(story))
    assert "script" not in page.tags and "link" not in page.tags and "iframe" not in page.tags
    images = [url for url in page.urls if url.startswith("data:")]
    assert len(images) == 1 and images[0].startswith("data:image/png;base64,iVBORw0KGgo")  # the PNG itself
    links = [url for url in page.urls if not url.startswith("data:")]
    assert sorted(set(links)) == ["events.log", "node0.log", "node1.log", "node2.log", "node2.stacks.txt",
                             "ranks/rank0.log", "ranks/rank5.log"]
    for link in links:  # each relative to the page, beside the logs
        assert not link.startswith(("/", "..")) and "://" not in link
        assert os.path.exists(logs / link) or link == "ranks/rank0.log", link


def test_a_long_timeline_shows_its_ends_and_says_how_much_is_in_events_log(tmp_path):
    _logs, story = failed_job(tmp_path)
    text = "".join(Page(report_page.page(story)).text)
    assert "event 0\n" in text and "event 999" in text and "event 500\n" not in text
    assert "... 600 lines more in events.log ..." in text


def test_a_job_that_succeeded_says_so_and_the_file_is_written_whole(tmp_path):
    logs = tmp_path / "logs" / "ok"
    logs.mkdir(parents=True)
    results = [{"host": "node0", "node_rank": 0, "state": "succeeded", "exit_code": 0}]
    path = report_page.write(report_page.Story("ok", results, str(logs)))
    assert path == str(logs / "report.html") and os.listdir(logs) == ["report.html"]
    page = Page((logs / "report.html").read_text())
    assert "job ok: succeeded" in " ".join(" ".join(page.text).split())
    assert "What failed first" not in "".join(page.text)


def test_a_hang_s_headline_names_the_rank_its_stacks_name(tmp_path):
    def node(host, rank_frames):
        return {"host": host, "state": "hung", "reason": "hung: no node wrote to its log for 9 s (hang_timeout=8)",
                "stacks": {"file": "stacks.txt", "error": None, "ranks": [
                    {"rank": rank, "local_rank": 0, "pid": 100 + rank, "error": None, "frames": frames}
                    for rank, frames in rank_frames]}}
    waiting = [["all_reduce", "/venv/torch/distributed/distributed_c10d.py", 2941], ["step", "/work/train.py", 42]]
    loading = [["__next__", "/venv/torch/utils/data/dataloader.py", 708], ["step", "/work/train.py", 38]]
    results = [node("node0", [(0, waiting), (1, waiting)]), node("node1", [(2, waiting), (3, loading)])]
    said, good = report_page.outcome(results, report.failure_message("j", results))
    assert (said, good) == ("hung (the stacks name rank 3 on node1)", False)
