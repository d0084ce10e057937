# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Attribute blocks shared by gpufleet's modules."""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """gpufleet.cluster.attributes.read_only and gpufleet.cluster.attributes.controller."""

    # A module that only reads the node.
    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: Reads only.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

    # An action that runs entirely on the controller (documented as a module).
    CONTROLLER = r"""
options: {}
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
  action:
    support: full
    details: Runs entirely on the controller.
  async:
    support: none
  bypass_host_loop:
    support: none
"""
