"""Test script: a loop of steps that saves its step when gpufleet stops it, and resumes from the saved step.

Each rank keeps its step in CKPT_DIR/rank<RANK>.json (GPUFLEET_CHECKPOINT_DIR when CKPT_DIR is not set). Between steps it looks for gpufleet's stop notice (the file
GPUFLEET_STOP_FILE names) and takes SIGTERM as the same request (its handler notes whether the notice was there
first); when either comes, it saves its step and ends. The rank of the node FAIL_NODE_RANK exits 3 at step FAIL_STEP
of the first attempt, without saving, after writing a file where the launch points PyTorch's flight recorder dumps
(TORCH_FR_DUMP_TEMP_FILE and its global rank), so that where a failed attempt's dumps are kept can be seen; its
text is a placeholder, not a dump (torch writes a real one only when a NCCL collective times out). A launch runs RUN_STEPS steps past where it started, then ends well.
"""
import json
import os
import signal
import sys
import time

rank = os.environ["RANK"]
notice = os.environ["GPUFLEET_STOP_FILE"]
folder = os.environ.get("CKPT_DIR") or os.environ["GPUFLEET_CHECKPOINT_DIR"]
os.makedirs(folder, exist_ok=True)
saved = os.path.join(folder, "rank%s.json" % rank)
sigterm = []
signal.signal(signal.SIGTERM, lambda *_: sigterm.append(os.path.exists(notice)))
step = json.load(open(saved))["step"] if os.path.exists(saved) else 0
print("rank %s attempt %s starts at step %d (grace %s s)" % (rank, os.environ["GPUFLEET_ATTEMPT"], step,
                                                            os.environ["GPUFLEET_STOP_GRACE_S"]), flush=True)
last = step + int(os.environ.get("RUN_STEPS", "100000"))
failing = os.environ["GPUFLEET_ATTEMPT"] == "1" and os.environ.get("NODE_RANK") == os.environ.get("FAIL_NODE_RANK")
while step < last:
    if os.path.exists(notice) or sigterm:
        why = json.load(open(notice))["reason"] if os.path.exists(notice) else "SIGTERM alone"
        with open(saved + ".tmp", "w") as handle:
            json.dump({"step": step}, handle)
        os.replace(saved + ".tmp", saved)
        print("rank %s saved step %d (notice before SIGTERM: %s): %s" % (rank, step, sigterm[:1] or "no SIGTERM yet",
                                                                        why), flush=True)
        sys.exit(0)
    time.sleep(0.1)
    step += 1
    if failing and step == int(os.environ.get("FAIL_STEP", "10")):
        with open(os.environ["TORCH_FR_DUMP_TEMP_FILE"] + rank, "w") as handle:
            handle.write("placeholder of attempt 1, not a dump\n")
        print("rank %s fails on purpose at step %d" % (rank, step), flush=True)
        sys.exit(3)
print("rank %s done at step %d" % (rank, step), flush=True)
