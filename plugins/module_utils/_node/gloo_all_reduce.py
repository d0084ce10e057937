# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A Gloo all_reduce across the nodes, run by each node's training Python: how verify.yml measures the network
where NCCL cannot run (nodes without an NVIDIA GPU). Every node runs one rank at once (verify.yml starts them in
the background); rank 0's node holds the TCP rendezvous on the master address.

This file is two things: the node's side of the module (``run()``: the child's command line and environment, its
outcome read back) and the child itself (``measure()``, run as ``python -c <this file's source> ARGS`` by the
training Python, which has torch; the standard library and torch only, Python 3.8+).

What is measured is what nccl-tests reports for all_reduce (its doc/PERFORMANCE.md): per message size the time of
one all_reduce (the slowest rank's mean over the iterations), the algorithm bandwidth (size / time) and the bus
bandwidth (algbw x 2(n-1)/n, what each link carries in a ring). The first all_reduce of each size sums ones and is
checked: every element must equal the number of ranks (``wrong`` counts those that do not)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

# The message sizes when none are given: 1 MiB to 64 MiB, four times larger each (seconds on a 10 GbE network).
DEFAULT_SIZES = (1 << 20, 1 << 22, 1 << 24, 1 << 26)
# What the child prints before its JSON line, so that the line is found among anything torch prints.
RESULT_MARK = "gpufleet-gloo-result "


def child_command(python: str, source: str, master: str, port: int, rank: int, world_size: int, sizes: list[int],
                  iterations: int, timeout_s: float) -> list[str]:
    """The training Python's command line: this file's source and the measurement's arguments, no secret among them."""
    return [python, "-c", source, master, str(port), str(rank), str(world_size), ",".join(str(s) for s in sizes),
            str(iterations), str(timeout_s)]


def child_environment(interface: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment with Gloo bound to the interface that holds the node's cluster address (as train.yml binds
    it), unless the node's own environment names one."""
    env = dict(os.environ if base is None else base)
    if interface and not env.get("GLOO_SOCKET_IFNAME"):
        env["GLOO_SOCKET_IFNAME"] = interface
    return env


def outcome(returncode: int | None, stdout: str, stderr: str, timeout_s: float) -> dict:
    """The child's result: its JSON line when it printed one, else an error naming what it said last."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK):])
    if returncode is None:
        return {"error": "the Gloo all_reduce did not end within %s s" % timeout_s}
    said = (stderr.strip() or stdout.strip()).splitlines()
    return {"error": "the training Python ended with %s: %s" % (returncode, said[-1] if said else "nothing said")}


def run(python: str, source: str, master: str, port: int, rank: int, world_size: int, sizes: list[int],
        iterations: int, timeout_s: float, interface: str, runner=subprocess.run) -> dict:
    """Run this node's rank and return its result (``rows`` on rank 0, ``error`` where it failed)."""
    argv = child_command(python, source, master, port, rank, world_size, sizes, iterations, timeout_s)
    # The child's own timeout covers the rendezvous and each all_reduce; this one its import of torch besides.
    limit = timeout_s + 120
    try:
        done = runner(argv, capture_output=True, text=True, timeout=limit, check=False, env=child_environment(interface))
    except subprocess.TimeoutExpired:
        return outcome(None, "", "", limit)
    except OSError as exc:
        return {"error": "cannot start the training Python %s: %s" % (python, exc)}
    return outcome(done.returncode, done.stdout, done.stderr, timeout_s)


def bandwidths(size_bytes: int, seconds: float, world_size: int) -> dict:
    """nccl-tests' figures for all_reduce: time in microseconds, algbw and busbw in GB/s (10^9 bytes)."""
    algbw = size_bytes / seconds / 1e9 if seconds > 0 else 0.0
    # Four significant figures, not three decimals: a small message on a slow or loaded link (4 KiB in 20 ms is
    # 0.0002 GB/s) must not read as no bandwidth at all.
    return {"time_us": round(seconds * 1e6, 1), "algbw_gbps": _figures(algbw),
            "busbw_gbps": _figures(algbw * 2 * (world_size - 1) / world_size)}


def _figures(value: float) -> float:
    return float("%.4g" % value)


def measure(master: str, port: int, rank: int, world_size: int, sizes: list[int], iterations: int,
            timeout_s: float) -> dict:
    """The child's work, in the training Python: join the group, time each size, and return rank 0's rows."""
    import datetime  # pylint: disable=import-outside-toplevel

    import torch  # pylint: disable=import-outside-toplevel,import-error
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel,import-error

    dist.init_process_group("gloo", init_method="tcp://%s:%d" % (master if ":" not in master else "[%s]" % master, port),
                            rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s))
    rows = []
    try:
        for size in sizes:
            count = max(size // 4, 1)
            ones = torch.ones(count, dtype=torch.float32)
            dist.all_reduce(ones)  # the warm-up, and the check
            checks = torch.tensor([float((ones != world_size).sum().item()), 0.0], dtype=torch.float64)
            zeros = torch.zeros(count, dtype=torch.float32)  # sums stay 0: no overflow however many rounds
            dist.barrier()
            start = time.perf_counter()
            for _round in range(iterations):
                dist.all_reduce(zeros)
            checks[1] = (time.perf_counter() - start) / iterations
            wrong = checks[:1].clone()
            dist.all_reduce(wrong)
            slowest = checks[1:].clone()
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            row = {"size_bytes": count * 4, "count": count, "type": "float", "redop": "sum", "wrong": int(wrong.item())}
            row.update(bandwidths(count * 4, float(slowest.item()), world_size))
            rows.append(row)
    finally:
        dist.destroy_process_group()
    return {"rank": rank, "world_size": world_size, "rows": rows if rank == 0 else [],
            "interface": os.environ.get("GLOO_SOCKET_IFNAME", ""), "torch": torch.__version__}


def child_main(argv: list[str]) -> int:
    master, port, rank, world, sizes, iterations, timeout_s = argv
    found = measure(master, int(port), int(rank), int(world), [int(s) for s in sizes.split(",")], int(iterations),
                    float(timeout_s))
    sys.stdout.write(RESULT_MARK + json.dumps(found) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(child_main(sys.argv[1:]))
