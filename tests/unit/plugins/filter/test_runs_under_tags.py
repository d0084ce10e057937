"""The runs_under_tags filter: a task that the tasks of several sub-tags need runs when any of them would, so that
skipping one sub-tag (--skip-tags mpi_install) does not take the read the other sub-tag's tasks work from.

The second half checks every role's tasks: a task tagged with two sub-tags of its role is skipped by --skip-tags of
either, which is the defect the filter exists for; such a task must be tagged always and guarded by the filter."""

import glob
import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.filter.runs_under_tags import runs_under_tags

HERE = os.path.dirname(os.path.abspath(__file__))
ROLES = os.path.join(HERE, "..", "..", "..", "..", "roles")
SUBS = ["mpi_install", "mpi_configure"]
PLAY = ["gpufleet.cluster.nvidia_driver", "gpufleet.cluster.nccl", "gpufleet.cluster.mpi"]


@pytest.mark.parametrize("run_tags, skip_tags, runs", [
    (["all"], [], True),                                  # no --tags, no --skip-tags
    (["all"], ["mpi_install"], True),                     # the hostfile is still written: the defect
    (["all"], ["mpi_configure"], True),                   # Open MPI is still installed
    (["all"], ["mpi_install", "mpi_configure"], False),   # nothing of the role's runs
    (["all"], ["mpi"], False),
    (["mpi"], ["mpi_install"], True),
    (["mpi_configure"], [], True),
    (["mpi_install"], [], True),
    (["nccl"], [], False),                                # another role of the play: the read is not made
    (["nvidia_driver_install"], [], False),               # another role's sub-tag
    (["tagged"], [], True),
    (["all"], ["all"], False),
    (["all"], ["tagged"], False),
    (["hpc"], [], True),                                  # the user's own tag, under which their play may import it
    (["hpc", "nccl"], [], True),
])
def test_the_shared_task_runs_when_a_task_of_either_sub_tag_would(run_tags, skip_tags, runs):
    assert runs_under_tags(SUBS, run_tags, skip_tags, PLAY) is runs


def test_without_the_plays_roles_every_tag_but_the_roles_own_may_be_the_users():
    assert runs_under_tags(SUBS, ["nccl"], [], []) is True
    assert runs_under_tags(SUBS, ["mpi_other"], [], []) is False  # the role's own vocabulary


@pytest.mark.parametrize("subs", [[], ["mpi"], ["mpi_install", "nccl_install"], "mpi_install"])
def test_not_one_roles_sub_tags_is_refused(subs):
    with pytest.raises(AnsibleFilterError, match="not a list of one role's sub-tags"):
        runs_under_tags(subs, ["all"], [], PLAY)


def _tasks(tasks):
    for task in tasks or []:
        if isinstance(task, dict):
            yield task
            for key in ("block", "rescue", "always"):
                yield from _tasks(task.get(key))


def _listed(value):
    return [value] if isinstance(value, str) else list(value or [])


def test_no_task_of_a_role_carries_two_of_its_sub_tags():
    """A task tagged [mpi_install, mpi_configure] (or an include applying both) is skipped by --skip-tags of either;
    the tasks the filter guards carry always and the role's tag, and name the sub-tags in their condition."""
    found, guarded = [], 0
    for path in sorted(glob.glob(os.path.join(ROLES, "*", "tasks", "*.yml"))):
        role = path.split(os.sep)[-3]
        for task in _tasks(yaml.safe_load(open(path))):
            for tags in (_listed(task.get("tags")),
                         _listed(((task.get("ansible.builtin.include_tasks") or {}) if isinstance(
                             task.get("ansible.builtin.include_tasks"), dict) else {}).get("apply", {}).get("tags"))):
                if len([tag for tag in tags if tag.startswith(role + "_")]) >= 2:
                    found.append("%s: %s %s" % (os.path.relpath(path, ROLES), task.get("name"), tags))
            conditions = " ".join(str(c) for c in _listed(task.get("when")))
            if "runs_under_tags" in conditions:
                guarded += 1
                assert "always" in _listed(task.get("tags")) and role in _listed(task.get("tags")), (path, task)
    assert not found, "\n".join(found)
    assert guarded >= 14, guarded
