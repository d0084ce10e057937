"""A job's container image on the controller: an archive read (its image ID computed from the configuration's
bytes), the settings checked, and whether the nodes hold the same image (naming the odd node)."""

import hashlib
import io
import json
import subprocess
import tarfile

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import containers
from ansible_collections.gpufleet.cluster.plugins.filter import container_image
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import container_images
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._postmortem import report
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control.plan import PlanError

CONFIG = b'{"architecture": "amd64", "config": {"Env": ["PATH=/opt/train/bin:/usr/bin"]}}'
CONFIG_ID = hashlib.sha256(CONFIG).hexdigest()
OTHER_ID = "b" * 64


def save_archive(path, manifest, members=None):
    """An archive laid out as docker save and podman save write one (manifest.json, the configuration, layers)."""
    with tarfile.open(path, "w") as archive:
        for name, data in (members or {"%s.json" % CONFIG_ID: CONFIG}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        data = json.dumps(manifest).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return str(path)


def test_an_archive_gives_its_image_id_and_tags(tmp_path):
    path = save_archive(tmp_path / "train.tar", [{"Config": "%s.json" % CONFIG_ID, "RepoTags": ["localhost/train:1"],
                                                  "Layers": []}])
    assert container_images.read_archive(path) == {"image_id": CONFIG_ID, "tags": ["localhost/train:1"]}


def test_the_id_is_the_configurations_digest_whatever_the_member_is_called(tmp_path):
    path = save_archive(tmp_path / "renamed.tar", [{"Config": "blobs/sha256/%s" % OTHER_ID, "RepoTags": []}],
                        {"blobs/sha256/%s" % OTHER_ID: CONFIG})
    assert container_images.read_archive(path)["image_id"] == CONFIG_ID


@pytest.mark.parametrize("manifest, message", [
    ([], "holds 0 images; save exactly one image"),
    ([{"Config": "%s.json" % CONFIG_ID}, {"Config": "%s.json" % CONFIG_ID}], "holds 2 images"),
    ([{"Config": "missing.json"}], "is not an archive written by docker save or podman save"),
])
def test_archives_that_are_not_one_image_are_refused(tmp_path, manifest, message):
    with pytest.raises(PlanError, match="container_image_archive: .*" + message):
        container_images.read_archive(save_archive(tmp_path / "bad.tar", manifest))


def test_a_file_that_is_no_archive_is_refused(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not a tar")
    with pytest.raises(PlanError, match="is not an archive written by docker save or podman save"):
        container_images.read_archive(str(path))


def test_the_plan_with_an_archive_takes_its_image_and_refuses_a_tag_it_does_not_hold(tmp_path):
    path = save_archive(tmp_path / "train.tar", [{"Config": "%s.json" % CONFIG_ID, "RepoTags": ["localhost/train:1"]}])
    planned = container_images.plan_container("", path, "podman", None)
    assert planned["image"] == "localhost/train:1" and planned["archive_image_id"] == CONFIG_ID
    assert planned["archive"] == path and planned["engine"] == "podman" and planned["pull"] == "missing"
    with pytest.raises(PlanError, match=r"container_image: localhost/other:2 is not in container_image_archive .*"
                                        r"which holds localhost/train:1"):
        container_images.plan_container("localhost/other:2", path, "podman", None)


@pytest.mark.parametrize("args, message", [
    (("train:1", "", "lxc", None), "container_engine: 'lxc' is not one of docker, podman"),
    (("train:1", "", "docker", "sometimes"), "container_pull: 'sometimes' is not one of missing, always, never"),
    (("train 1", "", "docker", None), "container_image: 'train 1' is not an image reference"),
    (("", "/nowhere/train.tar", "docker", None), "container_image_archive: /nowhere/train.tar is not a file"),
])
def test_bad_settings_are_refused_naming_the_variable(args, message):
    with pytest.raises(PlanError, match=message):
        container_images.plan_container(*args)


def test_no_image_is_no_container():
    assert container_images.plan_container("", "", "docker", None) is None


def test_the_job_container_is_refused_for_a_mode_that_cannot_run_in_one_and_checks_every_node():
    args = {"container_image": "train:1", "container_engine": "podman", "container_pull": "never"}
    asked = []

    def read(host, variable):
        asked.append(host)
        return None

    planned = container_images.job_container(args, "torchrun", "ssh", ["node0", "node1"], read)
    assert planned["image"] == planned["lookup"] == "train:1" and planned["pull"] == "never"
    assert sorted(set(asked)) == ["node0", "node1"]
    assert container_images.image_lookup(planned) == "train:1"
    with pytest.raises(PlanError, match="launcher=mpirun does not run inside containers yet"):
        container_images.job_container(args, "mpirun", "ssh", ["node0"], read)
    with pytest.raises(PlanError, match="scheduler=slurm"):
        container_images.job_container(args, "torchrun", "slurm", ["node0"], read)
    # Without an image: no container, nothing refused or read, and the probe looks at no engine.
    asked.clear()
    assert container_images.job_container({"container_engine": "podman"}, "mpirun", "slurm", ["node0"], read) is None
    assert asked == [] and container_images.image_lookup(None) == ""


def test_a_node_container_is_what_the_launch_takes_and_none_on_the_host():
    planned = container_images.plan_container("train:1", "", "podman", None)
    node = container_images.node_container(planned, "docker", "sha256:" + CONFIG_ID, True, ["/data:/data"],
                                           None, ["--shm-size=1g"])
    assert node == {"engine": "docker", "image": "train:1", "image_id": CONFIG_ID, "gpus": True,
                    "volumes": ["/data:/data"], "ulimits": [], "run_args": ["--shm-size=1g"]}
    # In check mode an image still to be pulled has no ID yet: zeros stand in; a real run keeps the empty ID, which
    # the launch refuses.
    assert container_images.node_container(planned, "podman", "", False, check_mode=True)["image_id"] == "0" * 64
    assert container_images.node_container(planned, "podman", "", False)["image_id"] == ""
    assert container_images.node_container(None, "podman", CONFIG_ID, True) is None
    # The preflight's check starts the same container as the launch: the filter takes the node's container.
    argv = container_image.container_check_argv(node, python="/venv/bin/python")
    assert argv == container_image.container_check_argv(
        "docker", CONFIG_ID, gpus=True, volumes=["/data:/data"], run_args=["--shm-size=1g"], python="/venv/bin/python")
    assert argv[0] == "docker" and CONFIG_ID in argv and "/data:/data" in argv and "--shm-size=1g" in argv


def test_every_node_holding_the_same_id_agrees_docker_prefix_or_not():
    held = {"node0": "sha256:" + CONFIG_ID, "node1": CONFIG_ID}
    assert container_images.disagreement(held, ["node0", "node1"], "train:1") == ""


def test_the_odd_node_is_named():
    held = {"n0": CONFIG_ID, "n1": CONFIG_ID, "n2": OTHER_ID}
    message = container_images.disagreement(held, ["n0", "n1", "n2"], "train:1")
    assert message.startswith("container_image=train:1 differs between the nodes: n2 (bbbbbbbbbbbb) holds another "
                              "image than the %s the others hold" % CONFIG_ID[:12])
    # Two nodes, two images: node_rank 0's counts as the job's.
    assert "node1 (bbbbbbbbbbbb) holds" in container_images.disagreement(
        {"node0": CONFIG_ID, "node1": OTHER_ID}, ["node0", "node1"], "train:1")


def test_nodes_without_the_image_are_named_first():
    message = container_images.disagreement({"n0": CONFIG_ID, "n1": "", "n2": None}, ["n0", "n1", "n2"], "train:1")
    assert message.startswith("n1, n2: container_image=train:1 is not on the node")


def test_the_node_probe_reads_the_image_id_and_tells_an_absent_image_from_an_engine_that_does_not_answer():
    def run(stdout="", stderr="", returncode=0):
        return lambda cmd, **_kw: subprocess.CompletedProcess(cmd, returncode, stdout=stdout, stderr=stderr)
    which = {"podman": "/usr/bin/podman"}.get
    facts = containers.container_facts("podman", "train:1", which, run(stdout=CONFIG_ID + "\n"))
    assert facts["image_id"] == CONFIG_ID and facts["error"] == "" and facts["path"] == "/usr/bin/podman"
    facts = containers.container_facts("podman", "train:1", which, run(stderr="Error: train:1: image not known", returncode=125))
    assert facts["image_id"] == "" and facts["error"] == ""
    facts = containers.container_facts("docker", "t", {"docker": "/usr/bin/docker"}.get, run(
        stderr="Cannot connect to the Docker daemon at unix:///var/run/docker.sock", returncode=1))
    assert "docker image inspect failed: Cannot connect to the Docker daemon" in facts["error"]
    assert "is not on the node's PATH" in containers.container_facts("docker", "t", lambda _name: None)["error"]


def test_the_report_names_the_container_and_its_exit_code_and_shows_image_columns():
    failed = {"host": "node1", "node_rank": 1, "state": "failed", "exit_code": 1, "first_exit_at": 10.0,
              "container": "gpufleet-j-n1-0123456789ab", "image": "localhost/train:1", "image_id": CONFIG_ID,
              "root_cause": {"rank": 2, "local_rank": 0, "exit_code": 1}}
    stopped = {"host": "node0", "node_rank": 0, "state": "stopped", "exit_code": 1, "stopped_for": "node1",
               "container": "gpufleet-j-n0-0123456789ab", "image": "localhost/train:1", "image_id": CONFIG_ID}
    message = report.failure_message("j", [stopped, failed])
    assert message.startswith("job j failed on node1 (node_rank 1): global rank 2 (local rank 0) exited with code 1; "
                              "container gpufleet-j-n1-0123456789ab (image localhost/train:1) exited with code 1; "
                              "stopped on the other nodes: node0.")
    bare = dict(failed, root_cause=None, exit_code=125)
    assert "node1 (node_rank 1): container gpufleet-j-n1-0123456789ab (image localhost/train:1) exited with code 125" \
        in report.failure_message("j", [bare])
    header, _rule, row = report.format_table([failed]).splitlines()
    assert header.split()[-3:] == ["image", "container", "log"]
    assert "localhost/train:1 (%s)  gpufleet-j-n1-0123456789ab" % CONFIG_ID[:12] in row


@pytest.mark.parametrize("variable, value, expected", [
    ("gpufleet_container_ulimits", ["memlock=-1:-1", "stack=67108864", "nofile=20000:20000"],
     ["memlock=-1:-1", "stack=67108864", "nofile=20000:20000"]),
    ("gpufleet_container_volumes", ["/data:/data:ro", "cache:/root/.cache", "/scratch:/scratch:rw,z"],
     ["/data:/data:ro", "cache:/root/.cache", "/scratch:/scratch:rw,z"]),
    ("gpufleet_container_run_args", ["--shm-size=16g", "--user", "1000:1000"], ["--shm-size=16g", "--user", "1000:1000"]),
    ("gpufleet_container_ulimits", None, []),
    ("gpufleet_container_volumes", "", []),
])
def test_container_setting_lists_pass(variable, value, expected):
    assert container_images.setting_list("node0", variable, value) == expected


@pytest.mark.parametrize("variable, value, message", [
    # What an INI inventory's [gpu_nodes:vars] gives: the whole list as one string (Ansible would split it on commas).
    ("gpufleet_container_ulimits", '["memlock=8192:8192", "nofile=20000:20000"]',
     "node1: gpufleet_container_ulimits='[\"memlock=8192:8192\", \"nofile=20000:20000\"]' is a string that looks "
     "like a list, not a list; an INI inventory keeps [group:vars] values as strings: set it as a YAML list in "
     "group_vars/<group>.yml or host_vars/node1.yml"),
    ("gpufleet_container_volumes", "/data:/data", "node1: gpufleet_container_volumes='/data:/data' is a string, not a list"),
    ("gpufleet_container_run_args", {"a": 1}, "node1: gpufleet_container_run_args must be a list, got {'a': 1}"),
    ("gpufleet_container_ulimits", ["memlock"], "node1: gpufleet_container_ulimits: 'memlock' is not of the form name=soft[:hard]"),
    ("gpufleet_container_ulimits", ["memlock=lots"], "'memlock=lots' is not of the form name=soft[:hard]"),
    ("gpufleet_container_ulimits", ["memlocks=1:1"], "'memlocks=1:1' is not of the form name=soft[:hard]"),
    ("gpufleet_container_ulimits", ['["memlock=8192:8192"'], "'[\"memlock=8192:8192\"' is not of the form"),
    ("gpufleet_container_volumes", ["/data"], "node1: gpufleet_container_volumes: '/data' is not of the form host:container[:options]"),
    ("gpufleet_container_volumes", ["/data:data"], "'/data:data' is not of the form host:container[:options]"),
    ("gpufleet_container_volumes", ["/data:/data:ro:z"], "'/data:/data:ro:z' is not of the form"),
    ("gpufleet_container_run_args", [1], "node1: gpufleet_container_run_args: 1 is not a string"),
])
def test_container_setting_lists_refused(variable, value, message):
    with pytest.raises(PlanError) as raised:
        container_images.setting_list("node1", variable, value)
    assert message in str(raised.value)


def test_every_node_and_setting_is_checked():
    values = {("node1", "gpufleet_container_volumes"): ["bad"]}
    asked = []

    def read(host, variable):
        asked.append((host, variable))
        return values.get((host, variable))

    with pytest.raises(PlanError, match="node1: gpufleet_container_volumes: 'bad'"):
        container_images.check_settings(["node0", "node1"], read)
    assert ("node0", "gpufleet_container_run_args") in asked and ("node1", "gpufleet_container_volumes") in asked
