"""A small torch.distributed (gloo) training loop for the supervision tests, with faults on request.

Every rank prints one line per step and all-reduces a tensor, so a rank that
stops or dies leaves the others waiting in a collective, as in real training.
Every rank writes its checkpoint (checkpoint-rank<R>.json in its working
directory) every 5 steps, all at the same steps, and a later run resumes from it.

    faulty_train.py [--steps N] [--step-s S] [--fail-rank R --fail-step K [--exit-code C] [--fail-attempt A]]
                    [--stall-rank R --stall-step K] [--flight-recorder]

--stall-rank: that rank stops in load_next_batch at step K and stays there (a hang in one rank, as a data loader
that never returns), while the other ranks wait for it in all_reduce.
--flight-recorder: each rank keeps the file PyTorch's flight recorder would dump (FlightRecorderStandIn).
"""

import argparse
import inspect
import json
import os
import pickle
import sys
import time
import traceback

import torch
import torch.distributed as dist


def load_next_batch(stall_s: float) -> None:
    """Where the stalled rank stays (the hang tests look for this frame)."""
    time.sleep(stall_s)


class FlightRecorderStandIn:
    """A stand-in for the dump of PyTorch's flight recorder: gloo has none, and NCCL's (TORCH_NCCL_DUMP_ON_TIMEOUT=1)
    writes it only when a collective times out, on a GPU. The file, TORCH_FR_DUMP_TEMP_FILE + the global rank, is
    rewritten before and after each all_reduce, so that at any moment it holds what a dump at that moment would.

    The format is torch 2.13's (torch/csrc/distributed/c10d/FlightRecorderDetail.hpp, FlightRecorder::dump and
    getCollectiveTrace; FlightRecorder.hpp's key names; read by torch/distributed/flight_recorder/components/
    loader.py): a plain pickle (torch's Pickler with tag_aggregates off: dicts, lists, tuples, strings, numbers, no
    class) of {"version": "2.10", "pg_config": {name: {"name", "desc", "ranks": "[0, 1]"}}, "comm_lib_version",
    "pg_status": {pg id: {"last_enqueued_collective", "last_started_collective", "last_completed_collective"}},
    "entries": [one dict per collective, oldest first]}; the first collective's collective_seq_id is 1. What differs
    from NCCL's: the times are the wall clock's, and the frames are Python's own stack at the call under the frame of
    torch's own function for the collective (torch's are the combined C++/Python traceback, whose Python frames are
    these)."""

    def __init__(self, rank: int, world: int) -> None:
        self.path = os.environ["TORCH_FR_DUMP_TEMP_FILE"] + str(rank)
        self.world = world
        self.entries: list = []

    def entering(self, seq: int, name: str, sizes: list) -> None:
        torch_own = inspect.unwrap(getattr(dist, name)).__code__
        frames = [{"name": name, "filename": torch_own.co_filename, "line": torch_own.co_firstlineno}]
        frames += [{"name": f.name, "filename": f.filename, "line": f.lineno}
                   for f in reversed(traceback.extract_stack()[:-1])]
        now = time.time_ns()
        self.entries.append({
            "record_id": seq - 1, "pg_id": 0, "process_group": ("0", "default_pg"), "thread_name": "MainThread",
            "thread_id": str(os.getpid()), "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq,
            "profiling_name": "nccl:%s" % name, "time_created_ns": now, "input_sizes": [sizes],
            "input_dtypes": ["Float"], "output_sizes": [sizes], "output_dtypes": ["Float"], "state": "started",
            "time_discovered_started_ns": now, "time_discovered_completed_ns": 0, "retired": False,
            "timeout_ms": 600000, "is_p2p": False, "frames": frames})
        self.entries = self.entries[-2000:]  # TORCH_FR_BUFFER_SIZE
        self.write()

    def completed(self) -> None:
        self.entries[-1].update(state="completed", time_discovered_completed_ns=time.time_ns(), retired=True,
                                duration_ms=1.0)
        self.write()

    def write(self) -> None:
        last = self.entries[-1]["collective_seq_id"] if self.entries else 0
        done = last if self.entries and self.entries[-1]["state"] == "completed" else last - 1
        dump = {"version": "2.10", "comm_lib_version": "2.27.5",
                "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(self.world)))}},
                "pg_status": {"0": {"last_enqueued_collective": last, "last_started_collective": last,
                                    "last_completed_collective": done}},
                "entries": self.entries}
        with open(self.path + ".tmp", "wb") as handle:
            pickle.dump(dump, handle, protocol=2)
        os.replace(self.path + ".tmp", self.path)


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
    parser.add_argument("--flight-recorder", action="store_true")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ.get("GPUFLEET_ATTEMPT", "1"))
    start = 0
    recorder = FlightRecorderStandIn(rank, world) if args.flight_recorder else None
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
        if recorder:
            recorder.entering(step + 1 - start, "all_reduce", [1])
        dist.all_reduce(total)
        if recorder:
            recorder.completed()
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
