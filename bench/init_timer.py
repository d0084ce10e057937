"""Benchmark script: records when this rank has finished init_process_group, then exits."""
import os
import time

import torch.distributed as dist

dist.init_process_group("gloo")
stamp = time.time()
with open(os.path.join(os.environ["BENCH_STAMPS"], "rank%d" % dist.get_rank()), "w") as handle:
    handle.write("%f\n" % stamp)
dist.barrier()
dist.destroy_process_group()
