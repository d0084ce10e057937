"""monitor.yml's settings and the Prometheus server's configuration (plugin_utils/_provision/prometheus.py), held
against Prometheus itself: every duration and size below is given to the distribution's own promtool (a
configuration's scrape_interval) and prometheus (its retention flags), and gpufleet must accept exactly what they
accept (zero durations and negative sizes aside, which gpufleet refuses on purpose)."""

import yaml
import pytest

from prometheus_tools import prometheus_tool, run
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._provision import prometheus

DURATIONS = ["15s", "1m30s", "90s", "10ms", "2d", "1y", "2w", "1h5m", "1.5m", "15", "", "-1s", "15S", "1s1m", "5 s",
             "1d1d"]
SIZES = ["512MB", "1GB", "1.5GB", "10GiB", "1GB512MB", "0", "0B", "1TB", "100", "1gb", "5XB", "1 GB", "MB"]


def promtool_reads_interval(tmp_path, value):
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": value}}))
    done = run(prometheus_tool("promtool"), "check", "config", str(config))
    assert "SUCCESS" in done.stdout or "FAILED" in done.stdout + done.stderr, done.stdout + done.stderr
    return done.returncode == 0


def prometheus_reads_flag(tmp_path, flag, value):
    """prometheus parses its flags before it reads its configuration: a flag it refuses ends it before the (missing)
    configuration file is opened."""
    done = run(prometheus_tool("prometheus"), "--config.file=%s" % (tmp_path / "missing.yml"),
               "--storage.tsdb.path=%s" % (tmp_path / "data"), "--%s=%s" % (flag, value), timeout=30)
    said = done.stdout + done.stderr
    assert done.returncode != 0 and ("Error loading config" in said or "Error parsing command" in said), said
    return "Error loading config" in said


@pytest.mark.parametrize("value", DURATIONS)
def test_a_duration_is_accepted_exactly_when_promtool_and_prometheus_read_it(tmp_path, value):
    ours = prometheus.duration_error("gpufleet_prometheus_scrape_interval", value) == ""
    assert ours == promtool_reads_interval(tmp_path, value), value
    assert ours == prometheus_reads_flag(tmp_path, "storage.tsdb.retention.time", value), value


@pytest.mark.parametrize("value", SIZES)
def test_a_retention_size_is_accepted_exactly_when_prometheus_reads_it(tmp_path, value):
    ours = prometheus.size_error("gpufleet_prometheus_retention_size", value) == ""
    assert ours == prometheus_reads_flag(tmp_path, "storage.tsdb.retention.size", value), value


def test_a_zero_duration_or_negative_size_that_prometheus_takes_is_refused_naming_the_variable(tmp_path):
    assert promtool_reads_interval(tmp_path, "0s")
    assert prometheus_reads_flag(tmp_path, "storage.tsdb.retention.size", "-1GB")
    assert prometheus.size_error("gpufleet_prometheus_retention_size", "-1GB") == (
        "gpufleet_prometheus_retention_size: '-1GB' is negative; give a size (e.g. 512MB or 2TB), or leave it empty "
        "for no size limit")
    assert prometheus.duration_error("gpufleet_prometheus_retention", "0d") == (
        "gpufleet_prometheus_retention: '0d' is zero, which Prometheus reads as its default; give the duration you "
        "want (e.g. 15s, 1m30s, 15d)")


DURATIONS_SET = {"scrape_interval": "15s", "retention": "15d"}


def test_settings_name_the_first_variable_at_fault():
    hosts = ["node1", "node2", "mon"]
    assert prometheus.settings_error("mon", hosts, ["node1", "node2"], DURATIONS_SET, {"size": ""}) == ""
    assert prometheus.settings_error("", hosts, ["node1"], DURATIONS_SET, {}).startswith(
        "no host for the Prometheus server: add a gpu_monitor group to the inventory, or give -e monitor_host=")
    assert prometheus.settings_error("mon2", hosts, ["node1"], DURATIONS_SET, {}) == (
        "monitor_host: mon2 is not a host of the inventory (its hosts: node1, node2, mon); add it, or name one of them")
    assert "nothing to watch" in prometheus.settings_error("mon", hosts, [], DURATIONS_SET, {})
    bad = dict(DURATIONS_SET, scrape_interval="1.5m")
    assert prometheus.settings_error("mon", hosts, ["node1"], bad, {"size": "10gb"}) == (
        "scrape_interval: '1.5m' is not a Prometheus duration (e.g. 15s, 1m30s, 15d: whole numbers with y, w, d, h, m, "
        "s or ms)")
    assert prometheus.settings_error("mon", hosts, ["node1"], DURATIONS_SET, {"size": "10gb"}).startswith(
        "size: '10gb' is not a size Prometheus reads")


def test_the_server_configuration_scrapes_every_node_and_gpu_exporter_by_its_address_and_promtool_accepts_it(tmp_path):
    nodes = [{"host": "node1", "ip": "192.0.2.11"}, {"host": "node2", "ip": "2001:db8::12"}]
    assert "dcgm" not in [job["job_name"] for job in prometheus.server_config(nodes, 9100, "30s")["scrape_configs"]]
    config = prometheus.server_config(nodes, 9100, "30s", listen_port=9091, dcgm_hosts=["node2", "spare9"])
    jobs = {job["job_name"]: job["static_configs"] for job in config["scrape_configs"]}
    assert jobs["node"] == [{"targets": ["192.0.2.11:9100"], "labels": {"node": "node1"}},
                            {"targets": ["[2001:db8::12]:9100"], "labels": {"node": "node2"}}]
    # The DCGM exporter only where the node has one, as the job the GPU rules read (up{job="dcgm"}).
    assert jobs["dcgm"] == [{"targets": ["[2001:db8::12]:9400"], "labels": {"node": "node2"}}]
    assert jobs["prometheus"] == [{"targets": ["localhost:9091"]}]
    assert config["global"] == {"scrape_interval": "30s", "evaluation_interval": "30s"}
    # promtool reads it, with the rules where the role puts them (here: beside it).
    rules = tmp_path / "gpufleet.rules.yml"
    with open(prometheus.__file__.replace("plugins/plugin_utils/_provision/prometheus.py",
                                          "roles/prometheus/files/gpufleet.rules.yml")) as handle:
        rules.write_text(handle.read())
    written = tmp_path / "prometheus.yml"
    written.write_text(yaml.safe_dump(dict(config, rule_files=[str(rules)])))
    done = run(prometheus_tool("promtool"), "check", "config", str(written))
    with open(str(rules)) as handle:
        count = sum(1 for line in handle if line.strip().startswith("- alert:"))
    assert done.returncode == 0 and "SUCCESS: %d rules found" % count in done.stdout, done.stdout + done.stderr
    assert prometheus.server_args("15d", "", 9090) == "--storage.tsdb.retention.time=15d --web.listen-address=:9090"
    assert prometheus.server_args("30d", "2TB", 9091).endswith(" --storage.tsdb.retention.size=2TB")


def test_a_port_is_a_whole_number_from_1_to_65535_named_by_its_variable():
    assert [prometheus.port_error("prometheus_port", value) for value in (1, "9090", 65535)] == ["", "", ""]
    for value in (0, 65536, "90x", "", None, -1):
        assert prometheus.port_error("node_exporter_port", value) == (
            "node_exporter_port: %s is not a port (1-65535)" % ("" if value is None else value))
