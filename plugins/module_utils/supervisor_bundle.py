# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The supervisor as it is shipped to the nodes: one file, standard library only, Python 3.8+.

Its parts are read and tested as modules of their own (job_states, job_processes, free_ports, slurm_jobs,
schedulers, containers, runtimes, gang, gang_rules, gpu_health, gpu_watch, rank_output, rank_stacks, spares,
attempt, supervisor); the launch writes
them into the job folder as one file, in that order, with the imports between them removed, so that the node runs it with its own python3 and
nothing of the collection installed (``python3 supervisor.py JOB_DIR``). No two parts define one top-level name
(a unit test checks): in the one file, the later would replace the earlier.
One file rather than a zipapp: a person reading a job folder finds the code that runs it in plain text.
"""

from __future__ import annotations

import ast
import inspect

from ansible_collections.gpufleet.cluster.plugins.module_utils import (
    attempt,
    containers,
    free_ports,
    gang,
    gang_rules,
    gpu_health,
    gpu_watch,
    job_events,
    job_processes,
    job_states,
    rank_output,
    rank_stacks,
    runtimes,
    schedulers,
    slurm_jobs,
    spares,
    supervisor,
)

PARTS = (job_states, job_events, job_processes, free_ports, slurm_jobs, schedulers, containers, runtimes, gang, gang_rules,
         gpu_health, gpu_watch, rank_output, rank_stacks, spares, attempt, supervisor)
_OWN_PACKAGE = "ansible_collections."


def shipped_source() -> str:
    """The one file: each part's source, without the imports of the collection's own modules, and without a
    `from __future__` line after the first part (Python allows it only at the top)."""
    chunks = []
    for index, module in enumerate(PARTS):
        source = inspect.getsource(module)
        dropped: set[int] = set()
        for node in ast.parse(source).body:
            if isinstance(node, ast.ImportFrom) and (
                    (node.module or "").startswith(_OWN_PACKAGE) or (index and node.module == "__future__")):
                dropped.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        kept = [line for number, line in enumerate(source.splitlines(), 1) if number not in dropped]
        chunks.append("# ---- gpufleet %s ----\n%s" % (module.__name__.rsplit(".", 1)[-1], "\n".join(kept)))
    return "\n\n\n".join(chunks) + "\n"
