"""The Grafana dashboard (dashboards/gpufleet.json), checked without a Grafana (none can be had here: no registry,
no Grafana package in Debian's archive): every query is PromQL that Prometheus's own promtool parses, reads only
metrics the exporters serve (NVIDIA's DCGM exporter: tests/fixtures/dcgm_exporter/; gpufleet's supervisors:
job_metrics.py; Prometheus's `up`), names only labels those series carry, and uses only the dashboard's own
variables; panels do not overlap, and the data source is an input, so the file imports as it is."""

import json
import os
import re

import yaml

from prometheus_tools import prometheus_tool, run
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import job_metrics
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import health_check, standing_metrics

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPORTER = os.path.join(REPO, "tests", "fixtures", "dcgm_exporter")
with open(os.path.join(REPO, "dashboards", "gpufleet.json")) as _handle:
    DASHBOARD = json.load(_handle)
SCRAPE_LABELS = {"node", "instance", "job"}  # the prometheus role's scrape configuration's, and Prometheus's own


def queries():
    """(where, PromQL, legend) of every query: panels, annotations, the variables' label_values() selectors."""
    found = [("panel %r" % panel["title"], target["expr"], target.get("legendFormat", ""))
             for panel in DASHBOARD["panels"] for target in panel.get("targets", [])]
    found += [("annotation %r" % item["name"], item["expr"], item.get("textFormat", ""))
              for item in DASHBOARD["annotations"]["list"]]
    for variable in DASHBOARD["templating"]["list"]:
        selector = re.match(r"label_values\((.*), *(\w+)\)$", variable["query"])
        found.append(("variable %r" % variable["name"], selector.group(1), "{{%s}}" % selector.group(2)))
    return found


def served():
    """The metric names the dashboard may read, and the labels their series carry."""
    with open(os.path.join(EXPORTER, "default-counters.csv")) as handle:
        dcgm = {line.split(",")[0].strip() for line in handle if line.strip() and not line.startswith("#")}
    with open(os.path.join(EXPORTER, "metrics-tesla-t4.txt")) as handle:
        capture = handle.read()
    written = job_metrics.render("train", "alice", {"state": "running", "members": [["a"]], "started_at": 1.0,
                                           "peers_lost": {"b": 1.0}}, 2.0)
    check = health_check.NodeCheck(health_check.WARNED, {"gpu": [], "network": []}, 1, "")
    written += standing_metrics.standing({"state": "in service", "faults": []}, 3) + standing_metrics.health(check, 2.0)
    names = dcgm | set(re.findall(r"^# TYPE (\S+) ", written, re.M)) | {"up"}
    labels = set(re.findall(r"[{,]([A-Za-z_]+)=\"", capture + written)) | SCRAPE_LABELS
    return names, labels


def test_every_query_is_promql_that_promtool_parses(tmp_path):
    rules = [{"record": "dashboard:query_%d" % index, "expr": re.sub(r"\$\w+", ".*", expr)}
             for index, (_where, expr, _legend) in enumerate(queries())]
    path = tmp_path / "queries.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = run(prometheus_tool("promtool"), "check", "rules", str(path))
    assert done.returncode == 0 and "SUCCESS: %d rules found" % len(rules) in done.stdout, done.stdout + done.stderr


def test_every_query_reads_served_metrics_and_labels_and_only_the_dashboard_s_variables():
    names, labels = served()
    variables = {variable["name"] for variable in DASHBOARD["templating"]["list"]}
    for where, expr, legend in queries():
        bare = re.sub(r"\b(on|by|ignoring|without) *\([^)]*\)", "", re.sub(r'"[^"]*"', '""', expr))
        read = set(re.findall(r"\b([A-Za-z_:][A-Za-z0-9_:]*)\s*(?:\{|\[|$|\s|\))", bare)) - {"and", "or", "unless"}
        read -= {word for word in read if re.match(r"^(changes|rate|increase|max_over_time|sum|max|min)$", word)}
        assert read and read <= names, (where, read - names)
        used = set(re.findall(r"\b([A-Za-z_]+)=~?\"", expr)) | set(re.findall(r"\{\{(\w+)\}\}", legend))
        assert used <= labels, (where, used - labels)
        assert set(re.findall(r"\$(\w+)", expr)) <= variables, where


def test_panels_do_not_overlap_and_the_data_source_is_an_input_so_it_imports_as_is():
    assert [item["name"] for item in DASHBOARD["__inputs"]] == ["DS_PROMETHEUS"]
    cells = {}
    for panel in DASHBOARD["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, (panel["title"], cells.get((x, y)))
                cells[(x, y)] = panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, panel["title"]
    assert len({panel["id"] for panel in DASHBOARD["panels"]}) == len(DASHBOARD["panels"])
    # What the issue asks the fleet's page to show: utilisation, memory, power, temperature, throttling, XIDs
    # marked, attempts and restarts.
    exprs = " ".join(expr for _where, expr, _legend in queries())
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP",
                 "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_XID_ERRORS", "gpufleet_job_attempt", "gpufleet_job_restarts"):
        assert name in exprs, name
