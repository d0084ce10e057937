# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter gpufleet.cluster.settled_roles: the roles provision.yml skips on a node, from its one read of the node."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: settled_roles
short_description: The roles a node needs nothing from, up to the first that does
version_added: 0.1.0
description:
  - O(_input) is the roles that provision.yml's read of the node covers, in the play's order, and O(settled) says
    for each whether that read found nothing of it to change. The result is the roles before the first one that
    has something to change, or that is not settled for another reason (O(settled) false).
  - A role after that one is not in the result even when the read found nothing of it to change, because the read
    was made before the run changed anything, and a role that changes the node may change what a later role reads
    (a package installed as a dependency, a file). A later role reads the node again itself.
  - provision.yml skips each role of the result on the node (one skipped task per role), so that a re-run on a
    node that needs nothing costs one read of the node for all of them.
options:
  _input:
    description: The role names, in the play's order.
    type: list
    elements: str
    required: true
  settled:
    description: For each role of O(_input), in the same order, whether the read found nothing of it to change.
    type: list
    elements: bool
    required: true
"""

EXAMPLES = r"""
- name: The roles provision.yml skips on this node
  ansible.builtin.debug:
    msg: "{{ ['cuda_toolkit', 'nccl', 'etc_hosts'] | gpufleet.cluster.settled_roles([true, false, true]) }}"
  # cuda_toolkit only: nccl has something to change, and etc_hosts comes after it.
"""

RETURN = r"""
_value:
  description: The roles of O(_input) before the first one not settled, in their order.
  type: list
  elements: str
"""


def settled_roles(roles: Any, settled: Any) -> list[str]:
    names = list(roles or [])
    flags = list(settled or [])
    if len(names) != len(flags):
        raise AnsibleFilterError("settled_roles: %d roles but %d settled flags" % (len(names), len(flags)))
    result = []
    for name, flag in zip(names, flags):
        if not isinstance(flag, bool):
            raise AnsibleFilterError("settled_roles: the flag of %s is %r, not a boolean" % (name, flag))
        if not flag:
            break
        result.append(str(name))
    return result


class FilterModule:
    """gpufleet.cluster filters."""

    def filters(self) -> dict:
        return {"settled_roles": settled_roles}
