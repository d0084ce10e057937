"""gpufleet's alert rules (roles/prometheus/files/gpufleet.rules.yml) checked by Prometheus's own promtool (taken out of
the distribution's package by scripts/fetch-prometheus.sh, `make setup`): the rules load, every alert fires in
tests/unit/prometheus/gpufleet.rules.test.yml and stays quiet where it must, and every DCGM name and label the rules
read is one NVIDIA's DCGM exporter serves (tests/fixtures/dcgm_exporter/: a real capture and the exporter's default
field list)."""

import os
import re

import pytest
import yaml

from prometheus_tools import prometheus_tool, run as promtool_run
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gpu_health import APPLICATION_XIDS

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


def test_every_dcgm_name_and_label_the_rules_read_is_one_the_exporter_serves():
    with open(os.path.join(EXPORTER, "default-counters.csv")) as handle:
        served = {line.split(",")[0].strip() for line in handle if line.strip() and not line.startswith("#")}
    with open(os.path.join(EXPORTER, "metrics-tesla-t4.txt")) as handle:
        capture = handle.read()
    captured_labels = set(re.findall(r"[{,]([A-Za-z_]+)=\"", capture))
    read = set()
    labels = set()
    for rule in alerts().values():
        read |= set(re.findall(r"\bDCGM_[A-Z0-9_]+", rule["expr"]))
        for text in rule["annotations"].values():
            labels |= set(re.findall(r"\$labels\.([A-Za-z_]+)", text))
    assert read and read <= served, read - served
    assert {"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_TEMP"} <= read and all(
        "# TYPE %s " % name in capture for name in ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_TEMP"))
    # The exporter's own labels, and those the role's scrape configuration gives every target.
    assert labels - {"node", "instance"} <= captured_labels, labels - captured_labels
