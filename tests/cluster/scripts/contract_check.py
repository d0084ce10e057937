"""Checks the launcher contract from inside every rank, then an all_reduce across all ranks (gloo).

Prints "ok rank R of W on node N local L sum S". With --fail-rank R that rank exits 3 after the first
all_reduce while the others keep reducing, as a failing rank in real training would leave them.
Accepts DeepSpeed's --local_rank argument.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def rank_manifest() -> dict:
    """gpufleet's ranks.json beside the hostfile; where there is none (an MPIJob's /etc/mpi, written by the MPI
    Operator), the same ranges from MLP_MPI_HOSTS ("address:slots,..." in rank order)."""
    path = os.path.join(os.path.dirname(os.environ["MLP_MPI_HOSTFILE"]), "ranks.json")
    if os.path.exists(path):
        with open(path) as handle:
            return json.load(handle)
    nodes, first = [], 0
    for entry in os.environ["MLP_MPI_HOSTS"].split(","):
        address, slots = entry.rsplit(":", 1)
        nodes.append({"address": address, "ranks": [first, first + int(slots) - 1]})
        first += int(slots)
    return {"nodes": nodes, "world_size": first}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--local_rank", type=int, default=None)  # added by DeepSpeed's launcher
    args = parser.parse_args()

    names = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "MLP_WORKER_NUM",
             "MLP_WORKER_GPU", "MLP_MPI_HOSTS", "MLP_MPI_HOSTFILE", "MLP_MPI_NP", "MLP_WORKER_0_HOST")
    missing = [name for name in names if not os.environ.get(name)]
    assert not missing, "missing: %s" % missing
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    node = int(os.environ["NODE_RANK"])
    manifest = rank_manifest()
    first, last = manifest["nodes"][node]["ranks"]
    assert first <= rank <= last, "rank %d is not in node %d's range %s" % (rank, node, (first, last))
    assert world == manifest["world_size"] == int(os.environ["MLP_MPI_NP"])
    assert os.environ["MASTER_ADDR"] == os.environ["MLP_WORKER_0_HOST"] == manifest["nodes"][0]["address"]

    dist.init_process_group("gloo")
    assert dist.get_rank() == rank and dist.get_world_size() == world
    for step in range(args.steps):
        total = torch.tensor([rank + 1.0])
        dist.all_reduce(total)
        assert int(total.item()) == world * (world + 1) // 2
        if step == 0:
            # One write per line: ranks on one node share the log.
            sys.stdout.write("ok rank %d of %d on node %d local %s sum %d\n" % (
                rank, world, node, os.environ["LOCAL_RANK"], total.item()))
            if os.environ.get("SLURM_JOB_ID"):  # run by Slurm (scheduler=slurm): Slurm's own view of the rank
                sys.stdout.write("slurm job %s rank %d on %s nodeid %s\n" % (
                    os.environ["SLURM_JOB_ID"], rank, os.environ.get("SLURMD_NODENAME"), os.environ.get("SLURM_NODEID")))
            sys.stdout.flush()
        if rank == args.fail_rank:
            print("rank %d fails on purpose" % rank, flush=True)
            # Leave gloo's thread a moment, the GIL free, to release the all_reduce's tensors: a rank that exits at
            # once can abort in that thread instead of exiting 3 (see examples/train.py).
            time.sleep(0.2)
            return 3
        time.sleep(0.2)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
