"""The settled_roles filter: which roles provision.yml skips on a node, from its read before any change."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.filter.settled_roles import settled_roles

ROLES = ["nvidia_peermem", "cuda_toolkit", "nccl", "etc_hosts"]


def test_every_role_is_skipped_where_none_has_anything_to_change():
    assert settled_roles(ROLES, [True, True, True, True]) == ROLES


def test_the_roles_after_the_first_with_something_to_change_read_the_node_again():
    # nccl changes the node: etc_hosts' read, made before, may be out of date, so etc_hosts runs too.
    assert settled_roles(ROLES, [True, True, False, True]) == ["nvidia_peermem", "cuda_toolkit"]
    assert settled_roles(ROLES, [False, True, True, True]) == []


@pytest.mark.parametrize("flags, message", [
    ([True, True], "4 roles but 2 settled flags"),
    ([True, "True", True, True], "the flag of cuda_toolkit is 'True', not a boolean"),
])
def test_flags_that_do_not_match_the_roles_are_refused(flags, message):
    with pytest.raises(AnsibleFilterError, match=message):
        settled_roles(ROLES, flags)
