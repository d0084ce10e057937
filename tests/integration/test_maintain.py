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
])
def test_a_bad_maintenance_is_refused_before_any_node_is_taken_out(local, args, needle):
    run = local.playbook("maintain.yml", "-e", "allow_local=true", "--check", "--tags", "no_such_role", *args)
    said = " ".join(run.out.split())
    assert run.rc != 0 and needle in said and "nothing was changed" in said, said[-3000:]
    assert "Take the batch out of service" not in run.out
    assert not (local.logs / "history.jsonl").exists()
