"""Rolling maintenance (maintenance.py): the batches as Ansible's serial makes them, the refusals before any change,
what each batch will do, the records, and a node out of service as train.yml's placement reads it (history.py)."""

import pytest

from ansible_collections.gpufleet.cluster.plugins.filter.active_jobs import FilterModule
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import history, maintenance

DAY = 86400.0
NOW = 1795800000.0


@pytest.mark.parametrize("value, count, size", [(1, 4, 1), ("2", 4, 2), ("4", 4, 4), ("25%", 4, 1), ("50%", 4, 2),
                                                ("10%", 4, 1), ("100%", 3, 3), (" 3 ", 5, 3), ("33%", 10, 3)])
def test_a_batch_is_a_count_or_a_percentage_rounded_down_as_ansibles_serial_reads_it(value, count, size):
    # ansible.utils.helpers.pct_to_int: int(percent / 100 * items), at least 1.
    assert maintenance.batch_size(value, count) == size


@pytest.mark.parametrize("value, said", [
    (0, "maintain_batch=0: a batch takes 1 to 4 node(s)"),
    ("5", "maintain_batch=5: a batch takes 1 to 4 node(s)"),
    ("0%", "maintain_batch=0% is neither a number of nodes nor a whole percentage"),
    ("150%", "maintain_batch=150% is neither"),
    ("-1", "maintain_batch=-1 is neither"),
    ("two", "maintain_batch=two is neither"),
    ("1.5", "maintain_batch=1.5 is neither"),
    ("", "maintain_batch= is neither"),
])
def test_a_batch_of_none_or_more_than_the_nodes_is_refused_naming_the_value(value, said):
    with pytest.raises(maintenance.MaintenanceError) as caught:
        maintenance.batch_size(value, 4)
    assert str(caught.value).startswith(said) and str(caught.value).endswith("nothing was changed")


@pytest.mark.parametrize("value, reboot", [("auto", "auto"), ("always", "always"), (" never", "never")])
def test_maintain_reboot_is_auto_always_or_never(value, reboot):
    assert maintenance.reboot_choice(value) == reboot


@pytest.mark.parametrize("value, seconds", [(3600, 3600), ("0", 0), ("90 ", 90)])
def test_maintain_wait_s_is_whole_seconds(value, seconds):
    assert maintenance.wait_seconds(value) == seconds


@pytest.mark.parametrize("check, value, said", [
    (maintenance.reboot_choice, "sometimes", "maintain_reboot=sometimes must be auto, always or never"),
    (maintenance.reboot_choice, True, "maintain_reboot=True must be"),
    (maintenance.wait_seconds, "1h", "maintain_wait_s=1h must be a whole number of seconds"),
    (maintenance.wait_seconds, -5, "maintain_wait_s=-5 must be"),
    (maintenance.wait_seconds, "2.5", "maintain_wait_s=2.5 must be"),
    (maintenance.wait_seconds, "\u00b2", "maintain_wait_s=\u00b2 must be"),
])
def test_a_reboot_or_wait_that_is_not_one_is_refused_naming_the_value(check, value, said):
    with pytest.raises(maintenance.MaintenanceError) as caught:
        check(value)
    assert str(caught.value).startswith(said) and str(caught.value).endswith("nothing was changed")


def test_spares_come_first_then_the_nodes_in_order():
    hosts = maintenance.order(["node0", "node1", "node2"], ["spare0"])
    assert hosts == ["spare0", "node0", "node1", "node2"]
    assert maintenance.batches(hosts, 3) == [["spare0", "node0", "node1"], ["node2"]]


def status(*jobs):
    return {"jobs": [{"job": name, "state": state} for name, state in jobs]}


def test_the_jobs_that_hold_a_node_are_the_active_ones_a_spares_standby_included():
    held = status(("old", "succeeded"), ("llm", "running"), ("gone", "lost"), ("wait", "standby"), ("q", "queued"))
    assert [job["job"] for job in maintenance.active_jobs(held)] == ["llm", "wait", "q"]
    assert FilterModule().filters()["active_jobs"](held) == maintenance.active_jobs(held)
    assert maintenance.active_jobs(None) == [] and maintenance.active_jobs({"failed": True}) == []


def test_a_spare_standing_in_for_a_lost_node_is_refused_and_one_standing_by_is_not():
    jobs = {"spare0": status(("llm", "running")), "spare1": status(("llm", "standby")), "node0": status(("llm", "running"))}
    assert maintenance.refusals(["spare0", "spare1"], jobs) == [
        "spare0 (gpu_spares) stands in for a lost node in job llm (running): maintain it once that job has ended, or "
        "leave it out (--limit '!spare0')"]


def test_the_plan_says_each_batch_and_what_holds_each_node():
    jobs = {"node0": status(("llm", "running")), "node1": status(("llm", "running"))}
    lines = maintenance.plan_lines([["spare0"], ["node0"], ["node1"]], ["spare0"], jobs, False, "provision.yml --tags nccl")
    assert lines == [
        "maintain.yml: provision.yml --tags nccl, 3 batch(es) of at most 1 node(s), spares first",
        "batch 1 of 3: spare0",
        "  spare0 (spare): no job: taken out of service at once; checked by the launch's gate, then back in service",
        "batch 2 of 3: node0",
        "  node0: 1 job(s) llm (running): waits for them to end, then changed; checked by the launch's gate, then back "
        "in service",
        "batch 3 of 3: node1",
        "  node1: 1 job(s) llm (running): waits for them to end, then changed; checked by the launch's gate, then back "
        "in service"]
    stopping = maintenance.plan_lines([["node0"]], [], jobs, True, "provision.yml")
    assert "1 job(s) llm (running): stopped (logs kept), then changed" in stopping[2]


def test_a_node_out_for_maintenance_is_placed_like_a_quarantined_one_until_it_is_back():
    out = maintenance.taken_out(["node1"], "provision.yml --tags nccl", "maintain-1", at=NOW - 60)
    assert [(r["node"], r["kind"], r["result"], r["run"]) for r in out] == [("node1", "maintenance", "out", "maintain-1")]
    found = history.standing(out, ["node0", "node1", "spare0"], 3, 7 * DAY, NOW)
    assert found["node1"]["state"] == "in maintenance" and found["node0"]["state"] == "in service"
    placed, left, said = history.stand_in(["node0", "node1"], ["spare0"], found, "7d", "/h")
    assert placed == ["node0", "spare0"] and left == []
    assert said == ["node1 is in maintenance since %s (out of service for maintenance: provision.yml --tags nccl); "
                    "spare spare0 takes its place (node_rank 1)" % out[0]["time"]]
    with pytest.raises(history.HistoryError, match=r"^node1 is in maintenance since .*maintain.yml puts it back in "
                                                   r"service once its check passes"):
        history.stand_in(["node0", "node1"], [], found, "7d", "/h")
    back = out + maintenance.put_back(["node1"], {}, "provision.yml --tags nccl", "maintain-1", at=NOW)
    assert history.standing(back, ["node1"], 3, 7 * DAY, NOW)["node1"]["state"] == "in service"


def test_a_node_that_fails_its_check_stays_out_with_the_reason_until_released():
    records = maintenance.taken_out(["node0", "node1"], "provision.yml", "maintain-1", at=NOW - 60)
    records += maintenance.put_back(["node0", "node1"], {"node1": "node1 GPU 0: 2 uncorrectable ECC errors"},
                                    "provision.yml", "maintain-1", at=NOW - 30)
    assert [(r["node"], r["result"]) for r in records[2:]] == [("node0", "back"), ("node1", "failed its check")]
    found = history.standing(records, ["node0", "node1", "node2"], 3, 7 * DAY, NOW)
    assert [found[node]["state"] for node in ("node0", "node1", "node2")] == ["in service", "in maintenance", "in service"]
    assert found["node1"]["maintenance"]["fact"] == (
        "failed its check after maintenance (provision.yml): node1 GPU 0: 2 uncorrectable ECC errors")
    shown = maintenance.table(["node2", "node0", "node1", "node3"], records, "maintain-1").splitlines()
    assert [line.split("  ")[0] for line in shown[2:]] == ["node2", "node0", "node1", "node3"]
    assert "not reached" in shown[2] and "back in service" in shown[3] and "failed: left out of service" in shown[4]
    assert "not reached" in shown[5]
    # Another run's records are not this run's.
    assert "not reached" in maintenance.table(["node0"], records, "maintain-2").splitlines()[2]
    released = history.release(records, "node1", ["node0", "node1"], 3, 7 * DAY, NOW)
    assert history.standing(records + [released], ["node1"], 3, 7 * DAY, NOW)["node1"]["state"] == "in service"
    with pytest.raises(history.HistoryError, match="release=node0: the node is neither quarantined"):
        history.release(records, "node0", ["node0", "node1"], 3, 7 * DAY, NOW)


def test_maintenance_records_read_back_from_the_history_file(tmp_path):
    path = str(tmp_path / "history.jsonl")
    history.append(path, maintenance.taken_out(["node0"], "provision.yml", "maintain-1", at=NOW))
    assert [r["result"] for r in history.read(path)] == ["out"]
