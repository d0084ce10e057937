"""Prometheus's own binaries, the tests' judges of what Prometheus accepts (unit tests and, later, the cluster's):
promtool and prometheus, out of the distribution's package (scripts/fetch-prometheus.sh, run by `make setup`)."""

import os
import shutil
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def prometheus_tool(name):
    """The path of promtool or prometheus: .cache/prometheus/ (make setup), else the one on PATH. A test that needs
    it fails, saying how to get it, rather than skipping."""
    found = os.path.join(REPO, ".cache", "prometheus", name)
    found = found if os.access(found, os.X_OK) else shutil.which(name)
    assert found, "%s is missing: `make setup` (scripts/fetch-prometheus.sh) puts it in .cache/prometheus" % name
    return found


def run(tool, *args, timeout=60, input_text=None):
    return subprocess.run([tool, *args], capture_output=True, text=True, check=False, timeout=timeout,
                          input=input_text)
