"""Run the playbooks for real on this machine, against the embedded local inventory (two nodes on loopback)."""

import os
import re
import shlex
import sys
import time
from dataclasses import dataclass, field

import ansible_runner
import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
SCRIPTS = os.path.join(REPO, "tests", "integration", "scripts")
with open(os.path.join(REPO, "inventories", "local", "group_vars", "gpu_nodes.yml")) as _handle:
    _LOCAL_ENV = dict(yaml.safe_load(_handle)["gpufleet_env"])


def local_env(**more: str) -> dict:
    """The local inventory's gpufleet_env with more: a test's -e gpufleet_env replaces the inventory's whole, and its
    two nodes on one machine need what it sets (Gloo over loopback, one intra-op thread per rank)."""
    return dict(_LOCAL_ENV, **more)


@dataclass
class Run:
    rc: int
    out: str
    seconds: float
    args: list = field(default_factory=list)

    def task_results(self, task_name):
        """The 'ok'/'changed'/... word per host under the first task whose name contains task_name."""
        block = self.out.split(task_name, 1)[1].split("TASK [", 1)[0]
        return dict((host, word) for word, host in re.findall(r"^(ok|changed|skipping|failed|fatal): \[(\w+)\]", block, re.M))


def proc_env_has(prefix):
    """PIDs of live processes whose environment has an entry starting with prefix."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % name, "rb") as handle:
                entries = handle.read().split(b"\0")
        except OSError:
            continue
        if any(entry.startswith(prefix.encode()) for entry in entries):
            found.append(int(name))
    return found


class Local:
    """Playbook runs with job folders and logs in a test's own temporary folder."""

    def __init__(self, tmp_path):
        self.root = tmp_path
        self.logs = tmp_path / "logs"
        self.nodes = tmp_path / "nodes"

    def job_dir(self, host, job):
        return self.nodes / host / "jobs" / job

    def playbook(self, name, *args, inventory=None, timeout=300, extra_env=None):
        cmd = [os.path.join("playbooks", name)]
        if inventory:
            cmd += ["-i", str(inventory)]
        cmd += ["-e", "gpufleet_jobs_dir=%s/{{ inventory_hostname }}/jobs" % self.nodes,
                "-e", "gpufleet_logs_dir=%s" % self.logs]
        cmd += list(args)
        env = {"PATH": BIN + os.pathsep + os.environ.get("PATH", ""), "ANSIBLE_FORCE_COLOR": "0",
               "ANSIBLE_NOCOLOR": "1", "PYTHONUNBUFFERED": "1"}
        env.update(extra_env or {})
        started = time.monotonic()
        out, err, rc = ansible_runner.run_command(
            executable_cmd=os.path.join(BIN, "ansible-playbook"), cmdline_args=cmd, host_cwd=REPO, envvars=env,
            runner_mode="subprocess", timeout=timeout, quiet=True)
        seconds = time.monotonic() - started
        text = (out or "") + (err or "")
        print("$ ansible-playbook %s\n%s" % (" ".join(shlex.quote(c) for c in cmd), text))
        return Run(rc=rc, out=text, seconds=seconds, args=cmd)


@pytest.fixture
def local(tmp_path):
    helper = Local(tmp_path)
    yield helper
    # Stop whatever a failed test left running, with the project's own stop (never by name).
    names = {job_dir.name for job_dir in helper.nodes.glob("*/jobs/*")}
    for name in sorted(names):
        helper.playbook("stop.yml", "-e", "job=%s" % name, timeout=120)
