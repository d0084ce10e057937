"""Test script: checks that API_TOKEN reached this rank (by its sha256, never printing it), then waits."""
import hashlib
import os
import sys
import time

digest = hashlib.sha256(os.environ.get("API_TOKEN", "").encode()).hexdigest()
if digest != os.environ["EXPECTED_TOKEN_SHA256"]:
    print("API_TOKEN missing or wrong on node_rank %s" % os.environ.get("NODE_RANK"), flush=True)
    sys.exit(4)
print("token ok on node_rank %s" % os.environ.get("NODE_RANK"), flush=True)
time.sleep(float(os.environ.get("HOLD_S", "0")))
