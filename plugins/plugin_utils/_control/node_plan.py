# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The second half of a job's plan: what every node's probe decides, once, on the controller.

plugins/plugin_utils/_control/plan.py (through the job_plan action) decides what the inventory and the inputs alone decide:
the nodes in rank order, the master, the launcher, the scheduler, the image. Then gpufleet.cluster.node_probe runs
on every node, read-only, and this module reads all the probes together and decides the rest (the job_nodes
action is its thin wrapper): each node's problem, if any, in the order the role reports them; the nodes where the
job is still running, and the refusal unless force=true; each node's number of ranks, the world size and the
slots; the rendezvous and relaunch ports (plugin_utils/_control/ports.py); and, under Slurm, what to ask of Slurm's nodes
(plugin_utils/_control/slurm_batch.py). The role asserts what this returns and hands each node its part; it computes
nothing across hosts itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import gpu_gate, port_health
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import runtimes, schedulers
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import ports, slurm_batch


@dataclass(frozen=True)
class NodeSettings:
    """What the node problems are read against: the training Python and the container engine as the user named
    them (job_python, job_container_engine), each host's gpufleet_gpus (None where unset) and
    gpufleet_xids_acknowledged_before, whether GPUs held by other processes may be shared (allow_busy_gpus), and each
    host's gpufleet_xid_check_required."""

    python: str
    container_engine: str
    gpus: Mapping[str, Any] = field(default_factory=dict)
    acknowledged: Mapping[str, Any] = field(default_factory=dict)
    allow_busy: bool = False
    xid_check_required: Mapping[str, Any] = field(default_factory=dict)
    # Each host's gpufleet_ib_rate_gbps (port_health.py), where set.
    ib_rate: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class NodeDecisions:
    """What the probes decided. ``problems`` maps a host to its first problem; ``refusal`` is the job-wide one (the
    job still running unless force=true, else under Slurm what Slurm cannot run as asked), or ''."""

    problems: dict[str, str]
    running_hosts: list[str]
    refusal: str
    nproc: dict[str, int]
    slots: list[int]
    world_size: int
    master_port: int
    restart_ports: list[int]
    check_ports: bool
    slurm: dict[str, Any] | None
    # The GPU health gate's warnings by host (refusals are problems), and the hosts with no GPU to check.
    gpu_warnings: dict[str, list[str]] = field(default_factory=dict)
    no_gpu: list[str] = field(default_factory=list)
    # Under Slurm, the nodes the GPU health gate refuses, to drain with the fault as reason (name, host, reason).
    slurm_drain: list[dict[str, str]] = field(default_factory=list)
    # The spares that stand by ([host, ip], in order; the same list on every node) and why the others do not.
    spares: list[list[str]] = field(default_factory=list)
    spare_problems: dict[str, str] = field(default_factory=dict)
    # Why the port check runs or is skipped (port_check_decision), for the log; '' where it is not for this launch.
    port_check_note: str = ""
    # The gate's findings of the nodes' hardware (node, class, gpu, fact), for the fleet's history (history.py).
    gate_faults: list[dict[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def port_check_decision(plan: Mapping[str, Any], probes: Mapping[str, Any], nodes: list[list[str]], master_port: int,
                        wanted: bool) -> tuple[bool, str]:
    """(whether the port check runs, why): the ports are checked between the nodes where wanted (a new launch of two
    nodes or more, on ports the controller chose, not the scheduler at start), unless port_check=remembered and
    every node remembers a pass on master_port for exactly these nodes (gang, then spares) within the TTL
    (ports.remembered_pass)."""
    if not wanted:
        return False, ""
    check = plan.get("port_check") or {"mode": "always"}
    if check["mode"] != "remembered":
        return True, "port_check=%s" % check["mode"]
    why = ports.remembered_pass({host: (probe or {}).get("port_memory") or {} for host, probe in probes.items()},
                                nodes, plan["master_host"], master_port, float(check["ttl_s"]),
                                tcp=plan.get("launcher") != "none")
    if why:
        return True, why
    return False, ("every node remembers a pass on port %d for these %d nodes within port_check_ttl_s=%s"
                   % (master_port, len(nodes), check["ttl_s"]))


def _probe_problem(host: str, ip: str, probe: Mapping[str, Any], plan: Mapping[str, Any],
                   settings: NodeSettings) -> str:
    """The first problem of the node's own setup (engine, Python and torch, interface, launcher), or ''."""
    node_python = runtimes.runtime_for(plan.get("container")).runs_node_python
    python = dict(probe.get("python") or {})
    # The probe reads the engine only for a job in a container image (preflight.yml).
    if (probe.get("container") or {}).get("error"):
        return "%s: container_engine=%s: %s" % (host, settings.container_engine, probe["container"]["error"])
    # In a container image the training Python is the image's: train/image.yml checks it there.
    if node_python and not python.get("found"):
        error = str(python.get("error") or "")
        return ("%s: gpufleet_python=%s was not found or does not run on the node%s"
                % (host, settings.python, " " + error if error else ""))
    # Every launcher but none starts torch.distributed.
    if node_python and not (python.get("torch") or plan.get("launcher") == "none"):
        return ("%s: gpufleet_python=%s (%s) cannot import torch; install it there or point gpufleet_python at a "
                "Python that has it" % (host, settings.python, python.get("path")))
    env_names = list((plan.get("env") or {}).keys()) + list(probe.get("env_file_names") or [])
    hostname_address = str(probe.get("hostname_address") or "")
    # Gloo and NCCL must not advertise the loopback address the hostname resolves to.
    if not (probe.get("iface") or not hostname_address.startswith("127.") or ip.startswith("127.")
            or "GLOO_SOCKET_IFNAME" in env_names):
        return ("%s: its hostname resolves to %s and no interface of the node holds its cluster address %s, so Gloo "
                "and NCCL would advertise a loopback address; run playbooks/provision.yml --tags etc_hosts,nccl_env, "
                "or set GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME in gpufleet_env" % (host, hostname_address, ip))
    if node_python and probe.get("launcher_missing"):
        return "%s: launcher=%s %s" % (host, plan.get("launcher"), probe["launcher_missing"])
    return ""


def node_problem(host: str, ip: str, probe: Mapping[str, Any], plan: Mapping[str, Any],
                 settings: NodeSettings, gpu_refusal: str = "") -> str:
    """The node's first problem, in the order the role reports them (its own setup, then its GPUs' health, then
    its GPU count and the master port), or ''."""
    problem = _probe_problem(host, ip, probe, plan, settings) or gpu_refusal
    if problem:
        return problem
    asked = plan.get("nproc_per_node")
    gpu_count = int(probe.get("gpu_count") or 0)
    if asked is not None and gpu_count and int(asked) > gpu_count:
        return ("%s: nproc_per_node=%s is more than the %d GPUs nvidia-smi lists on the node"
                % (host, asked, gpu_count))
    if probe.get("port_in_use") and not (probe.get("job") or {}).get("running"):
        return ("%s: master_port=%s is already in use on the master node; omit master_port to have a free port "
                "chosen, or name another" % (host, plan.get("master_port")))
    return ""


# The inventory's settings of the gate, per host: the NodeSettings field, the host variable, its default.
GATE_VARIABLES = (("gpus", "gpufleet_gpus", None), ("acknowledged", gpu_gate.ACK_VARIABLE, None),
                  ("xid_check_required", gpu_gate.XID_CHECK_VARIABLE, False),
                  ("ib_rate", port_health.RATE_VARIABLE, None))


def gate_settings(hosts: Iterable[str], lookup: Callable[[str, str, Any], Any], **fixed: Any) -> NodeSettings:
    """NodeSettings with each host's settings of the gate as ``lookup(host, variable, default)`` gives them (an
    action's templated host variables), and the rest as ``fixed`` (python, container_engine, allow_busy)."""
    hosts = list(hosts)
    return NodeSettings(**fixed, **{key: {host: lookup(host, name, default) for host in hosts}
                                    for key, name, default in GATE_VARIABLES})


def with_diag(probe: Mapping[str, Any], diag: Any) -> dict[str, Any]:
    """The probe with DCGM's diagnostic (health_diag, health.yml) in its GPUs' health, judged with the rest of it."""
    probe = dict(probe)
    if isinstance(diag, Mapping) and not diag.get("skipped") and probe.get("gpu_health"):
        probe["gpu_health"] = dict(probe["gpu_health"], dcgm=dict(diag))
    return probe


def gate_findings(host: str, probe: Mapping[str, Any], settings: NodeSettings, nproc: int | None
                  ) -> dict[str, list[gpu_gate.Finding]]:
    """The health gate's findings on the node, by class: its GPUs' ("gpu": plugin_utils/_control/gpu_gate.py), judged
    against its settings and the ranks it runs (the GPUs its job takes; None: all), then its network ports'
    ("network": port_health.py). A bad acknowledgement time or gpufleet_ib_rate_gbps is refused as the node's
    finding. The one judge of a launch and of health.yml (health_check.py)."""
    gpu = gpu_gate.judge(probe.get("gpu_health") or {}, settings.acknowledged.get(host), settings.gpus.get(host),
                         used=nproc, allow_busy=settings.allow_busy,
                         job_running=bool((probe.get("job") or {}).get("running")),
                         xid_check_required=settings.xid_check_required.get(host, False))
    return {"gpu": gpu, "network": port_health.node_findings(probe.get("ib_ports") or {}, settings.ib_rate.get(host))}


def gpu_findings(host: str, probe: Mapping[str, Any], settings: NodeSettings, nproc: int | None
                 ) -> list[gpu_gate.Finding]:
    """gate_findings(), the GPUs' first, then the network ports'."""
    found = gate_findings(host, probe, settings, nproc)
    return found["gpu"] + found["network"]


@dataclass
class _GpuHealth:
    """What the GPU health gate found on the nodes so far: the warnings by host, the hosts without a GPU to check,
    each refused host's first fault (Slurm's drain reason), and the findings of the nodes' hardware that the fleet's
    history counts (node, class, GPU or port, fact)."""

    warnings: dict[str, list[str]] = field(default_factory=dict)
    no_gpu: list[str] = field(default_factory=list)
    faults: dict[str, str] = field(default_factory=dict)
    hardware: list[dict[str, str]] = field(default_factory=list)

    def judge(self, host: str, probe: Mapping[str, Any], settings: NodeSettings, nproc: int | None) -> str:
        """The node's GPU refusals, all of them, one a line (a person mends them in one visit), or ''."""
        by_class = gate_findings(host, probe, settings, nproc)
        self.hardware += [{"node": host, "class": klass, "gpu": finding.gpu, "fact": finding.fact}
                          for klass, found in by_class.items() for finding in found if finding.counts]
        found = by_class["gpu"] + by_class["network"]
        refusals = [finding for finding in found if finding.refuse]
        if refusals:
            self.faults[host] = ("%s: %s" % (refusals[0].gpu, refusals[0].fact)).lstrip(": ")
        warned = [finding.message(host) for finding in found if not finding.refuse]
        if warned:
            self.warnings[host] = warned
        if not gpu_gate.has_gpus(probe.get("gpu_health") or {}):
            self.no_gpu.append(host)
        return "\n".join(finding.message(host) for finding in refusals)


def node_nproc(host: str, probe: Mapping[str, Any], plan: Mapping[str, Any], gpus: Any) -> int:
    """The node's number of ranks: nproc_per_node, else its gpufleet_gpus, else the GPUs its probe found (one
    at least, for a node without GPUs). A gpufleet_gpus that is not a whole number is refused naming the host."""
    if plan.get("nproc_per_node"):
        return int(plan["nproc_per_node"])
    if gpus not in (None, ""):
        try:
            settled = int(gpus)
        except (TypeError, ValueError):
            raise ValueError("%s: gpufleet_gpus=%r is not a whole number of GPUs" % (host, gpus)) from None
        if settled > 0:
            return settled
    return max(int(probe.get("gpu_count") or 0), 1)


def spare_problem(node: Mapping[str, Any], probe: Mapping[str, Any] | None, plan: Mapping[str, Any],
                  settings: NodeSettings, force: bool, health: "_GpuHealth", slots: list[int]) -> tuple[str, int]:
    """A spare's first problem, read as a node's (its setup, its GPUs' health), or that it still stands by for an
    earlier run of the job, or has fewer GPUs than a node's ranks; '' when it can take any node's place. With the
    ranks it can run."""
    host = node["host"]
    if probe is None:
        return "%s: its probe failed" % host, 0
    try:
        nproc = node_nproc(host, probe, plan, settings.gpus.get(host))
    except ValueError as exc:
        return str(exc), 0
    problem = node_problem(host, node["ip"], probe, plan, settings, health.judge(host, probe, settings, nproc))
    if not problem and (probe.get("job") or {}).get("running") and not force:
        problem = "%s: job %s is still running there (force=true stops it first)" % (host, plan["job"])
    if not problem and slots and nproc < max(slots):
        problem = "%s: runs %d ranks, fewer than the %d of a node it would replace" % (host, nproc, max(slots))
    return problem, nproc


def running_refusal(job: str, running_hosts: list[str]) -> str:
    """The refusal to launch a job name still running (force=true stops it first)."""
    return ("job %s is still running on %s; stop it with playbooks/stop.yml -e job=%s, or launch again with "
            "-e force=true, which stops only that job first" % (job, ", ".join(running_hosts), job))


def decide(plan: Mapping[str, Any], probes: Mapping[str, Mapping[str, Any]], settings: NodeSettings, force: bool,
           slurm_answer: Mapping[str, Any] | None = None) -> NodeDecisions:
    """Everything the probes decide, from the plan (job_plan's) and every node's probe by host. A host without a
    probe (it failed before) is left out of the job-wide sets; ``slurm_answer`` is scontrol's answer on the master
    under scheduler=slurm (the command task's result), else None."""
    problems: dict[str, str] = {}
    nproc: dict[str, int] = {}
    health = _GpuHealth()
    for node in plan["nodes"]:
        host = node["host"]
        probe = probes.get(host)
        if probe is None:
            continue
        problem = ""
        try:
            nproc[host] = node_nproc(host, probe, plan, settings.gpus.get(host))
        except ValueError as exc:
            problem = str(exc)
        refused = health.judge(host, probe, settings, nproc.get(host))
        problem = node_problem(host, node["ip"], probe, plan, settings, refused) or problem
        if problem:
            problems[host] = problem
    running = [host for host in plan["hosts"] if (probes.get(host) or {}).get("job", {}).get("running")]
    refusal = running_refusal(plan["job"], running) if running and not force else ""
    slots = [nproc.get(host, 0) for host in plan["hosts"]]
    spares, spare_problems = [], {}
    for node in plan.get("spares") or []:
        problem, nproc[node["host"]] = spare_problem(node, probes.get(node["host"]), plan, settings, force, health, slots)
        if problem:
            spare_problems[node["host"]] = problem
        else:
            spares.append([node["host"], node["ip"]])
    scheduler = schedulers.scheduler_of(plan.get("scheduler"))
    at_start = scheduler.picks_ports_at_start
    if at_start:
        # Node 0 picks the ports when the scheduler starts the job (0: not given; slurm_batch.py).
        master_port, restart_ports = int(plan.get("master_port") or 0), []
    else:
        chosen = ports.job_ports(plan.get("master_port"), probes.get(plan["master_host"]) or {}, force)
        master_port, restart_ports = int(chosen["master_port"] or 0), [int(port) for port in chosen["restart_ports"]]
    allocation = None
    if scheduler.allocates_nodes and slurm_answer is not None and not problems and len(nproc) == len(plan["hosts"]):
        allocation = slurm_batch.allocation(
            slurm_answer, [{"host": node["host"], "ip": node["ip"], "ranks": nproc[node["host"]],
                            "gpus": probes[node["host"]].get("gpu_count"), "jobs_dir": probes[node["host"]].get("jobs_dir")}
                           for node in plan["nodes"]],
            plan.get("gpus_per_node"), plan["master_host"])
    if scheduler.allocates_nodes and not refusal and not problems:
        # What Slurm cannot run as asked is refused job-wide too, after a job still running.
        refusal = allocation["problem"] if allocation else "scheduler=slurm: Slurm's node table was not read"
    check_ports, port_note = port_check_decision(
        plan, probes, [[node["host"], node["ip"]] for node in plan["nodes"]] + spares, master_port,
        not at_start and int(plan.get("nnodes") or 0) > 1 and not running)
    return NodeDecisions(
        problems=problems, running_hosts=running, refusal=refusal, nproc=nproc, slots=slots, world_size=sum(slots),
        master_port=master_port, restart_ports=restart_ports, check_ports=check_ports, port_check_note=port_note,
        slurm=allocation, gpu_warnings=health.warnings, no_gpu=health.no_gpu, spares=spares,
        spare_problems=spare_problems, gate_faults=health.hardware,
        slurm_drain=slurm_batch.drain_orders(slurm_answer, plan["nodes"], health.faults)
        if scheduler.allocates_nodes and slurm_answer is not None else [])
