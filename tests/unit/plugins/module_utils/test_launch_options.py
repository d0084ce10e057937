"""The launch module's one argument spec: held to its doc fragment and to JobSpec's fields; the grouped options
spread onto JobSpec; every check made before anything is written. (The 25-option bound: test_code_shape.py.)"""

import dataclasses

import pytest
import yaml

from ansible_collections.gpufleet.cluster.plugins.doc_fragments import job_folder, launch_options as fragment
from ansible_collections.gpufleet.cluster.plugins.module_utils._job import launch_options
from ansible_collections.gpufleet.cluster.plugins.module_utils._job.job_spec import JobSpec

# JobSpec fields no option names: each is derived from one (the sha256s of the inputs kept out of the spec).
DERIVED = {"script_sha256": "script_content", "secret_env_sha256": "secret_env"}
IMAGE_ID = "sha256:" + "ab" * 32


def _documented() -> dict:
    options = dict(yaml.safe_load(fragment.ModuleDocFragment.DOCUMENTATION)["options"])
    options.update(yaml.safe_load(job_folder.ModuleDocFragment.DOCUMENTATION)["options"])
    return options


def _same_option(name: str, spec: dict, doc: dict) -> list[str]:
    """Where one option's argument spec and its documentation differ."""
    wrong = []
    for key in ("type", "elements", "choices"):
        if spec.get(key) != doc.get(key):
            wrong.append("%s.%s: spec %r, doc %r" % (name, key, spec.get(key), doc.get(key)))
    if bool(spec.get("required")) != bool(doc.get("required")):
        wrong.append("%s.required differs" % name)
    default = spec.get("default")
    if default != doc.get("default"):  # 5.0 in the spec is 5 in the doc
        wrong.append("%s.default: spec %r, doc %r" % (name, default, doc.get("default")))
    if ("options" in spec) != ("suboptions" in doc):
        wrong.append("%s: suboptions differ" % name)
    elif "options" in spec:
        if set(spec["options"]) != set(doc["suboptions"]):
            wrong.append("%s: spec has %s, doc has %s" % (name, sorted(spec["options"]), sorted(doc["suboptions"])))
        for sub in set(spec["options"]) & set(doc["suboptions"]):
            wrong += _same_option("%s.%s" % (name, sub), spec["options"][sub], doc["suboptions"][sub])
    return wrong


def test_the_doc_fragment_documents_the_argument_spec_exactly():
    spec, doc = launch_options.argument_spec(), _documented()
    assert set(spec) == set(doc)
    wrong = [w for name in spec for w in _same_option(name, spec[name], doc[name])]
    assert wrong == []


def test_the_check_catches_a_default_that_drifts():
    spec = launch_options.argument_spec()
    spec["supervision"]["options"]["grace_s"] = dict(spec["supervision"]["options"]["grace_s"], default=9.0)
    wrong = [w for name in spec for w in _same_option(name, spec[name], _documented()[name])]
    assert wrong == ["supervision.grace_s.default: spec 9.0, doc 5"]


def _fed_fields() -> list[str]:
    spec = launch_options.argument_spec()
    fed = []
    for name, option in spec.items():
        if "options" in option:
            fed += [launch_options.field_name(name, sub) for sub in option["options"]]
        else:
            fed.append(name)
    return fed


def test_every_jobspec_field_has_exactly_one_option_or_derivation():
    fed = _fed_fields()
    assert len(fed) == len(set(fed)), "two options feed one field"
    fields = {field.name for field in dataclasses.fields(JobSpec)}
    missing = fields - set(fed) - set(DERIVED)
    assert missing == set()
    extra = set(fed) - fields - set(launch_options.NOT_IN_SPEC)
    assert extra == set()
    assert set(DERIVED.values()) <= set(launch_options.NOT_IN_SPEC)


BASE = {"job": "j", "jobs_dir": "/tmp/jobs", "run_id": None, "node_rank": 1, "nnodes": 2, "nproc_per_node": 4,
        "world_size": None, "master_addr": "192.0.2.10", "master_port": 29500, "python": "python3",
        "script": "/code/train.py", "script_content": None, "script_args": ["--x"], "workdir": None, "env": {"A": "1"},
        "env_files": [], "secret_env": {}, "iface": "", "launcher": "torchrun", "scheduler": "ssh",
        "gang": None, "supervision": None, "slurm": None, "container": None}


def test_left_out_groups_take_their_defaults_and_leave_slurm_and_the_container_off():
    values = launch_options.flat(BASE)
    spec = launch_options.job_spec(values, gpus_found=0)
    assert spec == JobSpec(job="j", node_rank=1, nnodes=2, nproc_per_node=4, world_size=8, master_addr="192.0.2.10",
                           master_port=29500, python="python3", script="/code/train.py", workdir="/code",
                           script_args=("--x",), env=(("A", "1"),), secret_env_sha256=spec.secret_env_sha256)
    assert values["gang_key"] == "" and values["start_timeout_s"] == 15.0


def test_grouped_options_reach_their_jobspec_fields():
    params = dict(BASE, nproc_per_node=None, container={
        "engine": "podman", "image": "train:1", "image_id": IMAGE_ID, "gpus": True, "volumes": ["/d:/d"],
        "ulimits": [], "run_args": ["--shm-size=8g"]},
        gang={"nodes": [["a", "192.0.2.10"], ["b", "192.0.2.11"]], "key": "k", "slots": [8, 8], "heartbeat_s": 0.5,
              "heartbeat_misses": 3, "join_timeout_s": 60.0},
        supervision={"grace_s": 2.0, "start_timeout_s": 30.0, "hang_timeout_s": 600, "hang_startup_s": 120.0,
                     "max_restarts": 1, "restart_ports": [29501]})
    values = launch_options.flat(params)
    assert launch_options.problem(values) == ""
    spec = launch_options.job_spec(values, gpus_found=8)
    assert (spec.nproc_per_node, spec.world_size) == (8, 16)
    assert spec.nodes == (("a", "192.0.2.10"), ("b", "192.0.2.11")) and spec.slots == (8, 8)
    assert (spec.heartbeat_s, spec.heartbeat_misses, spec.join_timeout_s) == (0.5, 3, 60.0)
    assert (spec.grace_s, spec.hang_timeout_s, spec.hang_startup_s) == (2.0, 600, 120.0)
    assert (spec.max_restarts, spec.restart_ports) == (1, (29501,))
    assert (spec.container_engine, spec.container_image, spec.container_image_id) == ("podman", "train:1", IMAGE_ID)
    assert spec.container_gpus is True and spec.container_volumes == ("/d:/d",)
    assert spec.container_run_args == ("--shm-size=8g",)
    assert values["gang_key"] == "k" and "gang_key" not in spec.as_dict()
    assert spec.min_nodes == 0 and not spec.elastic  # unset: all of the nodes


def test_min_nodes_below_the_node_count_makes_the_spec_elastic_and_all_of_them_is_zero():
    gang = {"nodes": [["a", "192.0.2.10"], ["b", "192.0.2.11"]], "key": "k"}
    for given, kept in ((1, 1), (2, 0), (0, 0)):
        values = launch_options.flat(dict(BASE, gang=gang, supervision={"min_nodes": given}))
        assert launch_options.problem(values) == ""
        spec = launch_options.job_spec(values, gpus_found=1)
        assert (spec.min_nodes, spec.elastic) == (kept, bool(kept)), given


@pytest.mark.parametrize("change, message", [
    ({"scheduler": "slurm"}, "scheduler: slurm needs slurm.node (got '') and a numeric slurm.job_id (got '')"),
    ({"scheduler": "slurm", "slurm": {"node": "n1", "job_id": "12"}, "launcher": "mpirun"},
     "launcher: mpirun is not supported with scheduler=slurm"),
    ({"supervision": {"max_restarts": 2, "restart_ports": [29501]}},
     "supervision.max_restarts: 2 needs as many supervision.restart_ports, got 1"),
    ({"supervision": {"hang_timeout_s": -1}}, "supervision.hang_timeout_s: must be 0 (off)"),
    ({"supervision": {"restart_on": ["hang", "oom"]}}, "supervision.restart_on: 'oom' is neither a cause"),
    ({"supervision": {"restart_on": ["256"]}}, "supervision.restart_on: '256' is neither a cause"),
    ({"gang": {"nodes": [["a", "192.0.2.10"]], "key": "k"}}, "gang.nodes: must list all 2 nodes"),
    ({"gang": {"nodes": [["a", "192.0.2.10"], ["b", "192.0.2.11"]], "key": "k", "slots": [8]}},
     "gang.slots: must give the ranks of each of the 2 nodes, got 1"),
    ({"launcher": "mpirun"}, "launcher: mpirun needs gang.nodes"),
    ({"gang": {"nodes": [["a", "192.0.2.10"], ["b", "192.0.2.11"]], "key": "k"}, "supervision": {"min_nodes": 3}},
     "supervision.min_nodes: must be from 1 to the 2 nodes (0: all of them), got 3"),
    ({"gang": {"nodes": [["a", "192.0.2.10"], ["b", "192.0.2.11"]], "key": "k"}, "supervision": {"min_nodes": -1}},
     "supervision.min_nodes: must be from 1 to the 2 nodes (0: all of them), got -1"),
    ({"gang": {"nodes": [["a", "192.0.2.10"], ["b", "192.0.2.11"]], "key": "k"}, "supervision": {"min_nodes": 1},
      "launcher": "deepspeed"}, "supervision.min_nodes: launcher deepspeed cannot go on with fewer nodes; min_nodes works "
     "with torchrun and none"),
    ({"container": {"engine": "lxc", "image_id": IMAGE_ID}}, "container_engine: 'lxc' is not one of docker, podman"),
    ({"container": {"engine": "podman", "image_id": "train:1"}}, "container_image_id: 'train:1' is not an image ID"),
])
def test_bad_grouped_options_are_named(change, message):
    assert message in launch_options.problem(launch_options.flat(dict(BASE, **change)))
