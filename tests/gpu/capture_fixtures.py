#!/usr/bin/env python3
"""Capture, on a machine with an NVIDIA GPU, what the outside tools print for every call gpufleet's readers make,
into one JSON document for tests/fixtures (each entry: argv, stdout, stderr, exit code, as the tool wrote them).

    python3 tests/gpu/capture_fixtures.py [OUTPUT.json]        # default: logs/gpu-check/captures.json

It changes nothing on the machine: nvidia-smi queries, `dcgmi diag -r 1 -j` where DCGM is installed (level 1 does
not load the GPUs), journalctl -k as this user and as `nobody`, the first records and the NVIDIA driver's lines of
/dev/kmsg where this user may read it. The queries are the readers' own (plugins/module_utils/_runtime/gpu_health.py
HEALTH_FIELDS), so a capture is what the reader gets on that GPU. Copy what a test needs into the tool's folder under
tests/fixtures with its source (the GPU, the driver, the date) in that folder's README.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "collections"))

# The node runtime needs the standard library alone: imported through the checkout's collections/ link, no Ansible.
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import gpu_health, gpu_watch  # noqa: E402

QUERY = ",".join(field for _key, field in gpu_health.HEALTH_FIELDS)
CALLS = {
    "nvidia-smi-query-health": ["nvidia-smi", "--query-gpu=" + QUERY, "--format=csv,noheader,nounits"],
    "nvidia-smi-query-health-header": ["nvidia-smi", "--query-gpu=" + QUERY, "--format=csv"],
    "nvidia-smi-query-fabric": ["nvidia-smi", "--query-gpu=index,fabric.state,fabric.status,gpu_recovery_action",
                                "--format=csv"],
    "nvidia-smi-query-unknown-field": ["nvidia-smi", "--query-gpu=index,no.such.field", "--format=csv"],
    "nvidia-smi-query-watch": ["nvidia-smi", "--query-gpu=" + ",".join(field for _key, field in gpu_watch.SAMPLE_FIELDS),
                               "--format=csv,noheader,nounits"],
    "nvidia-smi-query-persistence": ["nvidia-smi", "--query-gpu=persistence_mode", "--format=csv,noheader"],
    "nvidia-smi-query-check": ["nvidia-smi", "--query-gpu=driver_version,compute_cap,name,pci.device_id",
                               "--format=csv,noheader"],
    "nvidia-smi-compute-apps": ["nvidia-smi", "--query-compute-apps=gpu_bus_id,pid,process_name,used_memory",
                                "--format=csv,noheader,nounits"],
    "nvidia-smi-nvlink-status": ["nvidia-smi", "nvlink", "--status"],
    "nvidia-smi-list": ["nvidia-smi", "-L"],
    "nvidia-smi-q": ["nvidia-smi", "-q"],
    "dcgmi-diag-r1-json": ["dcgmi", "diag", "-r", "1", "-j", "--timeout", "300"],
    "journalctl-grep": gpu_health.JOURNAL + gpu_health.XID_GREP,
    "journalctl-last": gpu_health.JOURNAL + ["-n", "1"],
}


def run(argv: list[str], timeout: int = 600) -> dict:
    if shutil.which(argv[0]) is None:
        return {"argv": argv, "missing": True}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return {"argv": argv, "timeout": timeout, "stdout": str(exc.stdout or "")}
    return {"argv": argv, "stdout": done.stdout, "stderr": done.stderr, "returncode": done.returncode}


def kmsg_records(limit: int = 40) -> dict:
    """The first records of /dev/kmsg and every record of the NVIDIA driver (NVRM, nvidia-nvswitch), as read."""
    try:
        records = gpu_health._kmsg_records(gpu_health.KMSG)  # pylint: disable=protected-access
    except OSError as exc:
        return {"error": "%s: %s" % (gpu_health.KMSG, exc)}
    nvidia = [record for record in records if "NVRM" in record or "nvswitch" in record]
    return {"first": records[:limit], "nvidia": nvidia[-200:], "records": len(records)}


def readers() -> dict:
    """What the readers themselves make of this machine: gpu_health.read (the gate's and the report's one pass) and
    the supervisor's kernel-log follower on /dev/kmsg, the character device production reads."""
    found: dict = {}
    try:
        found["gpu_health.read"] = gpu_health.read()
    except Exception as exc:  # pylint: disable=broad-except  (a capture keeps what went wrong, and goes on)
        found["gpu_health.read"] = {"exception": repr(exc)}
    follower = gpu_watch.KernelFollower(gpu_health.KMSG)
    found["kernel_follower"] = {"error": follower.error, "new_records": follower.new_records() if not follower.error
                                else []}
    return found


def main() -> int:
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "logs", "gpu-check", "captures.json")
    captured = {"taken": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": platform.uname()._asdict(),
                "uid": os.getuid(), "calls": {name: run(argv) for name, argv in CALLS.items()},
                "kmsg": kmsg_records(), "readers": readers()}
    if os.getuid() == 0 and shutil.which("runuser"):
        captured["calls"]["journalctl-grep-as-nobody"] = run(["runuser", "-u", "nobody", "--"] + CALLS["journalctl-grep"])
        captured["calls"]["journalctl-last-as-nobody"] = run(["runuser", "-u", "nobody", "--"] + CALLS["journalctl-last"])
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as handle:
        json.dump(captured, handle, indent=1)
    print("captured %d calls into %s" % (len(captured["calls"]), out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
