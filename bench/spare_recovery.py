#!/usr/bin/env python3
"""Fault to recovered with a spare node, on the 3-node container cluster: from a node's container stopped until every
rank of the new attempt (on the surviving node and on the spare in the lost node's place) is past
init_process_group.

    make bench-spare                # or: .venv/bin/python bench/spare_recovery.py [--runs 3] [--keep] [--reuse]

Brings up the test cluster (tests/cluster/testbed.py) and provisions what a job needs (etc_hosts, ssh_mesh,
nccl_env, python_env). Each run launches examples/train.py detached (wait=false) on node0 and node1 with node2 in
the inventory's gpu_spares group and max_restarts=1, waits for node0's first epoch, stops node1's container
(podman stop --time 0), and reads the host's view of the nodes' job logs (tests/cluster/hostview.py, no podman
exec) until attempt 2's "rank N of world size 2" lines (printed right after init_process_group) are in node0's and
node2's logs. Also given: when the surviving node decided the restart on the spare, from state.json's events
("restarting after: node1 lost; ..."). Prints each run and the median, and writes them as JSON (--json). The
figures include the controller and the three nodes sharing the machine; heartbeat_s=1 and heartbeat_misses=5 (the
defaults).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(REPO, "tests", "cluster"), os.path.join(REPO, "collections")]

import yaml  # noqa: E402  pylint: disable=wrong-import-position

import testbed  # noqa: E402  pylint: disable=wrong-import-position
from harness import Cluster, bench_cluster  # noqa: E402  pylint: disable=wrong-import-position
from jobfaults import wait_for  # noqa: E402  pylint: disable=wrong-import-position

JOBS = "/root/.gpufleet/jobs"
ARGS = ("-e", "script=%s" % os.path.join(REPO, "examples", "train.py"), "-e", "nproc_per_node=1", "-e",
        "max_restarts=1", "-e", "wait=false", "-e", "script_args='--epochs 6 --checkpoint-every 10 --step-s 0.05'")


def spare_inventory(cluster: Cluster) -> str:
    """The cluster's inventory with node2 moved to the gpu_spares group."""
    with open(cluster.inventory) as handle:
        inventory = yaml.safe_load(handle)
    nodes = inventory["gpu_nodes"]
    inventory["gpu_spares"] = {"hosts": {"node2": nodes["hosts"].pop("node2")}, "vars": dict(nodes["vars"])}
    path = os.path.join(cluster.state, "spare-hosts.yml")
    with open(path, "w") as handle:
        yaml.safe_dump(inventory, handle)
    return path


def log(cluster: Cluster, node: str, job: str) -> str:
    return cluster.view.node_file(node, "%s/%s/job.log" % (JOBS, job)) or ""


def joined(cluster: Cluster, job: str) -> bool:
    """Attempt 2's rank lines (after init_process_group) on the survivor and on the spare."""
    return (log(cluster, "node0", job).count("rank 0 of world size 2") >= 2
            and "rank 1 of world size 2" in log(cluster, "node2", job))


def one_run(cluster: Cluster, inventory: str, job: str) -> dict[str, float]:
    launched = cluster.playbook("train.yml", "-e", "job=%s" % job, *ARGS, inventory=inventory)
    if launched.rc != 0:
        raise RuntimeError(launched.out[-3000:])
    wait_for(cluster, job, lambda: "epoch 1/6" in log(cluster, "node0", job), what="node0's first epoch")
    stopped_at = time.time()
    testbed.podman("stop", "--time", "0", testbed.PREFIX + "node1")
    try:
        wait_for(cluster, job, lambda: joined(cluster, job), timeout=120, step=0.05, what="attempt 2 past init")
        recovered = time.time() - stopped_at
        state = cluster.view.job_state("node0", job) or {}
        # When node0 decided the restart on the spare (its rank may fail in gloo first, before node1 is counted lost).
        lost_at = next((at for at, what in state.get("events") or [] if str(what).startswith("restarting after")),
                       None)
        wait_for(cluster, job, lambda: all((cluster.view.job_state(n, job) or {}).get("state") == "succeeded"
                                           for n in ("node0", "node2")), timeout=120, what="the job's success")
    finally:
        testbed.podman("start", testbed.PREFIX + "node1")
        testbed.scan_host_key(cluster.addresses["node1"], testbed.ssh_port(1))
    return {"recovered_s": round(recovered, 2), "lost_s": round(lost_at - stopped_at, 2) if lost_at else -1.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--state", default=os.path.join(REPO, ".cache", "bench-spare"))
    parser.add_argument("--json", default=os.path.join(REPO, "logs", "bench", "spare_recovery.json"))
    parser.add_argument("--keep", action="store_true", help="leave the cluster up afterwards")
    parser.add_argument("--reuse", action="store_true", help="use the cluster a --keep run left (already provisioned)")
    args = parser.parse_args()
    state = os.path.abspath(args.state)
    runs = []
    try:
        cluster = bench_cluster(state, args.reuse)
        inventory = spare_inventory(cluster)
        for number in range(args.runs):
            runs.append(one_run(cluster, inventory, "spare-bench-%d" % number))
            print("run %d: node1 stopped -> restart on the spare decided %.2f s, every rank of attempt 2 past "
                  "init_process_group %.2f s" % (number + 1, runs[-1]["lost_s"], runs[-1]["recovered_s"]), flush=True)
    finally:
        if not args.keep:
            testbed.down(state)
    recovered = statistics.median(r["recovered_s"] for r in runs)
    lost = statistics.median(r["lost_s"] for r in runs)
    print("\nnode stopped -> recovered on the spare (2 nodes + 1 spare, heartbeat 1 s x 5), median of %d: %.2f s "
          "(of which until the restart was decided: %.2f s)" % (len(runs), recovered, lost))
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as handle:
        json.dump({"runs": runs, "median_recovered_s": recovered, "median_lost_s": lost,
                   "when": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": "%d cores" % os.cpu_count()}, handle,
                  indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
