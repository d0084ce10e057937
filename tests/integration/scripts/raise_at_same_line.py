"""Test script: joins the process group; global rank 1 raises at the same line in every attempt (the script's own
failure, which no restart mends); every other rank blocks, as NCCL ranks do when a peer dies."""
import os
import time

import torch.distributed as dist


def train_step(step):
    if dist.get_rank() == 1 and step == 2:
        raise RuntimeError("loss is NaN at step %d" % step)


dist.init_process_group("gloo")
print("rank %d attempt %s ready" % (dist.get_rank(), os.environ.get("GPUFLEET_ATTEMPT")), flush=True)
for step in range(3):
    train_step(step)
time.sleep(3600)
