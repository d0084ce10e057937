# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Nodes a spare replaced for a hardware fault, remembered on the controller so that the next job does not use them
silently: the report writes ``<logs_dir>/bad-nodes/<host>`` (one line: which job, when, why), and train.yml's plan
warns about every host of the job that has such a file, saying how to clear it. Pure functions and files."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

BAD_NODES_DIR = "bad-nodes"


def remember(logs_root: str, job: str, replacements: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """A file per node a spare replaced for a hardware fault (spares.py's records with hardware_fault); the paths."""
    written = []
    for host, record in sorted(replacements.items()):
        if not record.get("hardware_fault"):
            continue
        folder = os.path.join(logs_root, BAD_NODES_DIR)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, os.path.basename(host))
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(record.get("at") or time.time())))
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("job %s, %s: replaced by %s from attempt %s after: %s\n"
                         % (job, when, record.get("by"), record.get("attempt"), record.get("why")))
        written.append(path)
    return written


def warnings(logs_root: str, hosts: Iterable[str]) -> list[str]:
    """What to say of each host of a job that a spare replaced for a hardware fault in an earlier job."""
    said = []
    for host in hosts:
        path = os.path.join(logs_root, BAD_NODES_DIR, os.path.basename(str(host)))
        try:
            with open(path, encoding="utf-8") as handle:
                what = handle.read().strip()
        except OSError:
            continue
        said.append("%s was replaced for a hardware fault (%s) and is in this job again: check it (ansible-playbook "
                    "gpufleet.cluster.verify --limit %s) and, once it is mended, clear this warning with rm %s"
                    % (host, what, host, path))
    return said
