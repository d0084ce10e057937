# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The option every job module shares: where the node keeps its jobs (see module_utils/_job/job_read.jobs_dir_spec)."""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """gpufleet.cluster.job_folder."""

    DOCUMENTATION = r"""
options:
  jobs_dir:
    description: Folder that holds one sub-folder per job on the node.
    type: path
    default: ~/.gpufleet/jobs
"""
