# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""train.yml -e scheduler=slurm, on the controller: check the job against Slurm's node table, and write the batch
script that runs it. Pure functions; no Ansible imports.

- ``allocation()`` reads ``scontrol --oneliner show node`` (run on the master node) and finds each inventory node
  among Slurm's nodes (by NodeName, else NodeAddr, else NodeHostName), checking what the job asks of each (CPUs:
  one per rank; GPUs: Gres) before anything is submitted;
- ``batch_script()`` writes the sbatch script: every node of the group, one task per node, GPUs per node; when
  Slurm starts it, a first step on node_rank 0 chooses the master port (and the relaunch ports) there and then,
  and the job's step runs each node's ``slurm_task.sh`` (module_utils/_runtime/slurm_jobs.py) with ``--kill-on-bad-exit``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

_PAIR_RE = re.compile(r"(\w+)=(\S*)")
_GRES_GPU_RE = re.compile(r"(?:^|,)gpu(?::[^:,()]+)?:(\d+)")
# Node states in which Slurm starts no job (sinfo(1), NODE STATE CODES); a job asking for such a node would wait
# in the queue for ever.
_UNUSABLE = ("DOWN", "DRAIN", "FAIL", "FUTURE", "NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN", "REBOOT_ISSUED")


def node_table(text: str) -> dict[str, dict[str, Any]]:
    """Slurm's nodes by NodeName, from ``scontrol --oneliner show node``: address, hostname, CPUs, GPUs, state."""
    nodes = {}
    for line in text.splitlines():
        pairs = dict(_PAIR_RE.findall(line))
        if not pairs.get("NodeName"):
            continue
        nodes[pairs["NodeName"]] = {
            "name": pairs["NodeName"],
            "addr": pairs.get("NodeAddr", pairs["NodeName"]),
            "hostname": pairs.get("NodeHostName", pairs["NodeName"]),
            "cpus": int(pairs.get("CPUTot") or 0),
            "gres": pairs.get("Gres", "(null)"),
            "gpus": gres_gpus(pairs.get("Gres", "")),
            "state": pairs.get("State", "UNKNOWN"),
        }
    return nodes


def gres_gpus(gres: str) -> int:
    """The GPUs in a Gres value: ``gpu:8``, ``gpu:h100:8(S:0-1)``, ``gpu:a:4,gpu:b:4`` (8); ``(null)`` is 0."""
    return sum(int(count) for count in _GRES_GPU_RE.findall(gres))


def _find(table: Mapping[str, dict[str, Any]], host: str, address: str) -> dict[str, Any] | None:
    if host in table:
        return table[host]
    for key in ("addr", "hostname"):
        found = [node for node in table.values() if node[key] in (host, address)]
        if len(found) == 1:
            return found[0]
    return None


def allocation(answer: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], asked_gpus: int | None,
               asker: str) -> dict[str, Any]:
    """What to ask Slurm for, or the first problem (naming the host and the variable), from scontrol's answer
    (``rc``, ``stdout``, ``stderr``, ``msg`` of the command task run on ``asker``) and the job's nodes in rank order
    (each ``host``, ``ip``, ``ranks``, ``gpus`` found by the probe, ``jobs_dir``)."""
    result: dict[str, Any] = {"problem": "", "slurm_nodes": [], "cpus_per_node": 0, "gpus_per_node": 0}
    said = (str(answer.get("stderr") or "") + str(answer.get("stdout") or "")).strip()
    if answer.get("rc") is None or answer.get("rc") == 127 or "No such file" in str(answer.get("msg", "")):
        result["problem"] = ("scheduler=slurm: %s has no Slurm client (scontrol); provision the nodes with "
                             "-e slurm_enabled=true, or leave scheduler at ssh" % asker)
        return result
    if answer.get("rc") != 0:
        result["problem"] = ("scheduler=slurm: slurmctld does not answer (scontrol on %s said: %s)"
                             % (asker, said.splitlines()[-1] if said else "rc %s" % answer.get("rc")))
        return result
    table = node_table(str(answer.get("stdout") or ""))
    dirs = sorted({str(node["jobs_dir"]) for node in nodes})
    if len(dirs) > 1:
        result["problem"] = ("scheduler=slurm: the job folder must be the same path on every node (one batch script "
                             "runs them all), but gpufleet_jobs_dir resolves to %s; set gpufleet_jobs_dir to an "
                             "absolute path" % " and ".join(dirs))
        return result
    ranks = max(int(node["ranks"]) for node in nodes)
    gpus = asked_gpus if asked_gpus is not None else max(
        [int(node["ranks"]) for node in nodes if int(node.get("gpus") or 0) > 0] or [0])
    for node in nodes:
        found = _find(table, str(node["host"]), str(node["ip"]))
        if found is None:
            result["problem"] = ("scheduler=slurm: %s (address %s) is not one of Slurm's nodes (%s); provision the "
                                 "group with -e slurm_enabled=true, or train on the nodes Slurm knows"
                                 % (node["host"], node["ip"], ", ".join(sorted(table)) or "none"))
            return result
        states = set(found["state"].replace("+", " ").replace("*", "").split())
        if states & set(_UNUSABLE):
            result["problem"] = ("scheduler=slurm: %s is %s in Slurm (node %s), so the job would never start; "
                                 "see scontrol show node %s"
                                 % (node["host"], found["state"], found["name"], found["name"]))
            return result
        if found["cpus"] and ranks > found["cpus"]:
            result["problem"] = ("scheduler=slurm: nproc_per_node needs %d CPUs on %s (one per rank), and Slurm's "
                                 "node %s has %d" % (ranks, node["host"], found["name"], found["cpus"]))
            return result
        if gpus > found["gpus"]:
            result["problem"] = ("scheduler=slurm: gpus_per_node=%d is more than the %d GPUs Slurm's Gres gives %s "
                                 "(node %s, Gres=%s)"
                                 % (gpus, found["gpus"], node["host"], found["name"], found["gres"]))
            return result
        result["slurm_nodes"].append(found["name"])
    result.update(cpus_per_node=ranks, gpus_per_node=gpus)
    return result


def drain_orders(answer: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], reasons: Mapping[str, str]
                 ) -> list[dict[str, str]]:
    """The Slurm nodes to drain, with the reason, for the hosts in ``reasons`` (a host's fault), as NHC drains a
    node it finds bad: ``name`` (Slurm's NodeName) and ``reason`` ("gpufleet: ..."). Nodes Slurm does not know, or
    an answer that is not Slurm's node table, give none."""
    if answer.get("rc") != 0 or not reasons:
        return []
    table = node_table(str(answer.get("stdout") or ""))
    orders = []
    for node in nodes:
        reason = reasons.get(str(node["host"]))
        found = _find(table, str(node["host"]), str(node["ip"])) if reason else None
        if found is not None:
            orders.append({"name": found["name"], "host": str(node["host"]), "reason": "gpufleet: %s" % reason})
    return orders


def sbatch_head(options: Sequence[str]) -> str:
    """A batch script's first lines: the interpreter, then one ``#SBATCH`` line per option, shell-quoted."""
    return "#!/bin/bash\n" + "".join("#SBATCH %s\n" % shlex.quote(option) for option in options)


def batch_script(plan: Mapping[str, Any], job_dir: str, slurm_nodes: Sequence[str], cpus_per_node: int,
                 gpus_per_node: int, master_port: int | None = None) -> str:
    """The sbatch script of the job (``plan`` is job_plan's: job, run_id, max_restarts); ``slurm_nodes`` are
    Slurm's names of the job's nodes in rank order, so the first is node_rank 0, whose address is the master's."""
    head = slurm_nodes[0]
    restarts = int(plan.get("max_restarts") or 0)
    options = [
        "--job-name=%s" % plan["job"],
        "--nodes=%d" % len(slurm_nodes),
        "--nodelist=%s" % ",".join(slurm_nodes),
        "--ntasks-per-node=1",
        "--cpus-per-task=%d" % cpus_per_node,
    ]
    if gpus_per_node:
        options.append("--gres=gpu:%d" % gpus_per_node)
    options += [
        "--chdir=%s" % job_dir,
        "--output=%s/slurm-%%j.out" % job_dir,
        "--comment=gpufleet run %s" % plan["run_id"],
    ]
    pick = ('srun --nodes=1 --ntasks=1 --nodelist=%s "$job_dir/slurm_task.sh" ports %%d'
            % shlex.quote(head))
    if master_port is None:
        choose = "ports=$(%s) || fail \"could not choose the master port on %s\"\n" % (pick % (restarts + 1), head)
    elif restarts:
        choose = ("ports=%d,$(%s) || fail \"could not choose the relaunch ports on %s\"\n"
                  % (master_port, pick % restarts, head))
    else:
        choose = "ports=%d\n" % master_port
    return (
        sbatch_head(options)
        + "# Written by gpufleet (train.yml -e scheduler=slurm): job {job}, run {run_id}.\n"
        "# Every node's part runs from its own job folder, prepared before the job was released: its slurm_task.sh\n"
        "# starts that node's supervisor with the node's rank in the inventory's order ({order}), whatever order\n"
        "# Slurm's node table has.\n"
        "set -u\n"
        "job_dir={job_dir}\n"
        "fail() {{ echo \"[gpufleet] Slurm job $SLURM_JOB_ID: $*\" >&2; exit 1; }}\n"
        "# The master port is chosen now, on node_rank 0 ({head}), not when the job was submitted.\n"
        "{choose}"
        "export GPUFLEET_PORTS=$ports\n"
        "echo \"[gpufleet] Slurm job $SLURM_JOB_ID on $SLURM_JOB_NODELIST: master port(s) $ports on {head}\"\n"
        "# One task per node; any node's part failing ends the step on every node.\n"
        "exec srun --kill-on-bad-exit=1 --nodes={count} --ntasks-per-node=1 \"$job_dir/slurm_task.sh\"\n"
    ).format(job=plan["job"], run_id=plan["run_id"], order=", ".join(slurm_nodes), job_dir=shlex.quote(job_dir),
             head=head, choose=choose, count=len(slurm_nodes))
