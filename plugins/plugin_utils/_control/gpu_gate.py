# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPU health gate: what a node's health (gpu_health.read) means for a launch, in one place. Each finding
names the GPU (index and bus id), the fact and the fix; a refusal stops the launch before anything is changed, a
warning is shown and the launch goes on. Read by the launch's plan (plugin_utils/_control/node_plan.py) and verify.yml."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import gpu_health

RESET = "reset the GPU (nvidia-smi -r -i %d, with nothing running on it) or reboot the node"
ACK_VARIABLE = "gpufleet_xids_acknowledged_before"
# A node whose kernel log cannot be read is refused instead of warned of where this host variable is true.
XID_CHECK_VARIABLE = "gpufleet_xid_check_required"
KERNEL_LOG_VARIABLE = "gpufleet_kernel_log"


@dataclass(frozen=True)
class Finding:
    """One fact of a node's GPUs that refuses a launch (``refuse``) or warns; ``gpu`` is '' for the node."""

    refuse: bool
    gpu: str
    fact: str
    fix: str
    # Whether the fleet's history counts it as a fault of the node's hardware (plugin_utils/_control/history.py):
    # None reads as ``refuse``; False for a refusal of a setting or of a use (a GPU held by another process), True
    # for a warning that says the hardware is failing (a port's degraded link or rising error counters).
    hardware: bool | None = None

    @property
    def counts(self) -> bool:
        return self.refuse if self.hardware is None else self.hardware

    def message(self, host: str) -> str:
        return "%s%s: %s; %s" % (host, " " + self.gpu if self.gpu else "", self.fact, self.fix)


@dataclass(frozen=True)
class GateSettings:
    """What a node's health is judged against: the GPUs it should have (gpufleet_gpus; None where unset), how many
    of its GPUs the job takes (its ranks, GPUs 0 to used-1; None: all), whether a GPU held by another process may be
    shared (allow_busy_gpus), the time before which its XIDs are acknowledged (seconds since the epoch; None: none
    is), whether this job is running there now (force=true stops it first: its own processes hold the GPUs), and
    whether a kernel log that cannot be read refuses (gpufleet_xid_check_required) rather than warns."""

    expected: int | None = None
    used: int | None = None
    allow_busy: bool = False
    acknowledged_before: float | None = None
    job_running: bool = False
    xid_check_required: bool = False


def acknowledgement_time(text: Any) -> float | None:
    """The time an acknowledgement names ('2026-11-25T10:02:12+00:00'; without a zone, UTC), as seconds since the
    epoch; None for none. ValueError for anything else."""
    if text in (None, ""):
        return None
    stamp = datetime.datetime.fromisoformat(str(text).strip().replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=datetime.timezone.utc)
    return stamp.timestamp()


def _gpus(count: int) -> str:
    return "%d GPU%s" % (count, "" if count == 1 else "s")


def _utc(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).replace(microsecond=0)


def gpu_label(gpu: Mapping[str, Any]) -> str:
    return "GPU %d (%s)" % (gpu["index"], gpu_health.short_bus(str(gpu.get("bus_id") or "")))


def _by_bus(health: Mapping[str, Any]) -> dict[tuple[int, int, int], Mapping[str, Any]]:
    return {gpu_health.bus_key(str(gpu.get("bus_id") or "")): gpu for gpu in health.get("gpus") or []}


def _count(health: Mapping[str, Any], settings: GateSettings) -> list[Finding]:
    found = []
    for lost in health.get("lost") or []:
        found.append(Finding(True, "GPU at %s" % gpu_health.short_bus(lost["bus_id"]), "nvidia-smi cannot reach it (%s)"
                             % lost["error"], "reboot the node, or leave it out of the inventory until it is repaired"))
    answering = len(health.get("gpus") or [])
    pci = health.get("pci_gpus")
    if pci and answering + len(found) < pci:
        found.append(Finding(True, "", "nvidia-smi lists %s, the node has %d on its PCI bus" % (_gpus(answering), pci),
                             "see the kernel log (dmesg | grep NVRM) for the GPU the driver did not take, and reboot "
                             "the node or leave it out of the inventory"))
    elif settings.expected and answering < settings.expected:
        found.append(Finding(True, "", "nvidia-smi lists %s, gpufleet_gpus says %d" % (_gpus(answering), settings.expected),
                             "reboot the node if a GPU was lost, or correct gpufleet_gpus"))
    return found


def recovery_fix(action: str, index: int | None) -> str:
    """What to do for the driver's recovery action (XID 154, nvidia-smi's gpu_recovery_action): NVIDIA's GPU memory
    error management guide, "Recovery action flag" (None, Reset, Reboot, Drain P2P, Drain and Reset)."""
    words = action.lower()
    reset = RESET % index if index is not None else "reboot the node"
    if "reboot" in words:
        return "reboot the node (the driver asks for it: %s)" % action
    if "drain" in words and "reset" in words:
        return "stop the processes that transfer peer-to-peer with this GPU, then %s" % reset
    if "drain" in words:
        return ("stop the processes that transfer peer-to-peer with this GPU (the driver asks to drain P2P), then "
                "launch again")
    return reset


# fabric.state's value once the GPU has joined its NVLink fabric, and fabric.status's once that succeeded.
FABRIC_DONE = ("completed", "success")


def _gpu_state(gpu: Mapping[str, Any]) -> list[Finding]:
    label, index, found = gpu_label(gpu), int(gpu["index"]), []
    action = str(gpu.get("recovery_action") or "")
    if action and action.lower() != "none":
        found.append(Finding(True, label, "the driver asks for a recovery action: %s" % action,
                             recovery_fix(action, index)))
    state, status = gpu.get("fabric_state"), gpu.get("fabric_status")
    if state and (str(state).lower(), str(status or "").lower()) != FABRIC_DONE:
        found.append(Finding(True, label, "its NVLink fabric is %s (status %s), not Completed with Success: CUDA "
                             "cannot start on it" % (state, status or "unknown"),
                             "check Fabric Manager (systemctl status nvidia-fabricmanager; its log "
                             "/var/log/fabricmanager.log), wait while it is In Progress, or reboot the node"))
    if gpu.get("error"):
        found.append(Finding(True, label, "nvidia-smi reports %s" % gpu["error"], RESET % index))
    if (gpu.get("ecc_uncorrected") or 0) > 0:
        found.append(Finding(True, label, "%d uncorrectable ECC errors since the driver loaded"
                             % gpu["ecc_uncorrected"], RESET % index))
    if gpu.get("remap_failure"):
        found.append(Finding(True, label, "row remapping failed (its memory cannot be repaired in the field)",
                             "take the GPU out of service and contact the vendor"))
    elif gpu.get("remap_pending"):
        found.append(Finding(True, label, "a row remap is pending", RESET % index))
    if gpu.get("retired_pending"):
        found.append(Finding(True, label, "a page retirement is pending", RESET % index))
    return found


def _busy(health: Mapping[str, Any], settings: GateSettings) -> list[Finding]:
    if settings.allow_busy or settings.job_running:
        return []
    gpus, found = _by_bus(health), []
    for process in health.get("processes") or []:
        gpu = gpus.get(gpu_health.bus_key(str(process.get("bus_id") or "")))
        if gpu is None or (settings.used is not None and int(gpu["index"]) >= settings.used):
            continue
        memory = process.get("memory")
        found.append(Finding(True, gpu_label(gpu), "is held by another process: pid %d (%s, %s%s)" % (
            process["pid"], process.get("user") or "user unknown", process.get("command") or "?",
            ", %d MiB" % memory if memory is not None else ""),
            "stop that process, or launch with -e allow_busy_gpus=true to share the GPU", hardware=False))
    return found


def _xids(health: Mapping[str, Any], settings: GateSettings) -> list[Finding]:
    gpus, latest = _by_bus(health), {}
    for event in health.get("xids") or []:
        acknowledged = settings.acknowledged_before is not None and event["time"] < settings.acknowledged_before
        recovered = event["xid"] == 154 and str(event.get("action") or "").lower() == "none"
        if event["class"] == "hardware" and not acknowledged and not recovered:
            key = (gpu_health.bus_key(event["bus_id"]), event["xid"], bool(event.get("sxid")))
            seen, count = latest.get(key, (event, 0))
            latest[key] = (event if event["time"] >= seen["time"] else seen, count + 1)
    found = []
    for (bus, _xid, _sxid), (event, count) in sorted(latest.items(), key=lambda item: item[1][0]["time"]):
        label, fact, fix = _event_words(event, None if event.get("sxid") else gpus.get(bus))
        found.append(Finding(True, label, "%s%s, last at %s UTC, a hardware or driver fault, in the kernel log since "
                             "boot" % (fact, " %d times" % count if count > 1 else "",
                                       _utc(event["time"]).strftime("%Y-%m-%d %H:%M:%S")),
                             "%s; once it is fixed without a reboot, acknowledge it with %s: '%s' in the node's host "
                             "variables" % (fix, ACK_VARIABLE, _utc(event["time"] + 1).isoformat())))
    return found


def _event_words(event: Mapping[str, Any], gpu: Mapping[str, Any] | None) -> tuple[str, str, str]:
    """What a kernel-log fault is on (label), what it is and what to do: a fatal NVSwitch SXid needs the fabric reset
    (Fabric Manager User Guide: the NVSwitches and GPUs reset, a reboot); an XID 154 the action it names; any other
    XID a reset of its GPU, or a reboot where the GPU is not known."""
    if event.get("sxid"):
        return ("NVSwitch at %s (nvidia-%s)" % (event["bus_id"], event.get("switch") or "nvswitch"),
                "SXid %d (%s: %s)" % (event["xid"], event["meaning"], event.get("detail") or "no detail"),
                "reboot the node, which resets the NVSwitches and GPUs of its NVLink fabric")
    label = gpu_label(gpu) if gpu else "GPU at %s" % gpu_health.short_bus(event["bus_id"])
    index = int(gpu["index"]) if gpu else None
    action = event.get("action")
    if action:
        return label, "XID %d (%s: %s)" % (event["xid"], event["meaning"], action), recovery_fix(action, index)
    return label, "XID %d (%s)" % (event["xid"], event["meaning"]), RESET % index if gpu else "reboot the node"


def nvlink_down(health: Mapping[str, Any]) -> dict[str, list[int]]:
    """Each GPU's NVLink links that are down while links of the node's GPUs are up, by GPU index; {} where no link is
    up anywhere (GPUs without NVLink or bridges, or a fabric down: _nvlink()). A GPU with none up has []: _cut_off()."""
    states = health.get("nvlink") or {}
    if not any(state.get("up") for state in states.values()):
        return {}
    return {str(index): list(state.get("down") or []) for index, state in sorted(states.items())}


def _nvlink(health: Mapping[str, Any]) -> list[Finding]:
    states = health.get("nvlink") or {}
    switches = int(health.get("fabric_switches") or 0)
    if not any(state.get("up") for state in states.values()):
        if switches and any(state.get("down") or state.get("all_inactive") for state in states.values()):
            plural = "" if switches == 1 else "es"
            return [Finding(True, "", "no NVLink link is up on any GPU, and the node has %d NVLink switch%s (an "
                            "NVSwitch or NVLink5 system): its fabric is down" % (switches, plural),
                            "check Fabric Manager (systemctl status nvidia-fabricmanager; /var/log/fabricmanager.log) "
                            "and nvidia-smi nvlink --status, or reboot the node")]
        return []  # no NVLink up anywhere and no switch: GPUs without NVLink (or a bridge not fitted)
    gpus, found = {str(gpu["index"]): gpu for gpu in health.get("gpus") or []}, []
    up = sum(state.get("up", 0) for state in states.values())
    for index, down in nvlink_down(health).items():
        label = gpu_label(gpus[index]) if index in gpus else "GPU %s" % index
        if down:
            found.append(Finding(True, label, "NVLink link%s %s down while %d other link%s of the node's GPUs are up" % (
                "s" if len(down) > 1 else "", ", ".join(str(link) for link in down),
                up, "" if up == 1 else "s"),
                "check the NVLink fabric (nvidia-smi nvlink --status; Fabric Manager on NVSwitch systems), or reboot "
                "the node"))
        elif states[index].get("all_inactive"):
            found.append(_cut_off(label, up, switches))
    return found


def _cut_off(label: str, up: int, switches: int) -> Finding:
    """A GPU with no NVLink link up ("all links are inActive") beside GPUs with theirs: cut off from the fabric where
    the node has NVLink switches (a refusal), else a GPU without a bridge, or with a loose one (a warning)."""
    fact = "none of its NVLink links is up (nvidia-smi: all links are inActive) while %d link%s of the node's other " \
        "GPUs are up" % (up, "" if up == 1 else "s")
    if not switches:
        return Finding(False, label, fact, "the job runs, reaching it over PCIe; fit or reseat its NVLink bridge")
    return Finding(True, label, fact + ", on a node with %d NVLink switch%s: it is cut off from the fabric" % (
        switches, "" if switches == 1 else "es"), "check Fabric Manager (systemctl status nvidia-fabricmanager; "
        "/var/log/fabricmanager.log) and the GPU's fabric state (nvidia-smi -q), or reboot the node")


def _imex(health: Mapping[str, Any]) -> list[Finding]:
    """IMEX on a multi-node NVLink node (GB200/GB300 NVL; nvidia_node.imex_state): installed and not running, or
    running without a channel (the driver creates none: open-gpu-kernel-modules nv-reg.h), refuses; not installed, or
    on a node whose init is not systemd, warns."""
    imex = health.get("imex")
    if not imex:
        return []
    if not imex.get("installed"):
        return [Finding(False, "", "the GPUs are a multi-node NVLink system's (GB200/GB300 NVL) and NVIDIA IMEX is not "
                        "installed: NCCL reaches the other trays over the network, not NVLink",
                        "the job runs; provision the node with the nvidia_imex role (playbooks/provision.yml --tags "
                        "nvidia_imex) for multi-node NVLink")]
    state = imex.get("state") or "unknown"
    if state == "no systemd":
        return [Finding(False, "", "NVIDIA IMEX is installed but systemd is not this node's init, so whether it runs "
                        "is not known", "the job runs; start nvidia-imex where the node's init runs it")]
    if state != "active":
        return [Finding(True, "", "NVIDIA IMEX is %s on a multi-node NVLink node (GB200/GB300 NVL): CUDA cannot share "
                        "GPU memory across the NVLink domain, and NCCL would go between the trays over the network"
                        % state, "start it (systemctl status nvidia-imex; its log /var/log/nvidia-imex.log; every node "
                        "of the domain in /etc/nvidia-imex/nodes_config.cfg), or provision.yml --tags nvidia_imex",
                        hardware=False)]
    if not imex.get("channels"):
        return [Finding(True, "", "NVIDIA IMEX runs but the node has no IMEX channel (/dev/nvidia-caps-imex-channels "
                        "is empty): CUDA's fabric memory calls fail with a permission error",
                        "provision.yml --tags nvidia_imex creates channel 0 (nvidia_imex_channel0), or create one as "
                        "the IMEX guide's \"IMEX Channels\" shows", hardware=False)]
    return []


def _dcgm(health: Mapping[str, Any]) -> list[Finding]:
    """DCGM's diagnostic (health_diag=1: dcgmi diag -r 1, gpufleet.cluster.dcgm_diag's result under ``dcgm``): a GPU
    that fails refuses, one DCGM only warns about is warned of (DCGM's text shown); so is a node without DCGM, or
    whose diagnostic did not run."""
    diag = health.get("dcgm")
    if not diag or diag.get("skipped"):
        return []
    if not diag.get("present"):
        asked = str(diag.get("asked_by") or "health_diag=1")
        return [Finding(False, "", "%s asks for DCGM's diagnostic, and DCGM is not installed" % asked,
                        "provision the node with -e dcgm_enabled=true, or leave %s out" % asked.split("=", maxsplit=1)[0])]
    if diag.get("error"):
        return [Finding(False, "", "DCGM's diagnostic did not run: %s" % diag["error"],
                        "check nv-hostengine (systemctl status nvidia-dcgm)")]
    found, level = [], diag.get("level", 1)
    for entry in diag.get("gpus") or []:
        result = str(entry.get("result"))
        label = "GPU %s" % entry["gpu"] if entry.get("gpu") is not None else str(entry.get("entity") or "")
        if entry.get("skipped") and result in ("Pass", "Warn", "Skip", "Not Run"):
            found.append(_dcgm_skipped(label, level, result, list(entry["skipped"])))
        if result in ("Pass", "Skip", "Not Run"):
            continue
        detail = "%s%s" % (", ".join(entry.get("failed") or []) or result.lower(),
                           ": " + entry["messages"][0] if entry.get("messages") else "")
        if result == "Warn":  # DCGM's errors were all of a severity the GPU can work with (dcgm_diag.py)
            found.append(Finding(False, label, "DCGM's level-%s diagnostic warns (%s)" % (level, detail),
                                 "the job runs; fix what DCGM names"))
            continue
        found.append(Finding(True, label, "fails DCGM's level-%s diagnostic (%s)" % (level, detail),
                             "see dcgmi diag -r 3 on the node; reset the GPU, or take it out of service"))
    return found


def _dcgm_skipped(label: str, level: Any, result: str, skipped: list[str]) -> Finding:
    """The tests DCGM did not run on a GPU it did not fail, with no reason given: DCGM runs a plugin only on the GPU
    models its diag-skus.yaml allows (the plugin's is_allowed: DCGM's Diagnostic Configuration File reference)."""
    what = ("none of DCGM's level-%s tests ran on it (skipped: %s)" if result in ("Skip", "Not Run")
            else "DCGM's level-%s diagnostic did not run %s on it") % (level, ", ".join(skipped))
    # A DCGM 4 plugin's name (DCGM 3's deployment checks had names of words, and no such parameter).
    plugins = [name for name in skipped if name.isidentifier() and name.islower() and name != "software"]
    return Finding(False, label, what, "the job runs, without those tests' word on this GPU" + (
        "; DCGM runs a test only on the GPU models its diag-skus.yaml allows it for: dcgmi diag -r %s -p "
        "%s.is_allowed=true runs it anyway" % (level, plugins[0]) if plugins else ""))


def _warnings(health: Mapping[str, Any]) -> list[Finding]:
    found = []
    for gpu in health.get("gpus") or []:
        width, widest = gpu.get("pcie_width"), gpu.get("pcie_width_max")
        if width and widest and width < widest:
            found.append(Finding(False, gpu_label(gpu), "its PCIe link runs at x%d, narrower than its x%d" % (width, widest),
                                 "the job runs, with slower host transfers; reseat the GPU or check its riser and slot"))
        reasons = gpu.get("event_reasons") or 0
        if reasons & gpu_health.SLOWDOWN_REASONS:
            names = [name for bit, name in sorted(gpu_health.EVENT_REASONS.items())
                     if reasons & bit and bit & gpu_health.SLOWDOWN_REASONS]
            found.append(Finding(False, gpu_label(gpu), "its clocks are held down (%s) at %d%% utilisation" % (
                ", ".join(names), gpu.get("utilization") or 0),
                "the job runs, slower; check the node's cooling and power supply"))
    return found


def _kernel_log(health: Mapping[str, Any], settings: GateSettings) -> list[Finding]:
    """A kernel log path that cannot be one is refused; one that cannot be read is said (XIDs not checked), and
    refused where gpufleet_xid_check_required is true."""
    where = str(health.get("kernel_log") or "")
    if where.startswith("invalid: "):
        return [Finding(True, "", "%s: %s" % (KERNEL_LOG_VARIABLE, where[len("invalid: "):]),
                        "point it at /dev/kmsg (the default) or at a file in /dev/kmsg's record format", hardware=False)]
    if where.startswith("unreadable"):
        return [Finding(settings.xid_check_required, "", "XIDs were not checked: the kernel log is %s" % where,
                        "run as a user who may read /dev/kmsg or the kernel's journal (root, or the adm or "
                        "systemd-journal group)%s" % ("" if settings.xid_check_required else "; %s=true refuses such "
                                                      "a node instead" % XID_CHECK_VARIABLE), hardware=False)]
    return []


def findings(health: Mapping[str, Any], settings: GateSettings) -> list[Finding]:
    """Every finding on a node's GPUs, refusals first, in this order: GPUs missing or lost, GPUs in an error
    state, with memory faults, a recovery action or a fabric not trained, GPUs held by other processes, XIDs and
    fatal SXids, NVLink, IMEX, DCGM's diagnostic, the kernel log; then the warnings."""
    if not health.get("nvidia_smi"):
        if health.get("pci_gpus"):
            return [Finding(False, "", "%s on the PCI bus but nvidia-smi is not installed, so the job runs "
                            "without %s here" % (_gpus(health["pci_gpus"]).replace("GPU", "NVIDIA GPU"),
                                                 "it" if health["pci_gpus"] == 1 else "them"),
                            "install the driver (playbooks/provision.yml --tags nvidia_driver)")]
        return []
    if health.get("error") and not health.get("gpus"):
        return [Finding(True, "", "nvidia-smi fails: %s" % health["error"],
                        "check the driver (nvidia-smi; dmesg | grep NVRM), or reboot the node")]
    refusals = _count(health, settings)
    for gpu in health.get("gpus") or []:
        refusals += _gpu_state(gpu)
    refusals += _busy(health, settings) + _xids(health, settings)
    late = _nvlink(health) + _imex(health) + _dcgm(health) + _kernel_log(health, settings)
    return refusals + [f for f in late if f.refuse] + _warnings(health) + [f for f in late if not f.refuse]


def judge(health: Mapping[str, Any], acknowledged: Any = None, expected: Any = None, used: int | None = None,
          allow_busy: bool = False, job_running: bool = False, xid_check_required: Any = False) -> list[Finding]:
    """The findings on a node's GPUs from its settings as the inventory gives them: its
    gpufleet_xids_acknowledged_before (a time that does not parse is the node's refusal) and its gpufleet_gpus
    (ignored unless a whole number) and its gpufleet_xid_check_required (true, yes, on or 1 is true); the rest as
    GateSettings has them. The one judge of train.yml and verify.yml."""
    try:
        since = acknowledgement_time(acknowledged)
    except ValueError:
        return [Finding(True, "", "%s=%r is not a date and time" % (ACK_VARIABLE, acknowledged),
                        "write one such as 2026-11-25T10:02:12+00:00", hardware=False)]
    required = str(xid_check_required).strip().lower() in ("1", "true", "yes", "on")
    settings = GateSettings(expected=int(expected) if str(expected or "").isdigit() else None, used=used,
                            allow_busy=allow_busy, acknowledged_before=since, job_running=job_running,
                            xid_check_required=required)
    return findings(health, settings)


def has_gpus(health: Mapping[str, Any]) -> bool:
    """Whether there is anything to judge: nvidia-smi is there (it may answer for no GPU: then it is refused)."""
    return bool(health.get("nvidia_smi") or health.get("pci_gpus"))
