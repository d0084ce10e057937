"""What the API server and the operators check of an exported manifest, without a Kubernetes cluster.

Two layers, both used by test_export_schemas.py:

- ``schema_errors``: the manifest against the CRD's openAPIV3Schema vendored in tests/fixtures/crds (see NOTICE
  there), validated with jsonschema the way the API server treats a structural schema under strict field validation
  (kubectl's default): a field the schema does not name is an error unless ``x-kubernetes-preserve-unknown-fields``;
  ``x-kubernetes-int-or-string`` takes an integer or a string; ``nullable`` takes null; list-maps
  (``x-kubernetes-list-type: map``) hold each key once and sets each item once. The schemas' CEL rules
  (``x-kubernetes-validations``) are not evaluated: the three CRDs' rules are on managedBy (not written by export)
  and on updates (``oldSelf``), never on a new object. ObjectMeta is the API server's own and is not checked here.
- ``operator_errors``: what each operator's own validation refuses that the schema does not carry, from its source
  (Training Operator v1.9.3 pkg/webhooks/pytorch/pytorchjob_webhook.go; MPI Operator v0.8.0
  pkg/apis/kubeflow/validation/validation.go; Trainer v2.0.1 pkg/runtime/framework/plugins/torch/torch.go), and the
  names the operators derive from the job's (DNS labels of at most 63 characters).
"""

import json
import os
import re
from typing import Any

import jsonschema

CRDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "fixtures", "crds")
FILES = {"TrainJob": "trainjob-trainer-v2.0.1.json", "PyTorchJob": "pytorchjob-training-operator-v1.9.3.json",
         "MPIJob": "mpijob-mpi-operator-v0.8.0.json"}
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def crd(kind: str) -> dict[str, Any]:
    with open(os.path.join(CRDS, FILES[kind])) as handle:
        return json.load(handle)


def structural(node: Any) -> Any:
    """The openAPIV3Schema node as a JSON Schema that refuses what strict field validation refuses."""
    if isinstance(node, list):
        return [structural(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: value for key, value in node.items() if not key.startswith("x-kubernetes-") and key != "nullable"}
    for key in ("properties", "patternProperties"):
        if key in out:
            out[key] = {name: structural(value) for name, value in out[key].items()}
    for key in ("items", "additionalProperties", "not"):
        if isinstance(out.get(key), dict):
            out[key] = structural(out[key])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in out:
            out[key] = structural(out[key])
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if (node.get("type") == "object" and not node.get("x-kubernetes-preserve-unknown-fields")
            and "additionalProperties" not in node):
        out["additionalProperties"] = False
    return out


def _list_errors(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """List-map keys and set items given twice, anywhere under value."""
    errors = []
    if isinstance(value, list):
        kind = schema.get("x-kubernetes-list-type")
        if kind == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or []
            seen = [tuple(item.get(key) for key in keys) for item in value if isinstance(item, dict)]
            errors += ["%s: %s=%s given twice (a list-map holds each key once)" % (path, "/".join(keys), "/".join(
                map(str, key))) for index, key in enumerate(seen) if key in seen[:index]]
        elif kind == "set":
            errors += ["%s: %r given twice (a set)" % (path, item) for index, item in enumerate(value)
                       if item in value[:index]]
        for index, item in enumerate(value):
            errors += _list_errors(item, schema.get("items") or {}, "%s[%d]" % (path, index))
    elif isinstance(value, dict):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties") if isinstance(schema.get("additionalProperties"), dict) else {}
        for key, item in value.items():
            errors += _list_errors(item, properties.get(key, extra), "%s.%s" % (path, key))
    return errors


def schema_errors(manifest: dict[str, Any]) -> list[str]:
    definition = crd(manifest.get("kind", ""))
    schema = structural(definition["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}  # ObjectMeta: the API server's own validation
    expected = "%s/%s" % (definition["group"], definition["version"])
    errors = [] if manifest.get("apiVersion") == expected else ["apiVersion: %r, the CRD serves %r" % (
        manifest.get("apiVersion"), expected)]
    validator = jsonschema.Draft7Validator(schema)
    for error in sorted(validator.iter_errors(manifest), key=lambda error: list(error.absolute_path)):
        errors.append("%s: %s" % (".".join(map(str, error.absolute_path)) or "(root)", error.message))
    return errors + _list_errors(manifest, definition["openAPIV3Schema"], "")


def _containers(replica: dict[str, Any]) -> list[dict[str, Any]]:
    return ((replica.get("template") or {}).get("spec") or {}).get("containers") or []


def _pytorchjob_errors(manifest: dict[str, Any]) -> list[str]:
    errors = []
    replicas = manifest["spec"].get("pytorchReplicaSpecs") or {}
    for role, replica in replicas.items():
        if role not in ("Master", "Worker"):
            errors.append("pytorchReplicaSpecs.%s: not Master or Worker" % role)
        containers = _containers(replica)
        if not any(container.get("name") == "pytorch" for container in containers):
            errors.append("pytorchReplicaSpecs.%s: no container named pytorch" % role)
        if any(not container.get("image") for container in containers):
            errors.append("pytorchReplicaSpecs.%s: a container without an image" % role)
        if role == "Master" and replica.get("replicas") != 1:
            errors.append("pytorchReplicaSpecs.Master.replicas: must be 1")
        if role == "Worker" and (replica.get("replicas") or 0) < 1:
            errors.append("pytorchReplicaSpecs.Worker.replicas: must be at least 1")
    names = ["%s-%s-%d" % (manifest["metadata"]["name"], role.lower(), index) for role, replica in replicas.items()
             for index in range(replica.get("replicas") or 0)]
    return errors + _label_errors([manifest["metadata"]["name"]] + names)


def _mpijob_errors(manifest: dict[str, Any]) -> list[str]:
    errors = []
    spec = manifest["spec"]
    replicas = spec.get("mpiReplicaSpecs") or {}
    launcher = replicas.get("Launcher")
    if not launcher:
        errors.append("mpiReplicaSpecs.Launcher: must have a Launcher replica spec")
    elif launcher.get("replicas", 1) != 1:
        errors.append("mpiReplicaSpecs.Launcher.replicas: must be 1")
    for role, replica in replicas.items():
        if replica.get("restartPolicy") not in ("Never", "OnFailure"):
            errors.append("mpiReplicaSpecs.%s.restartPolicy: %r is not Never or OnFailure" % (
                role, replica.get("restartPolicy")))
        if "replicas" not in replica:
            errors.append("mpiReplicaSpecs.%s.replicas: must be given" % role)
        if not _containers(replica):
            errors.append("mpiReplicaSpecs.%s: must have a container" % role)
    if "slotsPerWorker" not in spec:
        errors.append("slotsPerWorker: must be given")
    clean = (spec.get("runPolicy") or {}).get("cleanPodPolicy", "None")
    if clean not in ("None", "Running", "All"):
        errors.append("runPolicy.cleanPodPolicy: %r is not None, Running or All" % clean)
    workers = (replicas.get("Worker") or {}).get("replicas") or 1
    name = manifest["metadata"]["name"]
    return errors + _label_errors([name, "%s-launcher" % name, "%s-worker-%d" % (name, workers - 1)])


def _trainjob_errors(manifest: dict[str, Any]) -> list[str]:
    trainer = manifest["spec"].get("trainer") or {}
    reserved = {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"}
    errors = ["trainer.env: %s is reserved by the torch runtime" % item["name"] for item in trainer.get("env") or []
              if item.get("name") in reserved]
    name = manifest["metadata"]["name"]
    nodes = trainer.get("numNodes") if isinstance(trainer.get("numNodes"), int) else 1  # else the schema's error
    return errors + _label_errors([name, "%s-node-0-%d" % (name, nodes - 1)])


def _label_errors(names: list[str]) -> list[str]:
    return ["%s: not a DNS-1035 label of at most 63 characters" % name for name in names
            if len(name) > 63 or not DNS1035_LABEL.match(name)]


def operator_errors(manifest: dict[str, Any]) -> list[str]:
    return {"PyTorchJob": _pytorchjob_errors, "MPIJob": _mpijob_errors,
            "TrainJob": _trainjob_errors}[manifest["kind"]](manifest)


def errors(manifest: dict[str, Any]) -> list[str]:
    return schema_errors(manifest) + operator_errors(manifest)
