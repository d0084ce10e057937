"""Benchmark script: records when this rank has finished init_process_group, then exits.

Besides that stamp (rank<N>, read by launch_overhead.last_stamp), it writes rank<N>.json with when each step before
it happened on the node, for bench/scale.py's rank-start table: the start of the agent's parent (the supervisor, or
the shell sshd started), of the agent (torchrun), of this rank's process, its first line, torch imported, and init
done. Process start times are read from /proc/<pid>/stat (clock ticks since boot, 10 ms).
"""
import json
import os
import time

TOP = time.time()

import torch.distributed as dist  # noqa: E402  pylint: disable=wrong-import-position

IMPORTED = time.time()


def started(pid):
    """When the process pid started, as a wall-clock time (None when it cannot be read)."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            ticks = int(handle.read().rpartition(")")[2].split()[19])  # field 22, starttime
        with open("/proc/uptime") as handle:
            uptime = float(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")


def parent(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return int(handle.read().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


dist.init_process_group("gloo")
stamp = time.time()
rank = dist.get_rank()
with open(os.path.join(os.environ["BENCH_STAMPS"], "rank%d" % rank), "w") as handle:
    handle.write("%f\n" % stamp)
agent = os.getppid()
with open(os.path.join(os.environ["BENCH_STAMPS"], "rank%d.json" % rank), "w") as handle:
    json.dump({"agent_parent": started(parent(agent)), "agent": started(agent), "rank": started(os.getpid()),
               "top": TOP, "imported": IMPORTED, "init": stamp}, handle)
dist.barrier()
dist.destroy_process_group()
