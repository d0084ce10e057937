"""Test script: joins the process group, says so, then sleeps (a job to detach from, inspect and stop)."""
import time

import torch.distributed as dist

dist.init_process_group("gloo")
print("rank %d of world size %d ready" % (dist.get_rank(), dist.get_world_size()), flush=True)
time.sleep(600)
