"""The runtimes on the node's side (module_utils/_runtime/runtimes.py): the host and a container image, chosen once from the
job's spec; and that nothing else in module_utils looks at the container settings.

No engine runs here: the container runtime's engine calls are replaced by recorders (test_container_launch.py runs
a stand-in engine, tests/cluster/test_containers.py real Podman)."""

import glob
import os

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import containers, runtimes

IMAGE_ID = "sha256:" + "ab" * 32
SPEC = {"job": "j", "node_rank": 1, "run_id": "0123456789abcdef", "container_engine": "podman",
        "container_image": "nvcr.io/nvidia/pytorch:25.10-py3", "container_image_id": IMAGE_ID, "grace_s": 5.0,
        "workdir": "/code", "script": "train.py", "container_gpus": True}


def test_the_runtime_is_chosen_by_the_engine_alone():
    assert runtimes.runtime_of({}).name == "host"
    assert runtimes.runtime_of({"container_engine": "", "container_image": "x"}).name == "host"
    assert runtimes.runtime_of(SPEC).name == "container"
    # The planner's side: a plan's container settings (or none) choose the same way.
    assert runtimes.runtime_for(None).name == "host" and runtimes.runtime_for({"image": "x"}).name == "container"
    # On the host the probe checks the node's Python and launcher; in an image, image.yml checks the image's.
    assert runtimes.runtime_for(None).runs_node_python and not runtimes.runtime_for({"image": "x"}).runs_node_python


def test_on_the_host_there_is_nothing_to_wrap_record_or_end(monkeypatch):
    for name in ("begin_container_stop", "container_leftovers", "remove_container_leftovers", "end_attempt_container"):
        monkeypatch.setattr(runtimes, name, lambda *args, _name=name: (_ for _ in ()).throw(AssertionError(_name)))
    monkeypatch.setattr(runtimes, "container_facts", lambda *args: (_ for _ in ()).throw(AssertionError("facts")))
    host = runtimes.runtime_of({})
    # The node's probe asks the runtime: on the host no engine is looked at.
    assert runtimes.runtime_for("").probe("docker", "") == {}
    assert host.launch_block({}, "/jobs/j", []) == ""
    assert host.state_fields({}) == {}
    assert host.begin_stop({}) is None  # the attempt signals the run's processes itself
    host.end_attempt({}, None)
    assert host.leftovers({}, "/jobs/j") == [] and host.remove_leftovers({}, "/jobs/j") == {}


def test_in_a_container_each_step_goes_through_the_engine(monkeypatch):
    calls = []
    monkeypatch.setattr(runtimes, "begin_container_stop", lambda spec: calls.append("stop") or "popen")
    monkeypatch.setattr(runtimes, "end_attempt_container", lambda spec, stopping: calls.append(("end", stopping)))
    monkeypatch.setattr(runtimes, "container_leftovers", lambda spec, job_dir: ["c1"])
    monkeypatch.setattr(runtimes, "remove_container_leftovers", lambda spec, job_dir: calls.append("rm") or ["c1"])
    monkeypatch.setattr(runtimes, "container_facts", lambda engine, image: {"engine": engine, "image": image})
    box = runtimes.runtime_of(SPEC)
    # The node's probe asks the runtime chosen by the image it is given: the engine and the image ID it holds.
    assert runtimes.runtime_for("localhost/train:1").probe("podman", "localhost/train:1") == {
        "engine": "podman", "image": "localhost/train:1"}
    assert box.launch_block(SPEC, "/jobs/j", []) == containers.render_block(SPEC, "/jobs/j", [])
    assert IMAGE_ID in box.launch_block(SPEC, "/jobs/j", [])
    assert box.state_fields(SPEC) == {"container": containers.container_of(SPEC), "image": SPEC["container_image"],
                                      "image_id": IMAGE_ID}
    assert box.begin_stop(SPEC) == "popen"
    box.end_attempt(SPEC, "popen")
    assert box.leftovers(SPEC, "/jobs/j") == ["c1"]
    assert box.remove_leftovers(SPEC, "/jobs/j") == {"containers_removed": ["c1"]}
    assert calls == ["stop", ("end", "popen"), "rm"]


def test_nothing_else_on_the_node_side_looks_at_the_container_settings():
    """The launch's options and JobSpec carry them; containers.py and runtimes.py use them; nothing else does."""
    folder = os.path.dirname(runtimes.__file__)
    allowed = ("containers.py", "runtimes.py", "job_spec.py", "launch_options.py")
    found = {}
    for path in glob.glob(os.path.join(folder, "*.py")):
        if os.path.basename(path) in allowed:
            continue
        hits = [line.strip() for line in open(path) if "container_engine" in line or "container_image_id" in line]
        if hits:
            found[os.path.basename(path)] = hits
    assert found == {}
