"""Test script: joins the process group, then the node with NODE_RANK == FAIL_NODE_RANK exits FAIL_CODE.

Every other rank then blocks forever, the way NCCL ranks hang when a peer
dies (Gloo over loopback would notice the dead peer and fail by itself), so
only gpufleet's gang stop ends them. It records when it failed in
FAIL_STAMP (if set).
"""
import os
import sys
import time

import torch.distributed as dist

dist.init_process_group("gloo")
print("rank %d of world size %d ready" % (dist.get_rank(), dist.get_world_size()), flush=True)
if os.environ.get("NODE_RANK") == os.environ.get("FAIL_NODE_RANK", "1"):
    time.sleep(float(os.environ.get("FAIL_AFTER_S", "1")))
    stamp = os.environ.get("FAIL_STAMP")
    if stamp:
        with open(stamp, "w") as handle:
            handle.write("%f\n" % time.time())
    print("failing on purpose with exit code %s" % os.environ.get("FAIL_CODE", "3"), flush=True)
    sys.exit(int(os.environ.get("FAIL_CODE", "3")))
time.sleep(3600)
