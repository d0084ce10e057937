# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The controller's plain-text tables (verify.yml's, the fleet's standing, health.yml's): one shape for all."""

from __future__ import annotations

from collections.abc import Sequence


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns two spaces apart, each as wide as its widest cell, a rule of dashes under the header."""
    every = [list(header)] + [list(row) for row in rows]
    widths = [max(len(row[i]) for row in every) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in every]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
