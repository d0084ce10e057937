# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Slurm's HealthCheckProgram: the launch's health gate, run on the node by slurmd, draining the node it refuses.

The slurm role writes this module, with the modules it imports, as one file on every node
(``/usr/local/sbin/gpufleet-health-check``, node_program.py) and names it in slurm.conf (``HealthCheckProgram``,
``HealthCheckInterval``, ``HealthCheckNodeState``); slurmd runs it as root at that interval, as sites run NHC. Each
run reads what the launch's probe reads (the GPUs through nvidia-smi, the kernel log's XIDs, the network ports that
NCCL_IB_HCA names in the node's environment files) and judges it with the gate's own rules (gpu_gate.judge,
port_health.node_findings), a GPU held by a process excepted (a job runs there). A node refused is drained with the
first fault as reason, ``gpufleet health: <GPU>: <fact>``, as NHC drains with its own; a node this program drained
is resumed once it passes; a node drained for another reason (an operator's, train.yml's ``gpufleet:``) is left as
it is. Every run appends one line to its log. It exits 0 whatever it finds: slurmd may hold a node back from
registering until the program succeeds, and the drain is how a fault is said.

The settings are the node's, written by the role beside the program (``/etc/gpufleet/health-check.json``): the
Slurm node name, gpufleet_gpus, gpufleet_xids_acknowledged_before, gpufleet_xid_check_required,
gpufleet_ib_rate_gbps, the environment files, the kernel log and sysfs to read."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import ib_counters
from ansible_collections.gpufleet.cluster.plugins.module_utils._node import nvidia_node
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import gpu_gate, port_health, slurm_batch

CONFIG = "/etc/gpufleet/health-check.json"
REASON = "gpufleet health: "
_REASON_RE = re.compile(r" Reason=(.*?) \[[^\]\s]*@[^\]\s]*\]")
# slurmd's environment may have a short PATH; nvidia-smi and scontrol live in one of these.
SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
Runner = Callable[..., subprocess.CompletedProcess]


def findings(settings: Mapping[str, Any]) -> list[gpu_gate.Finding]:
    """The gate's findings on this node, GPUs first, then its network ports in use (their error counters compared
    with this program's last reading, which this one replaces)."""
    sys_root = str(settings.get("sys_root") or "/sys")
    health = nvidia_node.gpu_health_with_pci(str(settings.get("kernel_log") or "/dev/kmsg"), sys_root)
    found = gpu_gate.judge(health, settings.get("acknowledged"), settings.get("gpus"), allow_busy=True,
                           xid_check_required=settings.get("xid_check_required", False))
    ports = ib_counters.ports(sys_root, list(settings.get("env_files") or []),
                              str(settings.get("state_dir") or "/var/lib/gpufleet/health-check"), True)
    return found + port_health.node_findings(ports, settings.get("ib_rate"))


def reason(found: list[gpu_gate.Finding]) -> str:
    """The drain reason: the first refusal, as train.yml's drain says it, after this program's own prefix."""
    first = next(finding for finding in found if finding.refuse)
    return (REASON + ("%s: %s" % (first.gpu, first.fact) if first.gpu else first.fact))[:250]


def scontrol(run: Runner, *args: str) -> subprocess.CompletedProcess:
    """scontrol's answer; one that cannot run or does not answer within 20 s reads as a failure (slurmd kills the
    program after 60 s)."""
    try:
        return run(["scontrol", *args], capture_output=True, text=True, check=False, timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        return subprocess.CompletedProcess(["scontrol", *args], 1, "", str(exc))


def slurm_state(name: str, run: Runner) -> tuple[str, str]:
    """The node's State (slurm_batch.node_table) and Reason as scontrol shows them ('' where it does not answer)."""
    done = scontrol(run, "--oneliner", "show", "node", name)
    text = done.stdout if done.returncode == 0 else ""
    state = (slurm_batch.node_table(text).get(name) or {}).get("state", "")
    # scontrol follows the reason with "[user@time]"; that is not part of what was set.
    said = _REASON_RE.search(text)
    return state, said.group(1) if said else ""


def act(name: str, found: list[gpu_gate.Finding], run: Runner) -> str:
    """Drain the node for its first refusal, resume it where this program drained it and it now passes; what was
    done, for the log."""
    state, said = slurm_state(name, run)
    drained = "DRAIN" in state
    if any(finding.refuse for finding in found):
        wanted = reason(found)
        if drained and not said.startswith(REASON):
            return "refused, left drained for its own reason (%s)" % said
        if drained and said == wanted:
            return "refused, already drained: %s" % wanted
        done = scontrol(run, "update", "NodeName=%s" % name, "State=DRAIN", "Reason=%s" % wanted)
        return ("drained: %s" % wanted) if done.returncode == 0 else ("could not drain (%s): %s" % (
            (done.stderr or done.stdout).strip(), wanted))
    if drained and said.startswith(REASON):
        done = scontrol(run, "update", "NodeName=%s" % name, "State=RESUME")
        return "passed, resumed" if done.returncode == 0 else "passed, could not resume: %s" % (
            (done.stderr or done.stdout).strip())
    return "passed"


def main(argv: list[str] | None = None, run: Runner = subprocess.run) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    path = args[args.index("--config") + 1] if "--config" in args else CONFIG
    os.environ["PATH"] = os.environ.get("PATH") or SEARCH_PATH
    if "/usr/local/bin" not in os.environ["PATH"].split(":"):
        os.environ["PATH"] += ":" + SEARCH_PATH
    try:
        with open(path, encoding="utf-8") as handle:
            settings = json.load(handle)
        name = str(settings["slurm_node"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print("gpufleet health check: cannot read %s: %s" % (path, exc), file=sys.stderr)
        return 1
    try:
        found = findings(settings)
        done = act(name, found, run)
    except Exception as exc:  # pylint: disable=broad-except
        # Said in the log and to slurmd; the node is left as it is rather than held back from registering.
        found, done = [], "not checked: %s: %s" % (type(exc).__name__, exc)
        print("gpufleet health check: %s" % done, file=sys.stderr)
    line = "%s %s: %s%s" % (time.strftime("%Y-%m-%dT%H:%M:%S%z"), name, done, "".join(
        "\n  %s %s" % ("refuse" if finding.refuse else "warn", finding.message(name)) for finding in found))
    print(line)
    log = settings.get("log")
    if log:
        try:
            with open(str(log), "a", encoding="utf-8") as handle:
                handle.write(line + "\n")
        except OSError as exc:
            print("gpufleet health check: cannot write %s: %s" % (log, exc), file=sys.stderr)
    return 0
