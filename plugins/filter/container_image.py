# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters gpufleet.cluster.image_id, image_disagreement, node_container and container_check_argv: a job's container
image."""

from __future__ import annotations

from typing import Any, Mapping

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import launch_options
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import containers
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import container_images

DOCUMENTATION = r"""
name: container_image
short_description: A job's container image - its ID, whether the nodes agree, a node's container, the preflight's check
version_added: 0.1.0
description:
  - C(image_id) returns an image ID as both engines print it, without Docker's C(sha256:) in front, or an empty
    string when its input is not one.
  - C(image_disagreement) reads the image ID each node holds (in the order of O(hosts)) and returns why the job
    cannot run, naming the nodes that lack the image or hold another image under the same name; empty when every
    node holds the same image.
  - C(node_container) returns one node's container as the launch module's C(container) option takes it (the
    plan's image, the node's engine, the image ID the node holds, its settings), or null for a job on the host.
  - C(container_check_argv) returns the argument list of a throw-away container with the job's settings that
    looks for the training Python (and torch) in the image.
options:
  _input:
    description: For C(image_id), an image ID; for C(image_disagreement), the image IDs the nodes hold, in the
      order of O(hosts); for C(node_container), the plan's container (job_plan's C(container)), or null; for
      C(container_check_argv), the node's container (C(node_container)'s result), or its engine with the
      settings as the options below.
    type: raw
    required: true
  engine:
    description: (node_container) The node's container engine.
    type: str
  held:
    description: (node_container) The image ID the node holds for the image.
    type: str
  check_mode:
    description: (node_container) Whether the play runs in check mode, where an image still to be pulled has no ID
      yet and zeros stand in for it.
    type: bool
    default: false
  hosts:
    description: (image_disagreement) The job's hosts, in rank order.
    type: list
    elements: str
  image:
    description: (image_disagreement) The image as the user named it, for the message.
    type: str
  image_id:
    description: (container_check_argv) The image ID the node holds.
    type: str
  gpus:
    description: (node_container, container_check_argv) Whether the container gets the node's GPUs.
    type: bool
  volumes:
    description: (node_container, container_check_argv) More C(--volume) arguments.
    type: list
    elements: str
  ulimits:
    description: (node_container, container_check_argv) The C(--ulimit) arguments; empty is NVIDIA's recommended ones.
    type: list
    elements: str
  run_args:
    description: (node_container, container_check_argv) More arguments of the engine's C(run).
    type: list
    elements: str
  python:
    description: (container_check_argv) The training Python inside the image.
    type: str
  needs_torch:
    description: (container_check_argv) Whether the Python must import torch.
    type: bool
"""

EXAMPLES = r"""
- name: Refuse to launch unless every node holds the same image
  ansible.builtin.assert:
    that: (__held | gpufleet.cluster.image_disagreement(['node0', 'node1'], 'train:1')) == ''
"""

RETURN = r"""
_value:
  description: The image ID (image_id), the problem or an empty string (image_disagreement), a node's container or
    null (node_container), an argument list (container_check_argv).
  type: raw
"""


def image_id(value: Any) -> str:
    return container_images.image_id(value)


def image_disagreement(held: list[Any], hosts: list[str], image: str = "") -> str:
    return container_images.disagreement(dict(zip(hosts, held)), list(hosts), str(image))


def node_container(container: Any, engine: str = "docker", held: Any = "", gpus: bool = False, volumes: Any = None,
                   ulimits: Any = None, run_args: Any = None, check_mode: bool = False) -> dict | None:
    return container_images.node_container(container, engine, held, gpus, volumes, ulimits, run_args, check_mode)


def container_check_argv(container: Any, image_id: str = "", gpus: bool = False, volumes: Any = None,
                         ulimits: Any = None, run_args: Any = None, python: str = "python3",
                         needs_torch: bool = True) -> list[str]:
    if not isinstance(container, Mapping):
        # The engine, with the settings as keyword arguments (the form before node_container).
        container = {"engine": container, "image_id": image_id, "gpus": gpus, "volumes": volumes,
                     "ulimits": ulimits, "run_args": run_args}
    # The container's settings under the JobSpec names, as the launch module reads its own container option.
    return containers.check_argv(launch_options.flat({"container": container}), str(python), bool(needs_torch))


class FilterModule:
    """gpufleet.cluster filters."""

    def filters(self) -> dict:
        return {"image_id": image_id, "image_disagreement": image_disagreement, "node_container": node_container,
                "container_check_argv": container_check_argv}
