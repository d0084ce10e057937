# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter gpufleet.cluster.active_jobs: the jobs of a job_status result that still hold the node (maintain.yml)."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import maintenance

DOCUMENTATION = r"""
name: active_jobs
short_description: The jobs of a job_status result that still hold the node
version_added: 0.1.0
description:
  - O(_input) is a M(gpufleet.cluster.job_status) result (without a job name, every job of the node). The result is
    the entries whose state is active (queued, starting, running, stopping, restarting, or a spare's standby), as
    the job states' one vocabulary (C(plugins/module_utils/_runtime/job_states.py)) says.
  - maintain.yml waits for these to end, or stops them, before it changes the node.
options:
  _input:
    description: A job_status result.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The jobs that hold this node
  ansible.builtin.debug:
    msg: "{{ __job_status | gpufleet.cluster.active_jobs | map(attribute='job') | list }}"
"""

RETURN = r"""
_value:
  description: The job_status entries of the active jobs, in order.
  type: list
  elements: dict
"""


def active_jobs(status: Any) -> list[dict[str, Any]]:
    return maintenance.active_jobs(status)


class FilterModule:
    """gpufleet.cluster filters."""

    def filters(self) -> dict:
        return {"active_jobs": active_jobs}
