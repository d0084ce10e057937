# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One node's part of a job inside a container image: the engine command lines, and ending the container.

With a container image, each node's ``launch.sh`` starts with a block that runs the same script again inside one
container (``run_argv``): host network and IPC namespace, unlimited locked memory, the GPUs (CDI with Podman,
``--gpus all`` with Docker), the InfiniBand devices where the node has them, the job folder and the working
directory mounted at the same paths, and only the run's own variables passed by name (``--env NAME``: the value
comes from the supervisor's environment, not from the command line). The job's environment and its secret file
are sourced from the mounted job folder inside the container, so no value of the job's environment is in the
container's configuration (what ``docker inspect`` shows). Labels carry the run token and the job folder.

The supervisor owns the container: a stop ends it through the engine (``engine stop --time GRACE NAME``), never
by process name; after each attempt ``engine rm --force NAME`` removes what is left, and the run-token sweep of
/proc stays the second line (the container's processes carry the run token too). A stop that finds the supervisor
gone removes every container labelled with the job folder.

Shipped to the nodes as part of the supervisor (supervisor_bundle); standard library only, Python 3.8+.
"""

from __future__ import annotations

import math
import re
import shlex
import shutil
import subprocess
from typing import Callable

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_states import (
    LAUNCH_FILE,
    PLACE_VARS,
    RUN_ID_VAR,
    SINGLE_ENTRY,
    TOKEN_VAR,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.schedulers import scheduler_of
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.stop_notice import STOP_FILE_VAR, STOP_GRACE_VAR

ENGINES = ("docker", "podman")
LABEL_TOKEN = "gpufleet.run_token"
LABEL_JOB_DIR = "gpufleet.job_dir"
# Set inside the container: launch.sh then skips its container block and runs the launcher.
IN_CONTAINER_VAR = "GPUFLEET_IN_CONTAINER"
# The only variables handed to the container, by name: the run's identity, the attempt's port and place, and where
# the ranks hear of a stop (stop_notice.py; the job folder is mounted at its own path).
PASSED_VARS = (RUN_ID_VAR, TOKEN_VAR, "GPUFLEET_MASTER_PORT", "GPUFLEET_ATTEMPT", "GPUFLEET_RESTART_REASON",
               *PLACE_VARS, STOP_FILE_VAR, STOP_GRACE_VAR)
# NVIDIA's recommended limits for deep learning containers: unlimited locked memory (RDMA registration) and a
# 64 MiB stack.
DEFAULT_ULIMITS = ("memlock=-1:-1", "stack=67108864:67108864")
INFINIBAND_DIR = "/dev/infiniband"
# Seconds an engine command that removes or lists containers may take.
ENGINE_TIMEOUT_S = 60.0
# An image reference as docker and podman take it (registry/name:tag@digest), or an image ID.
IMAGE_REF_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}$")
IMAGE_ID_RE = re.compile(r"^(sha256:)?[0-9a-f]{64}$")


def launch_problem(params: dict) -> str:
    """Why a launch with these container settings cannot be done, or ''. job_plan (controller) and the launch
    module (node) share it."""
    engine = params.get("container_engine") or ""
    if not engine:
        return ""
    if engine_kind(engine) not in ENGINES:
        return "container_engine: %r is not one of %s (or a path to one)" % (engine, ", ".join(ENGINES))
    image_id = str(params.get("container_image_id") or "")
    if not IMAGE_ID_RE.match(image_id):
        return "container_image_id: %r is not an image ID (sha256:<64 hex digits>)" % image_id
    return mode_problem(str(params.get("launcher") or ""), str(params.get("scheduler") or ""))


def mode_problem(launcher: str, scheduler: str) -> str:
    """Why a job with this launcher and scheduler cannot run in containers yet, or ''."""
    if launcher in SINGLE_ENTRY:
        return ("launcher=%s does not run inside containers yet (its entry command on node 0 would start the other "
                "nodes' ranks outside theirs); use torchrun, deepspeed or none with container_image" % launcher)
    return scheduler_of(scheduler).container_problem()


def container_facts(engine: str, image: str, which: Callable[[str], str | None] = shutil.which,
                    run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> dict:
    """Whether the container engine is on the node and which image ID it holds for image ('' when none): the
    image's .Id as both engines print it (Docker with sha256: in front)."""
    path = which(engine)
    facts = {"engine": engine, "path": path or "", "image": image, "image_id": "", "error": ""}
    if not path:
        facts["error"] = "%s is not on the node's PATH (provision.yml with container_runtime_enabled=true installs it)" % engine
        return facts
    try:
        done = run([path, "image", "inspect", "--format", "{{.Id}}", image], capture_output=True, text=True,
                   timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        facts["error"] = "%s image inspect did not answer: %s" % (engine, exc)
        return facts
    if done.returncode == 0 and done.stdout.strip():
        facts["image_id"] = done.stdout.strip().splitlines()[0]
    elif not re.search(r"no such|not known|unknown|not found", done.stderr, re.I):
        # Not "the image is absent": the engine itself did not answer (a Docker daemon down, no permission).
        facts["error"] = "%s image inspect failed: %s" % (engine, done.stderr.strip()[-300:])
    return facts


def container_name(job: str, node_rank: int, run_id: str) -> str:
    """The container's name: job, node rank and run, so that a container left by an earlier run never blocks one."""
    return "gpufleet-%s-n%d-%s" % (job, int(node_rank), str(run_id)[:12])


def engine_kind(engine: str) -> str:
    """docker or podman: the engine is one of them by name, or a path to one (a wrapper, a build of one's own)."""
    return str(engine).rstrip("/").rsplit("/", 1)[-1]


def gpu_args(engine: str, gpus: bool) -> list[str]:
    """Every GPU of the node: CDI's device name with Podman (nvidia-ctk cdi generate), the NVIDIA runtime hook with
    Docker (nvidia-ctk runtime configure --runtime=docker)."""
    if not gpus:
        return []
    return ["--gpus", "all"] if engine_kind(engine) == "docker" else ["--device", "nvidia.com/gpu=all"]


def container_common_args(spec: dict) -> list[str]:
    """What every container of the job gets, the launch's and the preflight's check alike."""
    args = ["--network", "host", "--ipc", "host", "--init"]
    for ulimit in spec.get("container_ulimits") or DEFAULT_ULIMITS:
        args += ["--ulimit", str(ulimit)]
    args += gpu_args(str(spec["container_engine"]), bool(spec.get("container_gpus")))
    for volume in spec.get("container_volumes") or ():
        args += ["--volume", str(volume)]
    return args + [str(arg) for arg in spec.get("container_run_args") or ()]


def container_mounts(spec: dict, job_dir: str) -> list[str]:
    """The job folder, and the working directory and the script's folder where they are outside it, each at the
    same path inside the container."""
    paths = [job_dir]
    for path in (str(spec.get("workdir") or ""), _script_dir(spec)):
        if path and not any(path == kept or path.startswith(kept.rstrip("/") + "/") for kept in paths):
            paths.append(path)
    args: list[str] = []
    for path in paths:
        args += ["--volume", "%s:%s" % (path, path)]
    return args


def _script_dir(spec: dict) -> str:
    script = str(spec.get("script") or "")
    return script.rsplit("/", 1)[0] if script.startswith("/") and "/" in script[1:] else ""


def container_of(spec: dict) -> str:
    """The container of the run a job.json (which has the run id) describes."""
    return container_name(str(spec["job"]), int(spec["node_rank"]), str(spec["run_id"]))


def run_argv(spec: dict, job_dir: str, name: str, token: str) -> list[str]:
    """``engine run`` of this node's part, up to and including the command run inside (launch.sh again)."""
    engine = str(spec["container_engine"])
    argv = [engine, "run", "--rm", "--name", name,
            "--label", "%s=%s" % (LABEL_TOKEN, token), "--label", "%s=%s" % (LABEL_JOB_DIR, job_dir)]
    argv += container_common_args(spec) + container_mounts(spec, job_dir) + ["--workdir", str(spec.get("workdir") or job_dir)]
    argv += ["--env", "%s=1" % IN_CONTAINER_VAR]
    for name in PASSED_VARS:
        argv += ["--env", name]
    return argv + [str(spec["container_image_id"]), "/bin/bash", "%s/%s" % (job_dir, LAUNCH_FILE)]


def check_argv(spec: dict, python: str, needs_torch: bool) -> list[str]:
    """A throw-away container with the job's settings that says whether the image runs here and has the Python
    (and torch) the job needs: the preflight runs it on every node before anything is launched."""
    probe = 'command -v "$1" >/dev/null || { echo "$1 is not in the image" >&2; exit 3; }'
    if needs_torch:
        probe += '; "$1" -c "import torch" || { echo "$1 in the image cannot import torch" >&2; exit 4; }'
    return ([str(spec["container_engine"]), "run", "--rm"] + container_common_args(spec)
            + [str(spec["container_image_id"]), "/bin/bash", "-c", probe, "gpufleet-check", python])


def stop_argv(engine: str, name: str, grace_s: float) -> list[str]:
    """SIGTERM to the container's init (which passes it on to the launcher), SIGKILL after the grace period."""
    return [engine, "stop", "--time", str(max(1, int(math.ceil(grace_s)))), name]


def remove_argv(engine: str, name: str) -> list[str]:
    return [engine, "rm", "--force", name]


def list_argv(engine: str, job_dir: str) -> list[str]:
    """Every container of the job folder's runs, running or not."""
    return [engine, "ps", "--all", "--quiet", "--filter", "label=%s=%s" % (LABEL_JOB_DIR, job_dir)]


def _run_engine(argv: list[str]) -> tuple[int, str]:
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=ENGINE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return done.returncode, done.stdout.decode(errors="replace")


def begin_container_stop(spec: dict) -> subprocess.Popen | None:
    """Begin ending this run's container through the engine; the caller keeps supervising while it ends."""
    try:
        return subprocess.Popen(  # pylint: disable=consider-using-with
            stop_argv(str(spec["container_engine"]), container_of(spec), float(spec.get("grace_s") or 5)),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)
    except OSError:
        return None


def remove_container(spec: dict) -> None:
    """Remove this run's container if anything of it is left (the engine says nothing is when it is gone)."""
    _run_engine(remove_argv(str(spec["container_engine"]), container_of(spec)))


def end_attempt_container(spec: dict, engine_stop: subprocess.Popen | None) -> None:
    """After an attempt's engine client is gone: the container, if anything of it is left, is removed through the
    engine, and a stop begun through the engine is waited for (killed when the engine does not answer, which must
    not hold the supervisor). Nothing without a container image."""
    if not spec.get("container_engine"):
        return
    remove_container(spec)
    if engine_stop is not None:
        try:
            engine_stop.wait(ENGINE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            engine_stop.kill()
            engine_stop.wait()


def container_leftovers(spec: dict, job_dir: str) -> list[str]:
    """IDs of the containers of this job folder (any run) that the engine still has."""
    if not spec.get("container_engine"):
        return []
    rc, out = _run_engine(list_argv(str(spec["container_engine"]), job_dir))
    return out.split() if rc == 0 else []


def remove_container_leftovers(spec: dict, job_dir: str) -> list[str]:
    """Remove every container of this job folder; return the IDs removed."""
    found = container_leftovers(spec, job_dir)
    for container in found:
        _run_engine(remove_argv(str(spec["container_engine"]), container))
    return found


# Stand-ins in run_argv for what launch.sh fills in from the supervisor's environment when it runs: the script is
# the same for every run of an unchanged spec.
_RUN_SLOT, _TOKEN_SLOT = "@RUN@", "@TOKEN@"


def render_block(spec: dict, job_dir: str, env_files: list[str]) -> str:
    """The shell lines at the top of launch.sh that run the rest of it inside the container."""
    name = container_name(str(spec["job"]), int(spec["node_rank"]), _RUN_SLOT)
    argv = run_argv(spec, job_dir, name, _TOKEN_SLOT)
    image = argv.index(str(spec["container_image_id"]))
    extra = "".join("if [ -r %s ]; then extra+=(--volume %s); fi\n"
                    % (shlex.quote(path), shlex.quote("%s:%s:ro" % (path, path))) for path in env_files)
    return (
        "if [ -z \"${%(var)s:-}\" ]; then\n"
        "# This node's part runs in container %(name)s (image %(image)s): this same script, inside it.\n"
        "extra=()\n"
        "%(extra)s"
        "if [ -d %(ib)s ]; then extra+=(--device %(ib)s); fi\n"
        "exec %(head)s ${extra[@]+\"${extra[@]}\"} %(tail)s\n"
        "fi\n"
    ) % {
        "var": IN_CONTAINER_VAR,
        "name": container_name(str(spec["job"]), int(spec["node_rank"]), "<run>"),
        "image": spec.get("container_image") or spec["container_image_id"],
        "extra": extra,
        "ib": INFINIBAND_DIR,
        "head": " ".join(shlex.quote(arg) for arg in argv[:image]).replace(_RUN_SLOT, "${%s:0:12}" % RUN_ID_VAR)
                .replace(_TOKEN_SLOT, "$" + TOKEN_VAR),
        "tail": " ".join(shlex.quote(arg) for arg in argv[image:]),
    }
