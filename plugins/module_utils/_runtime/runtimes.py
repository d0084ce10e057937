# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What differs, on the node's side, between running a node's part on the host and inside a container image:
one class each, chosen once from the job's spec by ``runtime_of(spec)``.

On the host the run's processes are the node's own, and ending them is signalling the processes that carry the
run's token (job_processes.py). In a container (containers.py has the engine's commands) launch.sh first runs
itself inside one container, the supervisor records which, a stop goes through the engine (``stop``, then
``rm --force``), and a stop of the job also removes the containers of its folder that outlived their supervisor.
The launch script, the supervisor, an attempt and the stop ask the runtime; none of them looks at the container
settings itself (a unit test fails where one does).

Part of the shipped supervisor (supervisor_bundle.py): standard library only, Python 3.8.
"""

from __future__ import annotations

import subprocess

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.containers import (
    begin_container_stop,
    container_facts,
    container_leftovers,
    container_of,
    end_attempt_container,
    remove_container_leftovers,
    render_block,
)


class HostRuntime:
    """The node's part runs on the host: nothing to wrap, nothing but its processes to end."""

    name = "host"
    # Whether the training Python, torch and the launcher are the node's own, so that the node's probe checks them;
    # in a container they are the image's, checked by starting the image once (roles/job/tasks/train/image.yml).
    runs_node_python = True

    def probe(self, engine: str, image: str) -> dict:  # pylint: disable=unused-argument
        """What the node's probe reports of the runtime (node_probe's container): nothing on the host."""
        return {}

    def launch_block(self, spec: dict, job_dir: str, env_files: list[str]) -> str:  # pylint: disable=unused-argument
        """The shell lines at the top of launch.sh that run the rest of it elsewhere ('' on the host)."""
        return ""

    def state_fields(self, spec: dict) -> dict:  # pylint: disable=unused-argument
        """What the supervisor records in state.json about where the run runs."""
        return {}

    def begin_stop(self, spec: dict) -> subprocess.Popen | None:  # pylint: disable=unused-argument
        """Begin ending the run through its runtime; None when the caller signals the run's processes itself."""
        return None

    def end_attempt(self, spec: dict, stopping: subprocess.Popen | None) -> None:
        """After an attempt's launcher is gone: end what the runtime holds of it."""

    def leftovers(self, spec: dict, job_dir: str) -> list[str]:  # pylint: disable=unused-argument
        """What the runtime still holds of any run of this job folder."""
        return []

    def remove_leftovers(self, spec: dict, job_dir: str) -> dict:  # pylint: disable=unused-argument
        """End what the runtime still holds of any run of this job folder; what the stop reports of it."""
        return {}


class ContainerRuntime(HostRuntime):
    """The node's part runs inside one container of the job's image (containers.py)."""

    name = "container"
    runs_node_python = False

    def probe(self, engine: str, image: str) -> dict:
        return container_facts(engine, image)

    def launch_block(self, spec: dict, job_dir: str, env_files: list[str]) -> str:
        return render_block(spec, job_dir, env_files)

    def state_fields(self, spec: dict) -> dict:
        return {"container": container_of(spec), "image": spec.get("container_image"),
                "image_id": spec.get("container_image_id")}

    def begin_stop(self, spec: dict) -> subprocess.Popen | None:
        return begin_container_stop(spec)

    def end_attempt(self, spec: dict, stopping: subprocess.Popen | None) -> None:
        end_attempt_container(spec, stopping)

    def leftovers(self, spec: dict, job_dir: str) -> list[str]:
        return container_leftovers(spec, job_dir)

    def remove_leftovers(self, spec: dict, job_dir: str) -> dict:
        return {"containers_removed": remove_container_leftovers(spec, job_dir)}


def runtime_of(spec: dict) -> HostRuntime:
    """The runtime of a job's spec (JobSpec.as_dict() or the spec.json read back): a container engine set is a
    container; none is the host."""
    return runtime_for(spec.get("container_engine"))


def runtime_for(container: object) -> HostRuntime:
    """The runtime of a job with these container settings (an engine, an image, or the plan's container; empty: the
    host)."""
    return ContainerRuntime() if container else HostRuntime()
