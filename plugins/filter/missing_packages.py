# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter gpufleet.cluster.missing_packages: which of some package names a node does not have installed."""

from __future__ import annotations

from typing import Any

DOCUMENTATION = r"""
name: missing_packages
short_description: The package names a node does not have installed, from its packages fact
version_added: 0.1.0
description:
  - The names of O(_input) that are not keys of O(facts)' C(packages) (what provision.yml's
    M(gpufleet.cluster.node_state) read with C(all_packages), or M(ansible.builtin.package_facts) gathered), in
    their order.
  - Where the packages were not gathered (a role run on its own), every name is missing, so that the install task
    runs and decides as it always does. A package installed later in the play is still listed as missing, which
    only makes its install task run.
  - provision.yml reads the packages once per node, and each role skips its install task when nothing is missing,
    so that a re-run costs one package manager run per node instead of one per role.
options:
  _input:
    description: Package names, as the install task names them (no versions).
    type: list
    elements: str
    required: true
  facts:
    description: The node's C(ansible_facts).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Install Open MPI when a package of it is missing
  ansible.builtin.package:
    name: [openmpi-bin, libopenmpi-dev]
    state: present
  when: "['openmpi-bin', 'libopenmpi-dev'] | gpufleet.cluster.missing_packages(ansible_facts) | length > 0"
"""

RETURN = r"""
_value:
  description: The names not installed (all of them when the packages were not gathered).
  type: list
  elements: str
"""


def missing_packages(names: Any, facts: Any) -> list[str]:
    wanted = [names] if isinstance(names, str) else list(names or [])
    installed = (facts or {}).get("packages") if isinstance(facts, dict) else None
    if not isinstance(installed, dict):
        return wanted
    return [name for name in wanted if not installed.get(name)]


class FilterModule:
    """gpufleet.cluster filters."""

    def filters(self) -> dict:
        return {"missing_packages": missing_packages}
