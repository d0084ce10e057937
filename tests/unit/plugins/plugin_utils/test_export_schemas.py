"""Every manifest export.yml writes, against the real CRD schemas (tests/fixtures/crds, see NOTICE) and the operators'
own rules (kubernetes_crds.py says what is checked and what is not); and each check shown to catch a planted error,
so that a validator that accepted everything would fail here. No manifest is applied to a Kubernetes cluster."""

import copy
import itertools

import pytest
import yaml

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._export import export

import kubernetes_crds

KINDS = {"trainjob": "TrainJob", "pytorchjob": "PyTorchJob", "mpijob": "MPIJob"}


def jobs(fmt):
    """Every format with nodes, ranks, GPUs, secrets, environment, restarts and launchers varied."""
    launchers = {"trainjob": ("torchrun", "none"), "pytorchjob": ("torchrun", "none"),
                 "mpijob": ("mpirun", "horovodrun")}[fmt]
    restarts = (0,) if fmt == "trainjob" else (0, 3)
    for nnodes, (nproc, gpus), secrets, env, max_restarts, launcher in itertools.product(
            (1, 2, 16), ((1, 0), (8, 8), (4, 8)), ((), ("HF_TOKEN", "WANDB_API_KEY")),
            ((), (("NCCL_SOCKET_IFNAME", "ens5"), ("GLOO_SOCKET_IFNAME", "ens5"), ("NCCL_DEBUG", "WARN"))),
            restarts, launchers):
        yield export.ExportJob(job="llama-ft", script="/workspace/train.py", nnodes=nnodes, nproc_per_node=nproc,
                               gpus_per_node=gpus, script_args=("--epochs", "3"), env=env, secret_names=secrets,
                               max_restarts=max_restarts, launcher=launcher,
                               container_image="nvcr.io/nvidia/pytorch:25.01-py3")


def manifest(job, fmt):
    return yaml.safe_load(export.render(job, fmt, lambda data: yaml.safe_dump(data, sort_keys=False)))


@pytest.mark.parametrize("fmt", sorted(KINDS))
def test_every_exported_manifest_passes_its_crd_schema_and_its_operator_s_rules(fmt):
    count = 0
    for job in jobs(fmt):
        data = manifest(job, fmt)
        assert data["kind"] == KINDS[fmt]
        assert kubernetes_crds.errors(data) == [], job
        count += 1
    assert count >= 72


def _base(fmt):
    job = next(job for job in jobs(fmt) if job.nnodes == 2 and job.secret_names and job.env and job.gpus_per_node)
    return manifest(job, fmt)


def _first_container(data):
    spec = data["spec"]
    if data["kind"] == "TrainJob":
        return spec["trainer"]
    replicas = spec.get("pytorchReplicaSpecs") or spec.get("mpiReplicaSpecs")
    return next(iter(replicas.values()))["template"]["spec"]["containers"][0]


def _replicas(data):
    return data["spec"].get("pytorchReplicaSpecs") or data["spec"].get("mpiReplicaSpecs")


# (format, what is planted, a change to a valid manifest, a piece of the error it must give)
PLANTED = [
    ("trainjob", "an unknown field", lambda d: d["spec"]["trainer"].update(maxRestarts=3),
     "Additional properties are not allowed ('maxRestarts' was unexpected)"),
    ("trainjob", "a duplicate env name in a list-map", lambda d: d["spec"]["trainer"]["env"].append(
        {"name": "NCCL_DEBUG", "value": "INFO"}), "spec.trainer.env: name=NCCL_DEBUG given twice"),
    ("trainjob", "a string for an integer", lambda d: d["spec"]["trainer"].update(numNodes="2"),
     "spec.trainer.numNodes: '2' is not of type 'integer'"),
    ("trainjob", "a reserved env name", lambda d: d["spec"]["trainer"]["env"].append(
        {"name": "PET_NNODES", "value": "2"}), "trainer.env: PET_NNODES is reserved by the torch runtime"),
    ("trainjob", "a pod hostname over 63", lambda d: d["metadata"].update(name="t" * 60),
     "-node-0-1: not a DNS-1035 label"),
    ("trainjob", "the wrong apiVersion", lambda d: d.update(apiVersion="kubeflow.org/v2alpha1"),
     "apiVersion: 'kubeflow.org/v2alpha1', the CRD serves 'trainer.kubeflow.org/v1alpha1'"),
    ("pytorchjob", "an unknown field in the pod template", lambda d: _replicas(d)["Master"]["template"]["spec"][
        "containers"][0].update(gpus=8), "('gpus' was unexpected)"),
    ("pytorchjob", "a GPU count that is not a quantity", lambda d: _replicas(d)["Master"]["template"]["spec"][
        "containers"][0]["resources"]["limits"].update({"nvidia.com/gpu": "eight"}), "does not match"),
    ("pytorchjob", "a container not named pytorch", lambda d: _replicas(d)["Worker"]["template"]["spec"][
        "containers"][0].update(name="trainer"), "pytorchReplicaSpecs.Worker: no container named pytorch"),
    ("pytorchjob", "two Masters", lambda d: _replicas(d)["Master"].update(replicas=2),
     "pytorchReplicaSpecs.Master.replicas: must be 1"),
    ("pytorchjob", "a replica type the operator does not know", lambda d: _replicas(d).update(
        Chief=copy.deepcopy(_replicas(d)["Worker"])), "pytorchReplicaSpecs.Chief: not Master or Worker"),
    ("pytorchjob", "a name that is not a DNS-1035 label", lambda d: d["metadata"].update(name="1llama"),
     "1llama: not a DNS-1035 label"),
    ("mpijob", "two Launchers", lambda d: _replicas(d)["Launcher"].update(replicas=2),
     "mpiReplicaSpecs.Launcher.replicas: must be 1"),
    ("mpijob", "a restart policy MPIJob does not take", lambda d: _replicas(d)["Worker"].update(
        restartPolicy="Always"), "mpiReplicaSpecs.Worker.restartPolicy: 'Always' is not Never or OnFailure"),
    ("mpijob", "a clean-pod policy outside the enum", lambda d: d["spec"]["runPolicy"].update(
        cleanPodPolicy="Finished"), "runPolicy.cleanPodPolicy: 'Finished' is not None, Running or All"),
    ("mpijob", "a duplicate env name", lambda d: _replicas(d)["Launcher"]["template"]["spec"]["containers"][0][
        "env"].append({"name": "HF_TOKEN", "value": "x"}), "env: name=HF_TOKEN given twice"),
    ("mpijob", "slotsPerWorker missing", lambda d: d["spec"].pop("slotsPerWorker"), "slotsPerWorker: must be given"),
    ("mpijob", "a worker hostname over 63", lambda d: d["metadata"].update(name="m" * 55),
     "-worker-1: not a DNS-1035 label"),
]


@pytest.mark.parametrize("fmt,planted,change,message", PLANTED, ids=[case[1] for case in PLANTED])
def test_a_planted_error_fails_validation(fmt, planted, change, message):
    data = _base(fmt)
    assert kubernetes_crds.errors(data) == []
    change(data)
    found = kubernetes_crds.errors(data)
    assert any(message in error for error in found), (planted, found)


def test_the_validator_refuses_unknown_fields_only_where_the_schema_does_not_keep_them():
    """x-kubernetes-preserve-unknown-fields keeps a field; a plain object refuses one (structural pruning)."""
    schema = kubernetes_crds.structural({"type": "object", "properties": {
        "kept": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "plain": {"type": "object", "properties": {"a": {"type": "string"}}},
        "port": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
        "count": {"x-kubernetes-int-or-string": True}}})
    import jsonschema  # pylint: disable=import-outside-toplevel
    validator = jsonschema.Draft7Validator(schema)
    assert not list(validator.iter_errors({"kept": {"anything": 1}, "port": "http", "count": 3}))
    assert not list(validator.iter_errors({"count": "50%"}))
    assert [error.message for error in validator.iter_errors({"plain": {"b": 1}})] == [
        "Additional properties are not allowed ('b' was unexpected)"]
    assert list(validator.iter_errors({"count": [1]}))
