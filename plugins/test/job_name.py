# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Test gpufleet.cluster.job_name: the one job-name rule (module_utils/jobs.JOB_NAME_RE), for playbooks."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpufleet.cluster.plugins.module_utils._job.job_read import JOB_NAME_RE

DOCUMENTATION = r"""
name: job_name
short_description: Whether a value is a valid gpufleet job name
version_added: 0.1.0
description:
  - True for 1-63 letters, digits, C(.), C(_) or C(-), starting with a letter or digit (one folder name, no C(/),
    no spaces); the same rule the modules and job_plan apply.
options:
  _input:
    description: The job name.
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Check the job name
  ansible.builtin.assert:
    that: job is gpufleet.cluster.job_name
"""

RETURN = r"""
_value:
  description: Whether the name is valid.
  type: bool
"""


def job_name(value: Any) -> bool:
    return isinstance(value, str) and JOB_NAME_RE.match(value) is not None


class TestModule:
    """gpufleet.cluster tests."""

    def tests(self) -> dict:
        return {"job_name": job_name}
