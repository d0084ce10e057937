# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Reading sysfs: a missing file or folder is an absent value, never an error."""

from __future__ import annotations

import os


def value(path: str) -> str:
    """The stripped content of a sysfs attribute, or '' when it cannot be read."""
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def entries(path: str) -> list[str]:
    """The sorted names in a sysfs folder, or [] when it does not exist."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []
