"""A role's sub-tags work as its README says, in both directions: --skip-tags of one sub-tag leaves the other's tasks
and the read they work from (tests/unit/plugins/filter/test_runs_under_tags.py checks every role's tasks for the
tagging; this runs one role for real, in check mode on the embedded demo inventory's two local nodes)."""

import pytest

pytestmark = pytest.mark.integration


def test_skipping_mpi_install_still_reads_the_node_and_writes_the_hostfile(local):
    # Before runs_under_tags the read and the include carried mpi_install too: --skip-tags mpi_install skipped them,
    # and the hostfile was never written (found on a lent H200 by tests/gpu/check_nvidia_stack.sh --offline).
    # The hostfile in this test's folder, so that there is always one to write, whatever this machine has.
    run = local.playbook("provision.yml", "-e", "allow_local=true", "-e", "mpi_hostfile=%s/hostfile" % local.root,
                         "--check", "--tags", "mpi", "--skip-tags", "mpi_install")
    assert run.rc == 0, run.out
    assert run.task_results("TASK [gpufleet.cluster.mpi : Read Open MPI's packages") == {"node0": "ok", "node1": "ok"}
    assert set(run.task_results("TASK [gpufleet.cluster.mpi : Write the cluster's MPI hostfile]").values()) == {"changed"}
    assert "Install Open MPI from the distribution's packages" not in run.out


def test_another_roles_tag_does_not_read_for_mpi(local):
    run = local.playbook("provision.yml", "-e", "allow_local=true", "--check", "--tags", "etc_hosts")
    assert run.rc == 0, run.out
    assert "TASK [gpufleet.cluster.etc_hosts : Read /etc/hosts" in run.out
    assert "TASK [gpufleet.cluster.mpi : Read Open MPI's packages" not in run.out
