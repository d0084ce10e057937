#!/usr/bin/python3
"""gpufleet's stand-in for NVIDIA's dcgm-exporter, installed as /usr/bin/dcgm-exporter by the stand-in package
datacenter-gpu-manager-exporter (tests/cluster/standin_repo.py) and started by NVIDIA's own unit file for it.

No GPU is read and no value is made up: every series it serves is a line of a real dcgm-exporter's output
(CAPTURE: tests/fixtures/dcgm_exporter/metrics-tesla-t4.txt, whose README names its source), served once per GPU
the node's nvidia-smi lists (the stand-in nvidia-smi of tests/cluster/gpu_standin.py, where a test installed it),
with that GPU's index, UUID and device and the node's host name as labels, as the exporter labels them. One value
is the node's own: DCGM_FI_DEV_XID_ERRORS is the last XID the driver logged for that GPU's bus in the node's fake
kernel log (KERNEL_LOG, gpu_standin.log_kernel), as DCGM reads XIDs from the driver (0 before any). Only the
fields of the counters file given with -f are served, as the exporter does.

Flags read: -f/--collectors FILE, -a/--address [HOST]:PORT (default :9400). Standard library only."""

import http.server
import os
import re
import socket
import subprocess
import sys

CAPTURE = os.environ.get("GPUFLEET_STANDIN_CAPTURE", "/usr/share/gpufleet-standin/dcgm-exporter/metrics-tesla-t4.txt")
KERNEL_LOG = os.environ.get("GPUFLEET_STANDIN_KMSG", "/var/lib/gpufleet-test/kmsg")
_SERIES = re.compile(r'^(?P<name>[A-Z_0-9]+)\{gpu="0",UUID="[^"]*",device="nvidia0",(?P<rest>.*Hostname=")[^"]*'
                     r'(?P<tail>".*\}) (?P<value>\S+)$')
_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:]+)\): (\d+),")


def flag(args, short, long, default):
    for index, arg in enumerate(args):
        if arg in (short, long) and index + 1 < len(args):
            return args[index + 1]
        if arg.startswith(long + "="):
            return arg.split("=", 1)[1]
    return default


def fields(path):
    with open(path) as handle:
        return {line.split(",")[0].strip() for line in handle if line.strip() and not line.lstrip().startswith("#")}


def gpus():
    """[(index, uuid, kernel-log bus id)] from nvidia-smi; none where it fails."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,pci.bus_id", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit():
            found.append((parts[0], parts[1], parts[2][4:-2].lower()))  # 00000000:18:00.0 -> 0000:18:00
    return found


def last_xids():
    """The last XID the kernel log holds for each bus."""
    found = {}
    try:
        with open(KERNEL_LOG, errors="replace") as handle:
            for record in handle:
                match = _XID.search(record)
                if match:
                    found[match.group(1).lower()] = match.group(2)
    except OSError:
        pass
    return found


def page(served):
    with open(CAPTURE) as handle:
        lines = handle.read().splitlines()
    xids, host, out = last_xids(), socket.gethostname(), []
    devices = gpus()
    for line in lines:
        name = line.split()[2] if line.startswith("# ") else line.split("{")[0]
        if name not in served:
            continue
        match = _SERIES.match(line)
        if not match:
            out.append(line)
            continue
        for index, uuid, bus in devices:
            value = xids.get(bus, "0") if name == "DCGM_FI_DEV_XID_ERRORS" else match.group("value")
            out.append('%s{gpu="%s",UUID="%s",device="nvidia%s",%s%s%s %s' % (
                name, index, uuid, index, match.group("rest"), host, match.group("tail"), value))
    return ("\n".join(out) + "\n").encode()


def main():
    args = sys.argv[1:]
    served = fields(flag(args, "-f", "--collectors", "/etc/dcgm-exporter/default-counters.csv"))
    host, _, port = flag(args, "-a", "--address", ":9400").rpartition(":")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the standard library's name)
            if self.path != "/metrics":
                self.send_error(404)
                return
            body = page(served)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args):
            pass

    server = http.server.ThreadingHTTPServer((host, int(port)), Handler)
    print("gpufleet stand-in dcgm-exporter serving %s on %s:%s" % (CAPTURE, host or "*", port), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    os.environ.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    main()
