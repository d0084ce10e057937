#!/usr/bin/env python3
"""Launch overhead of train.yml against starting the two torchrun commands by hand.

Measures, on the local two-node inventory, the time from invoking the launch to
every rank having finished init_process_group (each rank stamps the moment),
for:
  - baseline: the two torchrun commands gpufleet renders, started directly;
  - gpufleet: ansible-playbook playbooks/train.yml.
Runs alternate (baseline, gpufleet, baseline, ...) so both see the same machine
state, and the ratio of the medians is printed. A figure, not a test: it never fails
on a number.

    .venv/bin/python bench/launch_overhead.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
SCRIPT = os.path.join(REPO, "bench", "init_timer.py")


def last_stamp(stamps: str, world: int) -> float:
    values = []
    for rank in range(world):
        with open(os.path.join(stamps, "rank%d" % rank)) as handle:
            values.append(float(handle.read()))
    return max(values)


def direct(port: int, stamps: str) -> float:
    env = dict(os.environ, BENCH_STAMPS=stamps, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    started = time.time()
    procs = [
        subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--node-rank=%d" % rank,
             "--nproc-per-node=1", "--master-addr=127.0.0.1", "--master-port=%d" % port, "--rdzv-backend=static",
             "--max-restarts=0", SCRIPT],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        for rank in (0, 1)
    ]
    for proc in procs:
        if proc.wait(timeout=300) != 0:
            raise SystemExit("direct torchrun failed")
    return last_stamp(stamps, 2) - started


def gpufleet(run: int, stamps: str, work: str) -> tuple[float, float]:
    extra = json.dumps({"gpufleet_env": {"BENCH_STAMPS": stamps, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"},
                        "gpufleet_jobs_dir": work + "/{{ inventory_hostname }}/jobs", "gpufleet_logs_dir": work + "/logs"})
    started = time.time()
    done = subprocess.run(
        [os.path.join(BIN, "ansible-playbook"), "playbooks/train.yml", "-e", "script=%s" % SCRIPT,
         "-e", "job=bench%d" % run, "-e", extra],
        cwd=REPO, capture_output=True, text=True, check=False,
        env=dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", "")))
    total = time.time() - started
    if done.returncode != 0:
        raise SystemExit("train.yml failed:\n" + done.stdout[-3000:])
    return last_stamp(stamps, 2) - started, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", default=os.path.join(REPO, "bench", "results", "launch_overhead.json"))
    args = parser.parse_args()
    base, fleet, fleet_total = [], [], []
    with tempfile.TemporaryDirectory(prefix="gpufleet-bench-") as work:
        for run in range(args.runs):
            for kind in ("direct", "gpufleet"):
                stamps = tempfile.mkdtemp(dir=work)
                if kind == "direct":
                    base.append(direct(29400 + run, stamps))
                else:
                    ready, total = gpufleet(run, stamps, work)
                    fleet.append(ready)
                    fleet_total.append(total)
    result = {
        "runs": args.runs,
        "direct_ready_s": statistics.median(base),
        "gpufleet_ready_s": statistics.median(fleet),
        "gpufleet_playbook_total_s": statistics.median(fleet_total),
        "ratio": statistics.median(fleet) / statistics.median(base),
        "direct_all": base,
        "gpufleet_all": fleet,
    }
    print("launch overhead, local inventory (2 nodes x 1 rank, gloo), median of %d runs each:" % args.runs)
    print("  two torchrun commands started directly: %5.2f s until every rank finished init_process_group"
          % result["direct_ready_s"])
    print("  ansible-playbook playbooks/train.yml:   %5.2f s until every rank finished init_process_group"
          " (playbook done after %.2f s)" % (result["gpufleet_ready_s"], result["gpufleet_playbook_total_s"]))
    print("  ratio train.yml / direct: %.2f" % result["ratio"])
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as handle:
        json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
