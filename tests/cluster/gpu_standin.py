"""GPUs for a test node that has none: the stand-in nvidia-smi (scripts/nvidia_smi_standin.py) installed ahead on
its PATH, driven by a state file, and a fake kernel log in /dev/kmsg's record format, which the job role reads
through gpufleet_kernel_log. Removed again by remove(). See the stand-in's docstring for what it does not do."""

from __future__ import annotations

import json
import os
import re
import time

import testbed

HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN = os.path.join(HERE, "scripts", "nvidia_smi_standin.py")
STATE = "/etc/gpufleet-test/gpus.json"
KERNEL_LOG = "/var/lib/gpufleet-test/kmsg"
# train.yml's arguments that point the gate at the fake kernel log (nodes without the stand-in read nothing).
KERNEL_LOG_ARGS = ["-e", "gpufleet_kernel_log=%s" % KERNEL_LOG]


def _container(node: str) -> str:
    return testbed.PREFIX + node


def write_state(node: str, state: dict) -> None:
    """The stand-in's state, replaced whole (a rename): a reader on the node (slurmd's health check every few seconds)
    sees the old state or the new one, never a file half written."""
    testbed.podman("exec", "-i", _container(node), "sh", "-c", "mkdir -p %s && cat > %s.new && mv %s.new %s"
                   % (os.path.dirname(STATE), STATE, STATE, STATE), input_bytes=json.dumps(state).encode())


NVIDIA_SMI = "/usr/local/bin/nvidia-smi"


def install(node: str, state: dict) -> None:
    """The stand-in on the node, answering from this state, and an empty kernel log. The state and the log come first
    and nvidia-smi last, put in place executable by one rename: a health check that runs meanwhile finds no
    nvidia-smi or the whole stand-in (a check that found it copied but not yet executable drained a Slurm node for
    "Permission denied", seen in a CI run)."""
    write_state(node, state)
    testbed.podman("exec", _container(node), "sh", "-c", "mkdir -p %s && : > %s"
                   % (os.path.dirname(KERNEL_LOG), KERNEL_LOG))
    testbed.podman("cp", STANDIN, "%s:%s.new" % (_container(node), NVIDIA_SMI))
    testbed.podman("exec", _container(node), "sh", "-c", "chmod 755 %s.new && mv %s.new %s"
                   % (NVIDIA_SMI, NVIDIA_SMI, NVIDIA_SMI))


def boot_time() -> float:
    """The kernel's boot time: the nodes are containers of this machine's kernel, so theirs is this one."""
    with open("/proc/stat") as handle:
        return float(next(line for line in handle if line.startswith("btime ")).split()[1])


def log_kernel(node: str, message: str, at: float | None = None) -> float:
    """A kernel message in the node's fake log, at ``at`` (seconds since the epoch; now by default), in /dev/kmsg's
    record format (priority, sequence, microseconds since boot, flags; message). Returns its time."""
    at = time.time() if at is None else at
    record = "4,%d,%d,-;%s\n" % (int(at * 1000) % 100000, int((at - boot_time()) * 1e6), message)
    testbed.podman("exec", "-i", _container(node), "sh", "-c", "cat >> %s" % KERNEL_LOG, input_bytes=record.encode())
    return at


# The driver's XID lines of gpufleet's corpus (tests/fixtures/kmsg, each line's source in its README).
KMSG_CORPUS = os.path.join(os.path.dirname(HERE), "fixtures", "kmsg", "handmade-xids.txt")


def xid_line(bus: str, xid: int) -> str:
    """The corpus's line of that XID, as a real kernel log printed it, for the stand-in GPU at ``bus`` (its
    kernel-log bus id, 0000:19:00): only the PCI address is this test's."""
    with open(KMSG_CORPUS) as handle:
        for record in handle:
            message = record.partition(";")[2].rstrip("\n")
            found = re.match(r"NVRM: Xid \(PCI:[0-9a-fA-F:]+\): (\d+),", message)
            if found and int(found.group(1)) == xid:
                return re.sub(r"\(PCI:[0-9a-fA-F:]+\)", "(PCI:%s)" % bus, message, count=1)
    raise KeyError("no XID %d line in %s" % (xid, KMSG_CORPUS))


def remove(node: str) -> None:
    testbed.podman("exec", _container(node), "rm", "-rf", NVIDIA_SMI, os.path.dirname(STATE),
                   os.path.dirname(KERNEL_LOG), check=False)
