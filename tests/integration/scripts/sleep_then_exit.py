"""Test script: joins the process group, says so, sleeps the seconds given (default 6), then exits 0."""
import sys
import time

import torch.distributed as dist

dist.init_process_group("gloo")
print("rank %d of world size %d ready" % (dist.get_rank(), dist.get_world_size()), flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 6.0)
dist.destroy_process_group()
