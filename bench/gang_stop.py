#!/usr/bin/env python3
"""Gang stop on the 3-node container cluster: from a fault until no process of the job is left on any node.

    make bench-gang-stop            # or: .venv/bin/python bench/gang_stop.py [--runs 3] [--keep] [--reuse]

Brings up the test cluster (tests/cluster/testbed.py), provisions what a job needs (etc_hosts, ssh_mesh,
nccl_env, python_env), then for each round runs every fault once, in turn: train.yml with
tests/cluster/scripts/faulty_train.py (gloo, one all_reduce per step), waits until every node trains, injects
the fault, and measures until the supervisor, the launcher and every rank are gone on every node. "Gone" is
read from the host's /proc, which sees the rootful containers' processes (one scan takes milliseconds; a
`podman exec` per node would add its own seconds). Prints a table with the median and the spread of each fault,
and writes it as JSON (--json). The figures include the controller and the three nodes sharing the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(REPO, "tests", "cluster"), os.path.join(REPO, "collections")]

import testbed  # noqa: E402  pylint: disable=wrong-import-position
from harness import Cluster, bench_cluster  # noqa: E402  pylint: disable=wrong-import-position
from jobfaults import kill_in_node, pid_of, probe, train, wait_for, wait_gone, wait_training  # noqa: E402

TARGET_S = 5.0


def rank_exit(cluster: Cluster, job: str) -> float:
    run = train(cluster, job, script_args="--steps 400 --fail-rank 1 --fail-step 12")
    failed = wait_for(cluster, job, lambda: (lambda p: p if (p["state"] or {}).get("attempts") else None)(
        probe(cluster, "node1", job)), what="node1's part ending")
    took = wait_gone(cluster, job) - failed["state"]["attempts"][0]["first_exit_at"]
    run.finish()
    return took


def kill(kind: str, node: str, rank: int | None = None, nproc: int = 1):
    def fault(cluster: Cluster, job: str) -> float:
        run = train(cluster, job, nproc=nproc)
        found = wait_training(cluster, job, run=run)
        at = kill_in_node(cluster, node, pid_of(found[node], kind, rank=rank))
        took = wait_gone(cluster, job) - at
        run.finish()
        return took
    return fault


def ctrl_c(cluster: Cluster, job: str) -> float:
    run = train(cluster, job)
    wait_training(cluster, job, run=run)
    at = time.time()
    os.killpg(run.proc.pid, signal.SIGINT)
    took = wait_gone(cluster, job) - at
    run.finish()
    return took


FAULTS = {
    "rank exits 1": rank_exit,
    "rank SIGKILLed": kill("worker", "node1", rank=3, nproc=2),
    "agent SIGKILLed": kill("agent", "node2"),
    "supervisor SIGKILLed": kill("supervisor", "node1"),
    "Ctrl-C on an attached run": ctrl_c,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each fault (default 3)")
    parser.add_argument("--state", default=os.path.join(REPO, ".cache", "bench-gang-stop"))
    parser.add_argument("--json", default=os.path.join(REPO, "logs", "bench", "gang_stop.json"))
    parser.add_argument("--keep", action="store_true", help="leave the cluster up afterwards")
    parser.add_argument("--reuse", action="store_true", help="use the cluster a --keep run left (already provisioned)")
    args = parser.parse_args()
    state = os.path.abspath(args.state)
    try:
        cluster = bench_cluster(state, args.reuse)
        measured: dict[str, list[float]] = {name: [] for name in FAULTS}
        for round_ in range(args.runs):
            for name, fault in FAULTS.items():
                job = "gs-%d-%d" % (list(FAULTS).index(name), round_)
                seconds = fault(cluster, job)
                measured[name].append(round(seconds, 2))
                print("round %d  %-28s %5.2f s" % (round_ + 1, name, seconds), flush=True)
    finally:
        if not args.keep:
            testbed.down(state)
    rows = [{"fault": name, "runs": values, "median_s": statistics.median(values), "max_s": max(values)}
            for name, values in measured.items()]
    print("\nfault -> nothing of the job left on any node (3 nodes, host /proc), %d runs each" % args.runs)
    print("%-28s %8s %8s  %s" % ("fault", "median", "max", "runs"))
    for row in rows:
        print("%-28s %6.2f s %6.2f s  %s%s" % (row["fault"], row["median_s"], row["max_s"],
                                               " ".join("%.2f" % v for v in row["runs"]),
                                               "" if row["median_s"] <= TARGET_S else "  (above %.0f s)" % TARGET_S))
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as handle:
        json.dump({"target_s": TARGET_S, "rows": rows, "when": time.strftime("%Y-%m-%d %H:%M:%S"),
                   "machine": "%d cores" % os.cpu_count()}, handle, indent=2)
    return 0 if all(row["median_s"] <= TARGET_S for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
