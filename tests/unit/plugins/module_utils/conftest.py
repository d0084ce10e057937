"""Fixtures shared by the tests of the node-side modules."""

import json
import os
import shutil
import stat
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN = os.path.join(HERE, "..", "..", "..", "cluster", "scripts", "nvidia_smi_standin.py")


@pytest.fixture
def gpus_on_path(tmp_path, monkeypatch):
    """The test cluster's stand-in nvidia-smi first on PATH (for this process and what it starts), answering from a
    state file of two GPUs; returns that file's path, for a test to change."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    target = bin_dir / "nvidia-smi"
    shutil.copy(STANDIN, target)
    target.chmod(target.stat().st_mode | stat.S_IXUSR)
    # The stand-in runs with this interpreter (the nodes' /usr/bin/python3 need not exist here).
    target.write_text("#!%s\n%s" % (os.path.realpath(sys.executable), target.read_text().split("\n", 1)[1]))
    state = tmp_path / "gpus.json"
    state.write_text(json.dumps({"gpus": [{"utilization.gpu": 91, "memory.used": 40000}, {}]}))
    monkeypatch.setenv("PATH", "%s%s%s" % (bin_dir, os.pathsep, os.environ["PATH"]))
    monkeypatch.setenv("GPUFLEET_STANDIN_GPUS", str(state))
    return state
