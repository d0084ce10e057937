"""maintain.yml's refusals on the local two-node inventory, before any node is changed: a batch of 0 or more than
the nodes, a maintain_reboot or maintain_wait_s that is not one. (The maintenance itself, which changes packages
and reboots, runs on the container cluster: tests/cluster/test_nvidia_standin.py.) Each run is also in check mode
with a tag no role has, so that a refusal that failed to come could change nothing here."""

import pytest

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("args, needle", [
    (["-e", "maintain_batch=0"], "maintain_batch=0: a batch takes 1 to 2 node(s)"),
    (["-e", "maintain_batch=3"], "maintain_batch=3: a batch takes 1 to 2 node(s)"),
    (["-e", "maintain_batch=half"], "maintain_batch=half is neither a number of nodes nor a whole percentage"),
    (["-e", "maintain_reboot=sometimes"], "maintain_reboot=sometimes must be auto, always or never"),
    (["-e", "maintain_wait_s=1h"], "maintain_wait_s=1h must be a whole number of seconds"),
])
def test_a_bad_maintenance_is_refused_before_any_node_is_taken_out(local, args, needle):
    run = local.playbook("maintain.yml", "-e", "allow_local=true", "--check", "--tags", "no_such_role", *args)
    said = " ".join(run.out.split())
    assert run.rc != 0 and needle in said and "nothing was changed" in said, said[-3000:]
    assert "Take the batch out of service" not in run.out
    assert not (local.logs / "history.jsonl").exists()


def test_check_mode_says_what_each_batch_would_do_and_records_nothing(local):
    """--check with no role (--skip-tags all): the plan, each node as it would be taken out, checked and put back;
    the fleet's history is not written and no node is rebooted (maintain_reboot=never keeps this machine safe)."""
    run = local.playbook("maintain.yml", "-e", "allow_local=true", "--check", "--skip-tags", "all",
                         "-e", "maintain_reboot=never")
    said = " ".join(run.out.split())
    assert run.rc == 0, run.out[-3000:]
    assert ("maintain.yml: provision.yml --skip-tags all, 2 batch(es) of at most 1 node(s), spares first batch 1 of 2: "
            "node0 node0: no job: taken out of service at once") in said, said[-3000:]
    assert "node1: out of service for maintenance (check mode: nothing recorded)" in said
    assert "Maintenance maintain-" in said and "(provision.yml --skip-tags all) (check mode: as it would be; nothing " \
        "recorded)" in said
    assert [line.split()[:4] for line in run.out.splitlines() if line.startswith("node1  back")] != []
    assert not (local.logs / "history.jsonl").exists()
