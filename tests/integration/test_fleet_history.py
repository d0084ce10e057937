"""The fleet's history and quarantine on the local two-node inventory: train.yml refuses a quarantined node before
any node is touched, naming it and its faults; fleet.yml shows each node's standing and returns a quarantined node
to service (recorded); the next train.yml trains. Bad input: a release of a node not quarantined or not in the
inventory, a history line that is not a record, a window that does not parse.

There is no GPU here, so the three hardware faults are written into the history by the same writer job_report uses
(plugin_utils/_control/history.py append(), its records as job_faults() makes them from a job's results); the
cluster tests show the report writing them after a real XID (test_gpu_gate_cluster.py) and a lost node
(test_supervision.py)."""

import json
import sys
import time

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO) + "/collections")
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import history  # noqa: E402

pytestmark = pytest.mark.integration
XID = "node1 GPU 0 (0000:18:00.0): XID 79, GPU has fallen off the bus"


SPARE_INVENTORY = """---
all:
  vars:
    ansible_connection: local
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
    gpufleet_python: "{{ ansible_playbook_python }}"
    gpufleet_env: {GLOO_SOCKET_IFNAME: lo, OMP_NUM_THREADS: "1"}
gpu_nodes:
  hosts:
    node0: {gpufleet_cluster_address: 127.0.0.1}
    node1: {gpufleet_cluster_address: 127.0.0.2}
gpu_spares:
  hosts:
    node2: {gpufleet_cluster_address: 127.0.0.3}
"""


def _three_faults(local, node="node1"):
    path = local.logs / "history.jsonl"
    now = time.time()
    results = [{"host": node, "state": "failed", "gpu_fault": XID}]
    for days_ago, job in ((3, "llm-a"), (2, "llm-b"), (1, "llm-c")):
        history.append(str(path), history.job_faults(job, results, {}, at=now - days_ago * 86400))
    return path


def test_three_hardware_faults_quarantine_a_node_until_it_is_released(local, tmp_path):
    """Without a spare, train.yml refuses node1 before touching a node; fleet.yml and status.yml show it; a bad
    release is refused; with a spare in the inventory, the spare takes node1's place; released, node1 trains."""
    path = _three_faults(local)
    refused = local.playbook("train.yml", "-e", "script=examples/train.py")
    assert refused.rc != 0
    said = " ".join(refused.out.split())
    assert "node1 is quarantined: 3 hardware faults within 7d (" in said, said[-3000:]
    assert "(job llm-a): %s" % XID in said and "-e release=node1" in said and str(path) in said
    assert not local.nodes.exists() or not any(local.nodes.rglob("*")), "a node was touched"

    shown = local.playbook("fleet.yml")
    assert shown.rc == 0, shown.out[-3000:]
    table = shown.out.split("3 quarantine a node", 1)[1].splitlines()[1:5]
    rows = {line.split()[0]: line.split() for line in table if line.startswith(("node0 ", "node1 "))}
    assert rows["node0"][1:4] == ["in", "service", "0"] and rows["node1"][1:3] == ["quarantined", "3"], shown.out

    status = local.playbook("status.yml")  # without a job: the jobs, then the fleet's standing
    assert status.rc == 0 and any(line.split()[:3] == ["node1", "quarantined", "3"]
                                  for line in status.out.splitlines()), status.out[-3000:]

    for node, needle in (("node0", "release=node0: the node is neither quarantined (0 hardware fault(s) within the window"),
                         ("node9", "release=node9: no such node in the inventory")):
        bad = local.playbook("fleet.yml", "-e", "release=%s" % node)
        assert bad.rc != 0 and needle in " ".join(bad.out.split()), bad.out[-3000:]
    assert len(path.read_text().splitlines()) == 3  # nothing was recorded

    # With a spare in the inventory, the job trains on node0 and node2 (node2 as node_rank 1), node1 untouched.
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(SPARE_INVENTORY)
    run = local.playbook("train.yml", "-e", "script=examples/train.py", "-e", "job=llm", inventory=inventory)
    said = " ".join(run.out.split())
    assert run.rc == 0, run.out[-3000:]
    assert "node1 is quarantined (3 hardware faults within 7d: " in said and \
        "spare node2 takes its place (node_rank 1)" in said, said[-3000:]
    assert sorted(path.name for path in (local.logs / "llm").glob("node*.log")) == ["node0.log", "node2.log"]
    assert not local.job_dir("node1", "llm").exists()

    released = local.playbook("fleet.yml", "-e", "release=node1", inventory=inventory)
    assert released.rc == 0, released.out[-3000:]
    last = json.loads(path.read_text().splitlines()[-1])
    assert last["node"] == "node1" and last["kind"] == "release"
    assert any(line.split()[:3] == ["node1", "in", "service"] and "release: returned to service" in line
               for line in released.out.splitlines()), released.out

    # Released, node1 trains again and node2 stands by.
    again = local.playbook("train.yml", "-e", "script=examples/train.py", "-e", "job=llm2", inventory=inventory)
    assert again.rc == 0 and "is quarantined" not in again.out, again.out[-3000:]
    assert sorted(path.name for path in (local.logs / "llm2").glob("node*.log")) == ["node0.log", "node1.log"]


def test_a_fault_short_of_quarantine_is_warned_of_and_a_smaller_threshold_quarantines(local):
    path = local.logs / "history.jsonl"
    history.append(str(path), history.job_faults("llm", [{"host": "node0", "gpu_fault": XID}], {}))
    said = " ".join(local.playbook("train.yml", "-e", "script=examples/train.py", "--check").out.split())
    assert "node0 has had 1 hardware fault(s) within 7d (3 quarantine it): " in said, said[-3000:]
    strict = local.playbook("train.yml", "-e", "script=examples/train.py", "-e", "gpufleet_quarantine_after=1")
    assert strict.rc != 0 and "node0 is quarantined: 1 hardware faults within 7d" in " ".join(strict.out.split())


@pytest.mark.parametrize("args, content, needle", [
    ([], '{"node": "node1", "kind": "fault", "at": 1}\nnot json\n',
     "history.jsonl, line 2, is not JSON"),
    ([], '["node1"]\n', "history.jsonl, line 1, is not a record with a node and a kind"),
    (["-e", '{"gpufleet_quarantine_window": "7 days"}'], "", "gpufleet_quarantine_window='7 days' does not parse"),
    (["-e", "gpufleet_quarantine_after=0"], "", "gpufleet_quarantine_after='0' is not a whole number of 1 or more"),
])
def test_bad_history_or_settings_are_refused_by_train_and_fleet_before_anything_changes(local, args, content, needle):
    local.logs.mkdir(parents=True, exist_ok=True)
    path = local.logs / "history.jsonl"
    path.write_text(content)
    for playbook in ("train.yml", "fleet.yml"):
        extra = ["-e", "script=examples/train.py"] if playbook == "train.yml" else ["-e", "release=node1"]
        run = local.playbook(playbook, *extra, *args)
        assert run.rc != 0 and needle in " ".join(run.out.split()), (playbook, run.out[-3000:])
    assert path.read_text() == content  # never rewritten
    assert not local.nodes.exists() or not any(local.nodes.rglob("*")), "a node was touched"
