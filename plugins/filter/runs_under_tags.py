# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter gpufleet.cluster.runs_under_tags: whether any of a role's sub-tags runs under this run's --tags and
--skip-tags, for the one task (a read, a check) that the tasks of several sub-tags need."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: runs_under_tags
short_description: Whether a task of any of a role's sub-tags runs under this run's tags
version_added: 0.1.0
description:
  - Ansible skips a task when any one of its tags is skipped. A task that the tasks of two sub-tags need (the read
    both the install and the configuration work from) would, tagged with both, be skipped by C(--skip-tags) of
    either, and the other sub-tag's tasks would then run without it or not at all (C(--skip-tags mpi_install) left
    the hostfile unwritten). Such a task is tagged C(always) and the role's own tag instead, and runs C(when) this
    filter says that a task tagged with the role and one of O(_input) would run.
  - It decides as Ansible does for each sub-tag (C(all), C(tagged), C(always) and C(never) included). A tag in
    C(--tags) that is neither one of the play's roles nor a sub-tag of one (C(<role>_...)) may be a tag of the user's
    own under which their playbook imports the role, so the task runs then (it only reads).
options:
  _input:
    description: The sub-tags whose tasks need the task, each C(<role>_<part>), all of the same role.
    type: list
    elements: str
    required: true
  run_tags:
    description: C(ansible_run_tags).
    type: list
    elements: str
    required: true
  skip_tags:
    description: C(ansible_skip_tags).
    type: list
    elements: str
    required: true
  play_roles:
    description: C(ansible_play_role_names), the roles of the play (short names or FQCNs).
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Read Open MPI's packages and the hostfile as they are on the node
  gpufleet.cluster.node_state:
    reads:
      mpi: "{{ _mpi_wants }}"
  register: __mpi_read
  when:
    - >-
      ['mpi_install', 'mpi_configure']
      | gpufleet.cluster.runs_under_tags(ansible_run_tags, ansible_skip_tags, ansible_play_role_names)
  tags: [always, mpi]
"""

RETURN = r"""
_value:
  description: True when a task tagged with the role and one of O(_input) would run.
  type: bool
"""


def _would_run(tags: set[str], run_tags: set[str], skip_tags: set[str]) -> bool:
    """Ansible's own rule (Taggable.evaluate_tags) for a task with these tags."""
    if run_tags and not ("always" in tags or ("all" in run_tags and "never" not in tags) or tags & run_tags
                         or ("tagged" in run_tags and "never" not in tags)):
        return False
    if "all" in skip_tags:
        return "always" in tags and "always" not in skip_tags
    return not (tags & skip_tags or "tagged" in skip_tags)


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def runs_under_tags(sub_tags: Any, run_tags: Any, skip_tags: Any, play_roles: Any = None) -> bool:
    subs = [str(tag) for tag in (sub_tags or [])]
    roles = {tag.rsplit("_", 1)[0] for tag in subs}
    if not subs or len(roles) != 1 or any("_" not in tag for tag in subs):
        raise AnsibleFilterError("runs_under_tags: %r is not a list of one role's sub-tags (<role>_<part>)" % (subs,))
    role = roles.pop()
    only = {str(tag) for tag in (run_tags or [])}
    skip = {str(tag) for tag in (skip_tags or [])}
    if any(_would_run({role, sub}, only, skip) for sub in subs):
        return True
    if role in skip or skip & set(subs) == set(subs) or "all" in skip or "tagged" in skip:
        return False
    known = {_short(str(name)) for name in (play_roles or [])} | {role}
    users_own = [tag for tag in only if tag not in ("all", "tagged", "untagged", "always", "never")
                 and tag not in known and not any(tag.startswith(name + "_") for name in known)]
    return bool(users_own)


class FilterModule:
    """gpufleet.cluster filters."""

    def filters(self) -> dict:
        return {"runs_under_tags": runs_under_tags}
