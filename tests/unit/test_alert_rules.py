"""gpufleet's alert rules (roles/prometheus/files/gpufleet.rules.yml) checked by Prometheus's own promtool (taken out of
the distribution's package by scripts/fetch-prometheus.sh, `make setup`): the rules load, every alert fires in
tests/unit/prometheus/gpufleet.rules.test.yml and stays quiet where it must, every DCGM name and label the rules
read is one NVIDIA's DCGM exporter serves (tests/fixtures/dcgm_exporter/: a real capture and the exporter's default
field list), every gpufleet_job_* name and label one the supervisor writes (job_metrics.py), every gpufleet_node_*
one health.yml writes (standing_metrics.py), and every node_* one the node exporter serves
(tests/fixtures/node_exporter/: its own end-to-end output)."""

import os
import re

import pytest
import yaml

from prometheus_tools import prometheus_tool, run as promtool_run
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import job_metrics
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gpu_health import APPLICATION_XIDS
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import health_check, history, standing_metrics

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULES = os.path.join(REPO, "roles", "prometheus", "files", "gpufleet.rules.yml")
RULE_TESTS = os.path.join(REPO, "tests", "unit", "prometheus", "gpufleet.rules.test.yml")
EXPORTER = os.path.join(REPO, "tests", "fixtures", "dcgm_exporter")


@pytest.fixture(name="promtool", scope="module")
def fixture_promtool():
    return prometheus_tool("promtool")


def alerts():
    with open(RULES) as handle:
        return {rule["alert"]: rule for group in yaml.safe_load(handle)["groups"] for rule in group["rules"]}


def test_promtool_loads_the_rules(promtool):
    done = promtool_run(promtool, "check", "rules", RULES)
    assert done.returncode == 0 and "SUCCESS: %d rules found" % len(alerts()) in done.stdout, done.stdout + done.stderr


def test_every_alert_fires_in_the_rules_tests_and_every_test_passes(promtool):
    with open(RULE_TESTS) as handle:
        cases = [case for test in yaml.safe_load(handle)["tests"] for case in test["alert_rule_test"]]
    assert {case["alertname"] for case in cases if case["exp_alerts"]} == set(alerts())
    assert {case["alertname"] for case in cases if not case["exp_alerts"]} == set(alerts())  # and stays quiet
    done = promtool_run(promtool, "test", "rules", RULE_TESTS)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


def test_a_rule_that_alerts_on_an_application_xid_fails_its_test(promtool, tmp_path):
    """The tests catch a broken rule: with the application XIDs no longer left out, node2's XID 13 fires."""
    with open(RULES) as handle:
        rules = handle.read()
    broken = rules.replace("DCGM_FI_DEV_XID_ERRORS != 13 ", "DCGM_FI_DEV_XID_ERRORS ")
    assert broken != rules
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "gpufleet.rules.yml").write_text(broken)
    with open(RULE_TESTS) as handle:
        tests = handle.read().replace("../../../roles/prometheus/files/", "rules/")
    (tmp_path / "test.yml").write_text(tests)
    done = promtool_run(promtool, "test", "rules", str(tmp_path / "test.yml"))
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "alertname: GpuHardwareXid, time: 3m" in said, said
    assert 'node="node2"' in said and "raised XID 13" in said


def test_the_xids_the_rule_leaves_out_are_the_launch_gate_s_application_xids():
    left_out = re.findall(r"!= (\d+)", alerts()["GpuHardwareXid"]["expr"])
    assert sorted(int(xid) for xid in left_out) == sorted(APPLICATION_XIDS)


def labels_in(text):
    return set(re.findall(r"[{,]([A-Za-z_]+)=\"", text))


def read_by(prefix):
    """The names with prefix that the rules' expressions read, and the labels the annotations of those rules use."""
    names, labels = set(), set()
    for rule in alerts().values():
        expr = re.sub(r"\b(on|by|ignoring|without) \([^)]*\)", "", rule["expr"])  # label names, not metrics
        found = set(re.findall(r"\b%s[A-Za-z0-9_]+" % prefix, expr))
        names |= found
        for text in rule["annotations"].values() if found else ():
            labels |= set(re.findall(r"\$labels\.([A-Za-z_]+)", text))
    return names, labels


# The labels the role's scrape configuration gives every target (prometheus.server_config), and Prometheus's own.
SCRAPE_LABELS = {"node", "instance", "job"}


def test_every_dcgm_name_and_label_the_rules_read_is_one_the_exporter_serves():
    with open(os.path.join(EXPORTER, "default-counters.csv")) as handle:
        served = {line.split(",")[0].strip() for line in handle if line.strip() and not line.startswith("#")}
    with open(os.path.join(EXPORTER, "metrics-tesla-t4.txt")) as handle:
        capture = handle.read()
    read, labels = read_by("DCGM_")
    assert read and read <= served, read - served
    assert {"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_TEMP"} <= read and all(
        "# TYPE %s " % name in capture for name in ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_TEMP"))
    assert labels - SCRAPE_LABELS <= labels_in(capture), labels - labels_in(capture)


def test_every_gpufleet_name_and_label_the_rules_read_is_one_the_supervisor_writes():
    """job_metrics.render of a part that hung after losing a peer, in its second attempt: the names and labels the
    rules read are among what it writes."""
    record = {"state": "hung", "attempt": 2, "restarts_used": 1, "max_restarts": 3, "node_rank": 1,
              "members": [["node1"], ["node2"]], "started_at": 1.0, "peers_lost": {"node3": 2.0}}
    written = job_metrics.render("train", "alice", record, 10.0)
    read, labels = read_by("gpufleet_job_")
    assert {"gpufleet_job_state", "gpufleet_job_peer_lost", "gpufleet_job_attempt"} <= read
    assert all("# TYPE %s gauge" % name in written for name in read), [n for n in read if n not in written]
    assert labels - SCRAPE_LABELS <= labels_in(written) == {"gpufleet_job", "user", "state", "peer"}, labels


def test_every_node_standing_name_and_label_the_rules_read_is_one_health_yml_writes():
    """standing_metrics' two files for a quarantined node refused by its check with NVLink links down."""
    entry = {"state": history.QUARANTINED, "faults": [{"class": "gpu"}] * 3}
    check = health_check.NodeCheck(health_check.REFUSED, {"gpu": [], "network": []}, 2, "")
    probe = {"gpu_health": {"nvlink": {"0": {"up": 10, "down": []}, "1": {"up": 8, "down": [4, 9]}}}}
    written = standing_metrics.standing(entry, 3) + standing_metrics.health(check, 10.0, probe)
    read, labels = read_by("gpufleet_node_")
    assert {"gpufleet_node_state", "gpufleet_node_health_check_result", "gpufleet_node_nvlink_links_down"} <= read
    assert all("# TYPE %s gauge" % name in written for name in read), [n for n in read if n not in written]
    assert labels - SCRAPE_LABELS <= labels_in(written), labels - labels_in(written)
    assert 'gpufleet_node_state{state="quarantined"} 1' in written and 'nvlink_links_down{gpu="1"} 2' in written


def test_every_node_exporter_name_and_label_the_rules_read_is_one_the_exporter_serves():
    with open(os.path.join(REPO, "tests", "fixtures", "node_exporter", "e2e-output-infiniband.txt")) as handle:
        served = handle.read()
    read, labels = read_by("node_")
    assert read == {"node_infiniband_state_id"}, read
    assert all("# TYPE %s gauge" % name in served for name in read)
    assert labels - SCRAPE_LABELS <= labels_in(served) and {"device", "port"} <= labels, labels
    # 4 is ACTIVE, as the rule reads it: the exporter's own help text says so.
    assert "node_infiniband_state_id State of the InfiniBand port (0: no change, 1: down, 2: init, 3: armed, " \
           "4: active, 5: act defer)" in served
