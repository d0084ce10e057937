# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter gpufleet.cluster.missing_packages: which of some package names a node does not have installed."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: missing_packages
short_description: The package names a node does not have installed, from a read of its packages
version_added: 0.1.0
description:
  - The names of O(_input) that are not installed according to O(installed), in their order.
  - O(installed) is what provision.yml read at the start of the run (M(gpufleet.cluster.node_state) with
    C(all_packages), registered and passed to the roles as C(_gpufleet_packages)), or C(ansible_facts.packages)
    after M(ansible.builtin.package_facts).
  - Where the packages were not read (a role run on its own, O(installed) null), every name is missing, so that
    the install task runs and decides as it always does; with O(unread=none), none is, for a role that then reads
    the node itself. A package installed later in the play is still listed as missing, which only makes its install
    task run.
  - provision.yml reads the packages once per node, and each role skips its install task when nothing is missing,
    so that a re-run costs one package manager run per node instead of one per role.
options:
  _input:
    description: Package names, as the install task names them (no versions).
    type: list
    elements: str
    required: true
  installed:
    description: The installed packages, a name mapping to its versions (package_facts' C(packages)), or null
      where they were not read.
    type: raw
    required: true
  unread:
    description: What is missing where O(installed) is null, every name (V(all)) or none (V(none)).
    type: str
    choices: [all, none]
    default: all
"""

EXAMPLES = r"""
- name: Install Open MPI when a package of it is missing (in provision.yml's play)
  ansible.builtin.package:
    name: [openmpi-bin, libopenmpi-dev]
    state: present
  when: "['openmpi-bin', 'libopenmpi-dev'] | gpufleet.cluster.missing_packages(_gpufleet_packages | default(none))
         | length > 0"

# A role that reads its packages itself skips that read where provision.yml's read found one missing.
- name: Read the toolkits' packages, unless provision.yml's read found one missing
  gpufleet.cluster.node_state:
    packages: [cuda-toolkit-13-0]
  register: __cuda_toolkit_state
  when: "['cuda-toolkit-13-0'] | gpufleet.cluster.missing_packages(_gpufleet_packages | default(none), unread='none')
         | length == 0"
"""

RETURN = r"""
_value:
  description: The names not installed (all of them, or none with O(unread=none), when the packages were not
    read).
  type: list
  elements: str
"""


def missing_packages(names: Any, installed: Any, unread: str = "all") -> list[str]:
    wanted = [names] if isinstance(names, str) else list(names or [])
    if unread not in ("all", "none"):
        raise AnsibleFilterError("missing_packages: unread=%r is neither 'all' nor 'none'" % (unread,))
    if not isinstance(installed, dict):
        return wanted if unread == "all" else []
    return [name for name in wanted if not installed.get(name)]


class FilterModule:
    """gpufleet.cluster filters."""

    def filters(self) -> dict:
        return {"missing_packages": missing_packages}
