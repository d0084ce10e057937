"""The test nodes seen from the host: their jobs' processes, files and listening ports, read through /proc.

The nodes are rootful podman containers, so the host's /proc holds every
node's processes, and /proc/<node's init pid>/root is the node's root file
system. One scan of the host's /proc therefore sees every node at once, in
milliseconds, where a `podman exec` per node costs about a second each: the
fault-to-nothing-left bounds are measured this way (tests and bench/gang_stop.py).

A process belongs to a node when its cgroup path holds the node container's id;
it belongs to a job when it carries GPUFLEET_JOB=<job> in its environment (the
launcher and every rank) or runs <jobs_dir>/<job>/supervisor.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterable

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._postmortem.rank_lines import TAG

JOBS_DIR = "/root/.gpufleet/jobs"
CONTAINERS_CONF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "containers.conf")


def _podman_inspect(containers: Iterable[str]) -> dict[str, tuple[str, int]]:
    """container -> (id, init pid; 0 when not running)."""
    found = {}
    env = dict(os.environ, CONTAINERS_CONF=CONTAINERS_CONF)
    for name in containers:
        done = subprocess.run(["podman", "inspect", "--format", "{{.Id}} {{.State.Pid}}", name], env=env,
                              capture_output=True, text=True, check=False)
        if done.returncode == 0 and done.stdout.split():
            ident, pid = done.stdout.split()[:2]
            found[name] = (ident, int(pid))
    return found


def _read(path: str, mode: str = "r") -> str | bytes | None:
    try:
        with open(path, mode) as handle:  # pylint: disable=unspecified-encoding
            return handle.read()
    except OSError:
        return None


class HostView:
    """The nodes (name -> container) as the host sees them."""

    def __init__(self, containers: dict[str, str]) -> None:
        self.containers = dict(containers)
        self._ids: dict[str, str] = {}
        self._pids: dict[str, int] = {}
        self.refresh()

    def refresh(self) -> None:
        """Look the containers up again (a restarted container has a new init pid)."""
        found = _podman_inspect(self.containers.values())
        by_container = {container: node for node, container in self.containers.items()}
        self._ids = {ident: by_container[name] for name, (ident, _pid) in found.items()}
        self._pids = {by_container[name]: pid for name, (_ident, pid) in found.items()}

    def node_of(self, pid: int) -> str | None:
        cgroup = _read("/proc/%d/cgroup" % pid)
        if not isinstance(cgroup, str):
            return None
        for ident, node in self._ids.items():
            if ident in cgroup:
                return node
        return None

    def processes(self, job: str | None = None) -> list[dict]:
        """The live processes of job (of any gpufleet job when None) on the nodes, with node, kind and ranks."""
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            process = self._process(pid, job)
            if process is not None:
                found.append(process)
        return found

    def _process(self, pid: int, job: str | None) -> dict | None:
        stat = _read("/proc/%d/stat" % pid)
        raw_env = _read("/proc/%d/environ" % pid, "rb")
        raw_cmd = _read("/proc/%d/cmdline" % pid, "rb")
        if not isinstance(stat, str) or not isinstance(raw_env, bytes) or not isinstance(raw_cmd, bytes):
            return None
        if stat[stat.rfind(")") + 2:].startswith("Z"):
            return None  # exited, not yet reaped
        env = dict(e.decode("utf-8", "replace").split("=", 1) for e in raw_env.split(b"\0") if b"=" in e)
        cmd = [c.decode("utf-8", "replace") for c in raw_cmd.split(b"\0") if c]
        script = cmd[1] if len(cmd) > 1 else ""
        is_supervisor = script.startswith(JOBS_DIR + "/") and script.endswith("/supervisor.py")
        owner = script[len(JOBS_DIR) + 1:].split("/")[0] if is_supervisor else env.get("GPUFLEET_JOB")
        if owner is None or (job is not None and owner != job):
            return None
        node = self.node_of(pid)
        if node is None:
            return None  # not on a test node (a job of the local inventory's tests, say)
        kind = "supervisor" if is_supervisor else ("worker" if "LOCAL_RANK" in env else "agent")
        return {"pid": pid, "node": node, "job": owner, "kind": kind, "rank": env.get("RANK"),
                "local_rank": env.get("LOCAL_RANK"), "cmd": " ".join(cmd)[:160]}

    def node_file(self, node: str, path: str) -> str | None:
        """A file of the node's, through its root file system; None when missing (or the node is down)."""
        pid = self._pids.get(node)
        content = _read("/proc/%d/root%s" % (pid, path)) if pid else None
        if content is None and pid:
            self.refresh()  # restarted since: a new init pid
            pid = self._pids.get(node)
            content = _read("/proc/%d/root%s" % (pid, path)) if pid else None
        return content if isinstance(content, str) else None

    def job_state(self, node: str, job: str) -> dict | None:
        raw = self.node_file(node, "%s/%s/state.json" % (JOBS_DIR, job))
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return None  # being written

    def step_lines(self, node: str, job: str) -> int:
        log = self.node_file(node, "%s/%s/job.log" % (JOBS_DIR, job)) or ""
        # A rank's line as the launcher tagged it ("[rank1|1]: step 3/40 ..." under torchrun): the tag does not count.
        return sum(1 for line in log.splitlines() if TAG.sub("", line).startswith("step "))

    def listening_ports(self, node: str) -> list[int]:
        """TCP ports the node listens on (its network namespace's /proc/net/tcp and tcp6)."""
        pid = self._pids.get(node)
        ports = set()
        for table in ("tcp", "tcp6"):
            content = _read("/proc/%d/net/%s" % (pid, table)) if pid else None
            for line in (content if isinstance(content, str) else "").splitlines()[1:]:
                fields = line.split()
                if len(fields) > 3 and fields[3] == "0A":  # LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        return sorted(ports)

    def describe(self, job: str, nodes: Iterable[str] | None = None, lines: int = 15) -> str:
        """What a test saw when it gave up: each node's job state, the job's processes, and log tails."""
        out = ["--- job %s as the nodes have it ---" % job]
        processes = self.processes(job)
        for node in nodes or self.containers:
            state = self.job_state(node, job)
            summary = {key: (state or {}).get(key) for key in
                       ("state", "attempt", "master_port", "stop_reason", "exit_code", "phase")} if state else None
            out.append("%s: state %s" % (node, json.dumps(summary)))
            for process in processes:
                if process["node"] == node:
                    out.append("  pid %(pid)d %(kind)s rank=%(rank)s local_rank=%(local_rank)s: %(cmd)s" % process)
            for name in ("supervisor.log", "job.log"):
                text = self.node_file(node, "%s/%s/%s" % (JOBS_DIR, job, name))
                tail = (text or "").splitlines()[-lines:]
                out.append("  %s (last %d lines):%s" % (name, len(tail), "".join("\n    " + t for t in tail)))
        return "\n".join(out)


def wait_until(predicate: Callable[[], object], timeout: float, what: str, step: float = 0.1,
               explain: Callable[[], str] | None = None, give_up: Callable[[], str | None] | None = None) -> object:
    """predicate()'s first true value; on time-out (or when give_up() names a reason) fail with explain()'s text."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        reason = give_up() if give_up else None
        if reason or time.monotonic() >= deadline:
            why = reason or "not met within %.0f s" % timeout
            raise AssertionError("%s: %s\n%s" % (what, why, explain() if explain else ""))
        time.sleep(step)
