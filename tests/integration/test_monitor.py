"""monitor.yml's refusals on the local two-node inventory, before any host is changed: a monitoring host outside the
inventory or none, a scrape interval or retention Prometheus would not read as a duration (or zero), a retention
size it would not read, a port that is not one. Each run is in check mode with a tag no task has, so that a
refusal that failed to come could change nothing here; the check play's tasks run under any tag. (Prometheus and
the node exporter themselves run on the container cluster.)"""

import pytest

pytestmark = pytest.mark.integration

DURATION = "whole numbers with y, w, d, h, m, s or ms"


@pytest.mark.parametrize("args, needle", [
    (["-e", "monitor_host=mon9"],
     "monitor_host: mon9 is not a host of the inventory (its hosts: node0, node1); add it, or name one of them"),
    ([], "no host for the Prometheus server: add a gpu_monitor group to the inventory, or give -e monitor_host="),
    (["-e", "monitor_host=node1", "-e", "scrape_interval=1.5m"],
     "node1: prometheus_scrape_interval (gpufleet_prometheus_scrape_interval, -e scrape_interval): '1.5m' is not a "
     "Prometheus duration (e.g. 15s, 1m30s, 15d: %s)" % DURATION),
    (["-e", "monitor_host=node1", "-e", "retention=15"],
     "node1: prometheus_retention (gpufleet_prometheus_retention, -e retention): '15' is not a Prometheus duration"),
    (["-e", "monitor_host=node1", "-e", "retention=0d"], "'0d' is zero, which Prometheus reads as its default"),
    (["-e", "monitor_host=node1", "-e", "retention_size=10gb"],
     "node1: prometheus_retention_size (gpufleet_prometheus_retention_size, -e retention_size): '10gb' is not a size "
     "Prometheus reads"),
    (["-e", "monitor_host=node1", "-e", "gpufleet_prometheus_port=0"], "node1: prometheus_port: 0 is not a port"),
    (["-e", "monitor_host=node1", "-e", "gpufleet_node_exporter_port=70000"],
     "node0: node_exporter_port: 70000 is not a port (1-65535)"),
])
def test_a_bad_monitoring_setting_is_refused_before_any_host_is_changed(local, args, needle):
    run = local.playbook("monitor.yml", "-e", "allow_local=true", "--check", "--tags", "no_such_task", *args)
    said = " ".join(run.out.split())
    assert run.rc != 0 and needle in said and "nothing was changed" in said, said[-3000:]
    # The play that installs anything never started.
    assert "PLAY [The node exporter on every node and spare]" not in run.out, run.out[-3000:]


def test_good_settings_pass_the_check_and_reach_the_plays_that_change_the_hosts(local):
    """The same run with settings that are right: every check passes and the plays that would change the hosts
    start (with no task under the tag given, they change nothing)."""
    run = local.playbook("monitor.yml", "-e", "allow_local=true", "--check", "--tags", "no_such_task",
                         "-e", "monitor_host=node1", "-e", "retention=8w", "-e", "retention_size=1.5TB")
    assert run.rc == 0, run.out[-3000:]
    assert "PLAY [The node exporter on every node and spare]" in run.out
    assert "PLAY [The Prometheus server on the monitoring host]" in run.out
