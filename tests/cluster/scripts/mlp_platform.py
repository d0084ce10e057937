"""A training entry point as written for a training platform: one process per node, configured only by MLP_*.

It never reads gpufleet's or torchrun's variables: its rank is MLP_ROLE_INDEX, the world is MLP_WORKER_NUM
nodes, the rendezvous is MLP_WORKER_0_HOST:MLP_WORKER_0_PORT, and it checks the hosts against MLP_MPI_HOSTFILE,
MLP_MPI_HOSTS and MLP_MPI_NP. Under gpufleet it runs with -e launcher=none.
"""

import os
import time
import sys

import torch
import torch.distributed as dist


def main() -> int:
    nodes = int(os.environ["MLP_WORKER_NUM"])
    rank = int(os.environ["MLP_ROLE_INDEX"])
    with open(os.environ["MLP_MPI_HOSTFILE"]) as handle:
        hosts = [line.split()[0] for line in handle if line.strip()]
    assert len(hosts) == nodes == len(os.environ["MLP_MPI_HOSTS"].split(","))
    assert int(os.environ["MLP_MPI_NP"]) == nodes * int(os.environ["MLP_WORKER_GPU"])
    assert hosts[0] == os.environ["MLP_WORKER_0_HOST"]
    url = "tcp://%s:%s" % (os.environ["MLP_WORKER_0_HOST"], os.environ["MLP_WORKER_0_PORT"])
    dist.init_process_group("gloo", init_method=url, rank=rank, world_size=nodes)
    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total)
    assert int(total.item()) == nodes * (nodes + 1) // 2
    print("platform script: worker %d of %d, sum %d" % (rank, nodes, total.item()), flush=True)
    # Every worker done, then the GIL released for gloo's thread to release the all_reduce (see examples/train.py).
    dist.barrier()
    dist.destroy_process_group()
    time.sleep(0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
