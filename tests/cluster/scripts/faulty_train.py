"""A small torch.distributed (gloo) training loop for the supervision tests, with faults on request.

Every rank prints one line per step and all-reduces a tensor, so a rank that
stops or dies leaves the others waiting in a collective, as in real training.
Every rank writes its checkpoint (checkpoint-rank<R>.json in its working
directory) every 5 steps, all at the same steps, and a later run resumes from it.

    faulty_train.py [--steps N] [--step-s S] [--fail-rank R --fail-step K [--exit-code C] [--fail-attempt A]]
                    [--stall-rank R --stall-step K]

--stall-rank: that rank stops in load_next_batch at step K and stays there (a hang in one rank, as a data loader
that never returns), while the other ranks wait for it in all_reduce.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def load_next_batch(stall_s: float) -> None:
    """Where the stalled rank stays (the hang tests look for this frame)."""
    time.sleep(stall_s)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--step-s", type=float, default=0.25)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-step", type=int, default=-1)
    parser.add_argument("--exit-code", type=int, default=1)
    parser.add_argument("--fail-attempt", type=int, default=0, help="fail only in this attempt (GPUFLEET_ATTEMPT)")
    parser.add_argument("--stall-rank", type=int, default=-1)
    parser.add_argument("--stall-step", type=int, default=-1)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ.get("GPUFLEET_ATTEMPT", "1"))
    start = 0
    checkpoint = "checkpoint-rank%d.json" % rank
    if os.path.exists(checkpoint):
        with open(checkpoint) as handle:
            start = json.load(handle)["step"]
        print("rank %d resumes from step %d" % (rank, start), flush=True)
    for step in range(start, args.steps):
        failing = rank == args.fail_rank and step == args.fail_step
        if failing and args.fail_attempt in (0, attempt):
            print("rank %d fails on purpose at step %d (attempt %d)" % (rank, step, attempt), flush=True)
            # Die at once, as a crashing rank does: sys.exit would first close the process group's connections, so
            # a rank on another node could fail in the collective (and be reported first) before this one has exited.
            os._exit(args.exit_code)
        if rank == args.stall_rank and step == args.stall_step:
            load_next_batch(3600)
        total = torch.ones(1) * (rank + 1)
        dist.all_reduce(total)
        assert int(total.item()) == world * (world + 1) // 2
        print("step %d/%d rank %d attempt %d sum %d" % (step + 1, args.steps, rank, attempt, total.item()),
              flush=True)
        if step % 5 == 4:
            with open(checkpoint + ".tmp", "w") as handle:
                json.dump({"step": step + 1}, handle)
            os.replace(checkpoint + ".tmp", checkpoint)
        time.sleep(args.step_s)
    # Every rank done, then the GIL released for gloo's thread to release the last all_reduce (see examples/train.py).
    dist.barrier()
    dist.destroy_process_group()
    time.sleep(0.5)
    print("rank %d done" % rank, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
