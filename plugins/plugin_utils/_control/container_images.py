# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The container image of a job, on the controller: the settings checked, an image archive read, and whether every
node holds the same image.

An image is the same on two nodes when its ID is: the sha256 of the image's configuration, which
``docker image inspect`` and ``podman image inspect`` both print as ``.Id`` (Docker with ``sha256:`` in front),
whether the image was pulled or loaded from an archive. A ``docker save``/``podman save`` archive names that
configuration in its ``manifest.json``; its ID is computed here from the configuration's bytes, so a renamed
member cannot pass for another image.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tarfile
from collections import Counter
from typing import Any, Callable, Mapping, Sequence

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import containers
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control.plan import PlanError

PULL_POLICIES = ("missing", "always", "never")
# The resources docker run --ulimit and podman run --ulimit take (the names of setrlimit's RLIMIT_*).
ULIMIT_NAMES = ("core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice", "nofile", "nproc", "rss",
                "rtprio", "rttime", "sigpending", "stack")
# name=soft[:hard], each a number or -1 (unlimited).
ULIMIT_RE = re.compile(r"^(?P<name>[a-z]+)=-?[0-9]+(:-?[0-9]+)?$")
# host:container[:options]: a host path or a named volume, an absolute path inside, options such as ro,z.
VOLUME_RE = re.compile(r"^[^:\s]+:/[^:\s]*(:[A-Za-z]+(,[A-Za-z]+)*)?$")
# The list-valued container settings, each with the form of one item (None: any string).
SETTINGS = {"gpufleet_container_volumes": (VOLUME_RE, "host:container[:options], e.g. /data:/data:ro"),
            "gpufleet_container_ulimits": (ULIMIT_RE, "name=soft[:hard], e.g. memlock=-1:-1"),
            "gpufleet_container_run_args": (None, "")}


def image_id(value: Any) -> str:
    """An image ID as both engines print it, without the ``sha256:`` Docker puts in front; '' when there is none."""
    text = str(value or "").strip()
    text = text[len("sha256:"):] if text.startswith("sha256:") else text
    return text if containers.IMAGE_ID_RE.match(text) else ""


def read_archive(path: str) -> dict[str, Any]:
    """The image of a ``docker save``/``podman save`` archive: its ID and its tags. One image per archive."""
    try:
        with tarfile.open(path) as archive:
            manifest = json.loads(_member(archive, "manifest.json"))
            if not isinstance(manifest, list) or len(manifest) != 1 or not isinstance(manifest[0], dict):
                raise PlanError("container_image_archive: %s holds %s images; save exactly one image in it"
                                % (path, len(manifest) if isinstance(manifest, list) else "no list of"))
            config = _member(archive, str(manifest[0].get("Config") or ""))
    except (OSError, tarfile.TarError, ValueError, KeyError) as exc:
        raise PlanError("container_image_archive: %s is not an archive written by docker save or podman save (%s)"
                        % (path, exc)) from exc
    return {"image_id": hashlib.sha256(config).hexdigest(),
            "tags": [str(tag) for tag in manifest[0].get("RepoTags") or []]}


def _member(archive: tarfile.TarFile, name: str) -> bytes:
    extracted = archive.extractfile(name) if name else None
    if extracted is None:
        raise KeyError("no member %r" % name)
    return extracted.read()


def plan_container(image: Any, archive: Any, engine: Any, pull: Any) -> dict[str, Any] | None:
    """The job's container settings, checked; None without an image. With an archive, the image is the archive's
    (container_image, when given too, must be one of its tags)."""
    image = str(image or "").strip()
    archive = str(archive or "").strip()
    if not image and not archive:
        return None
    engine = str(engine or "docker")
    if containers.engine_kind(engine) not in containers.ENGINES:
        raise PlanError("container_engine: %r is not one of %s, or a path to one" % (engine, ", ".join(containers.ENGINES)))
    pull = str(pull or "missing")
    if pull not in PULL_POLICIES:
        raise PlanError("container_pull: %r is not one of %s" % (pull, ", ".join(PULL_POLICIES)))
    if image and not containers.IMAGE_REF_RE.match(image):
        raise PlanError("container_image: %r is not an image reference (e.g. nvcr.io/nvidia/pytorch:25.10-py3)" % image)
    planned: dict[str, Any] = {"engine": engine, "image": image, "pull": pull, "archive": None, "archive_image_id": None}
    if archive:
        path = os.path.abspath(os.path.expanduser(archive))
        if not os.path.isfile(path):
            raise PlanError("container_image_archive: %s is not a file on the controller" % path)
        found = read_archive(path)
        if image and image not in found["tags"] and image_id(image) != found["image_id"]:
            raise PlanError("container_image: %s is not in container_image_archive %s, which holds %s"
                            % (image, path, ", ".join(found["tags"]) or "an untagged image " + found["image_id"][:12]))
        planned.update(archive=path, archive_image_id=found["image_id"],
                       image=image or (found["tags"][0] if found["tags"] else found["image_id"]),
                       archive_size=os.path.getsize(path))
    # What the nodes look the image up by: an archive's image by its ID (its tags may name another image there).
    planned["lookup"] = planned["archive_image_id"] or planned["image"]
    return planned


def job_container(args: Mapping[str, Any], launcher: str, scheduler: str, hosts: Sequence[str],
                  read: Callable[[str, str], Any]) -> dict[str, Any] | None:
    """The container image every node's part of the job runs in (plan_container from job_plan's arguments), or
    None for a job on the host; refused for a launcher or scheduler that cannot run in one, or for a node's bad
    list-valued container settings (read(host, variable) gives the inventory's value)."""
    container = plan_container(args.get("container_image"), args.get("container_image_archive"),
                               args.get("container_engine"), args.get("container_pull"))
    if container is None:
        return None
    problem = containers.mode_problem(launcher, scheduler)
    if problem:
        raise PlanError(problem)
    check_settings(hosts, read)
    return container


def image_lookup(container: Mapping[str, Any] | None) -> str:
    """What each node's probe looks the job's image up by ('' for a job on the host: no engine is looked at)."""
    return str(container["lookup"]) if container else ""


def node_container(container: Mapping[str, Any] | None, engine: str, held: Any, gpus: bool, volumes: Any = None,
                   ulimits: Any = None, run_args: Any = None, check_mode: bool = False) -> dict[str, Any] | None:
    """One node's container as the launch module's ``container`` option takes it: the plan's image, the node's
    engine, the image ID it holds and its settings; None for a job on the host. In check mode an image still to
    be pulled has no ID yet: zeros stand in for it."""
    if not container:
        return None
    found = image_id(held) or ("0" * 64 if check_mode else "")
    return {"engine": str(engine), "image": str(container["image"]), "image_id": found, "gpus": bool(gpus),
            "volumes": list(volumes or []), "ulimits": list(ulimits or []), "run_args": list(run_args or [])}


def setting_list(host: str, variable: str, value: Any) -> list[str]:
    """One node's list-valued container setting, checked item by item; a string is refused, since Ansible would
    split it on commas (an INI inventory's [group:vars] keeps every value as a string)."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        looks = "a string that looks like a list" if value.strip().startswith("[") else "a string"
        raise PlanError("%s: %s=%r is %s, not a list; an INI inventory keeps [group:vars] values as strings: set it "
                        "as a YAML list in group_vars/<group>.yml or host_vars/%s.yml" % (host, variable, value, looks, host))
    if not isinstance(value, (list, tuple)):
        raise PlanError("%s: %s must be a list, got %r" % (host, variable, value))
    pattern, form = SETTINGS[variable]
    for item in value:
        if not isinstance(item, str):
            raise PlanError("%s: %s: %r is not a string" % (host, variable, item))
        matched = pattern.match(item) if pattern else True
        if not matched or (pattern is ULIMIT_RE and matched.group("name") not in ULIMIT_NAMES):
            raise PlanError("%s: %s: %r is not of the form %s" % (host, variable, item, form))
    return [str(item) for item in value]


def check_settings(hosts: Sequence[str], read: Any) -> None:
    """Every node's list-valued container settings (read(host, variable) gives the inventory's value)."""
    for host in hosts:
        for variable in SETTINGS:
            setting_list(host, variable, read(host, variable))


def disagreement(held: Mapping[str, Any], hosts: Sequence[str], image: str) -> str:
    """Why the nodes cannot run the job's image, naming the odd nodes, or '' when every node holds the same image.

    held maps each host to the image ID it holds for the job's image ('' or None where it has none). The ID most
    nodes hold is the job's; on a tie, node_rank 0's.
    """
    missing = [host for host in hosts if not image_id(held.get(host))]
    if missing:
        return "%s: container_image=%s is not on the node (set container_pull=missing or always, or give " \
               "container_image_archive)" % (", ".join(missing), image)
    ids = [image_id(held[host]) for host in hosts]
    counts = Counter(ids)
    if len(counts) == 1:
        return ""
    top = max(counts.values())
    chosen = ids[0] if counts[ids[0]] == top else next(i for i in ids if counts[i] == top)
    odd = ["%s (%s)" % (host, found[:12]) for host, found in zip(hosts, ids) if found != chosen]
    return ("container_image=%s differs between the nodes: %s hold%s another image than the %s the others hold; "
            "pull or load the same image on every node (container_pull=always pulls it again)"
            % (image, ", ".join(odd), "s" if len(odd) == 1 else "", chosen[:12]))
