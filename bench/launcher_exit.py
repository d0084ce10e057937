#!/usr/bin/env python3
"""torchrun's end on one node: `python -m torch.distributed.run` against the job folder's launcher_entry.py.

    make bench-launcher-exit        # or: .venv/bin/python bench/launcher_exit.py [--runs 5]

One node, two ranks (gloo, the dev environment's torch, this machine), each way in turn, each case --runs times:

- rank killed: a rank SIGKILLed (a crash); torchrun notices, ends the other rank, reports and exits;
- stopped: torchrun SIGTERMed (what a gang stop sends); it ends its ranks and exits.

Measured from the fault: torchrun's CPU seconds until it exits (its own and its ranks', read from /proc before the
fault and from the zombie before it is reaped), and the seconds until it has exited. The same torchrun, the same
arguments; the entry point only skips the interpreter's teardown once torchrun is done (launcher_entry.py). Prints
a table of medians and writes logs/bench/launcher_exit.json. A figure, not a test: it fails only when a run fails.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(REPO, "collections")]

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.free_ports import pick_free_ports  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.supervisor_bundle import entry_source  # noqa: E402

HZ = os.sysconf("SC_CLK_TCK")
RANK = """
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
open(os.environ["READY"] + "." + os.environ["RANK"], "w").close()
tensor = torch.ones(10)
while True:
    dist.all_reduce(tensor)
    time.sleep(0.05)
"""


def cpu_s(pid: int) -> float | None:
    try:
        with open("/proc/%d/stat" % pid) as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / HZ  # utime, stime


def children(pid: int) -> list[int]:
    found = []
    for path in glob.glob("/proc/%d/task/*/children" % pid):
        with open(path) as handle:
            found += [int(word) for word in handle.read().split()]
    return found


def once(folder: str, way: str, case: str, run: int) -> dict[str, float]:
    port = pick_free_ports(1)[0]
    ready = os.path.join(folder, "ready-%d-%s-%s" % (run, way[:6], case[:4]))  # each run's own ranks' marks
    start = ["-m"] if way == "python -m" else [os.path.join(folder, "launcher_entry.py")]
    with open(os.path.join(folder, "torchrun.out"), "ab") as out:
        launcher = subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, *start, "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
             "--master-addr=127.0.0.1", "--master-port=%d" % port, "--rdzv-backend=static", "--max-restarts=0",
             "--log-dir=%s" % os.path.join(folder, "logs", os.path.basename(ready)), "--tee=3", os.path.join(folder, "rank.py")],
            cwd=folder, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ, READY=ready, OMP_NUM_THREADS="1"))
    deadline = time.monotonic() + 120
    while len(glob.glob(ready + ".*")) < 2:
        if launcher.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("torchrun (%s) did not start its ranks; see %s/torchrun.out" % (way, folder))
        time.sleep(0.05)
    time.sleep(0.5)
    ranks = children(launcher.pid)
    before = sum(cpu_s(pid) or 0.0 for pid in [launcher.pid] + ranks)
    at = time.monotonic()
    os.kill(ranks[-1] if case == "rank killed" else launcher.pid, signal.SIGKILL if case == "rank killed" else signal.SIGTERM)
    while os.waitid(os.P_PID, launcher.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        time.sleep(0.002)
    took = time.monotonic() - at
    # The zombie's CPU time counts its reaped children (the ranks), as its parent's rusage would.
    _pid, _status, usage = os.wait4(launcher.pid, 0)
    return {"cpu_s": round(usage.ru_utime + usage.ru_stime - before, 3), "exit_s": round(took, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", default=os.path.join(REPO, "logs", "bench", "launcher_exit.json"))
    args = parser.parse_args()
    ways = ("python -m", "launcher_entry.py")
    cases = ("rank killed", "stopped")
    measured: dict[str, dict[str, list[dict[str, float]]]] = {case: {way: [] for way in ways} for case in cases}
    with tempfile.TemporaryDirectory(prefix="gpufleet-launcher-exit-") as folder:
        with open(os.path.join(folder, "rank.py"), "w") as handle:
            handle.write(RANK)
        with open(os.path.join(folder, "launcher_entry.py"), "w") as handle:
            handle.write(entry_source())
        for run in range(args.runs):
            for case in cases:
                for way in ways:
                    got = once(folder, way, case, run)
                    measured[case][way].append(got)
                    print("run %d  %-12s %-18s cpu %.2f s  exit %.2f s" % (run + 1, case, way, got["cpu_s"],
                                                                            got["exit_s"]), flush=True)
    rows = [{"case": case, "way": way,
             "cpu_s": statistics.median(r["cpu_s"] for r in runs), "exit_s": statistics.median(r["exit_s"] for r in runs),
             "runs": runs}
            for case, by_way in measured.items() for way, runs in by_way.items()]
    print("\ntorchrun's end, 1 node x 2 ranks, from the fault; medians of %d runs (%d cores)" % (args.runs, os.cpu_count()))
    print("%-12s %-18s %8s %8s" % ("case", "way", "CPU s", "exit s"))
    for row in rows:
        print("%-12s %-18s %8.2f %8.2f" % (row["case"], row["way"], row["cpu_s"], row["exit_s"]))
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as handle:
        json.dump({"rows": rows, "when": time.strftime("%Y-%m-%d %H:%M:%S"), "cores": os.cpu_count(),
                   "python": sys.version.split()[0]}, handle, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
