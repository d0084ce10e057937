"""playbooks/export.yml's files, field by field: what Slurm and the Kubernetes operators read of them, checked
against the job. There is no Kubernetes cluster here: the manifests are checked as data, never applied; the sbatch
script is submitted with plain sbatch on the container cluster's Slurm (tests/cluster/test_slurm.py)."""

import json
import subprocess

import pytest
import yaml

from ansible_collections.gpufleet.cluster.plugins.plugin_utils import export

JOB = export.ExportJob(job="llama-ft", script="train.py", nnodes=3, nproc_per_node=8, gpus_per_node=8,
                       script_args=("--epochs", "3", "--name", "first try"),
                       env=(("NCCL_SOCKET_IFNAME", "ens5"), ("GLOO_SOCKET_IFNAME", "ens5")),
                       secret_names=("HF_TOKEN",), max_restarts=2, image="nvcr.io/nvidia/pytorch:25.01-py3")


def manifest(fmt, job=JOB):
    text = export.render(job, fmt, lambda data: yaml.safe_dump(data, sort_keys=False))
    assert text.startswith("# Written by gpufleet")
    return yaml.safe_load(text)


def env_of(container):
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}


def check_env(env):
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "ens5"
    assert (env["MLP_WORKER_NUM"], env["MLP_WORKER_GPU"], env["MLP_MPI_NP"]) == ("3", "8", "24")
    # The secret by reference only: its value is nowhere in the file.
    assert env["HF_TOKEN"] == {"secretKeyRef": {"name": "llama-ft-secrets", "key": "HF_TOKEN"}}


def test_trainjob_fields():
    data = manifest("trainjob")
    assert (data["apiVersion"], data["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert data["metadata"]["name"] == "llama-ft"
    assert data["metadata"]["annotations"]["gpufleet/written-for"] == "kubeflow-trainer-v2.0"
    assert data["spec"]["runtimeRef"] == {"name": "torch-distributed", "apiGroup": "trainer.kubeflow.org",
                                          "kind": "ClusterTrainingRuntime"}
    trainer = data["spec"]["trainer"]
    assert (trainer["image"], trainer["numNodes"], trainer["numProcPerNode"]) == (JOB.image, 3, 8)
    assert trainer["resourcesPerNode"] == {"limits": {"nvidia.com/gpu": 8}}
    check_env(env_of(trainer))
    command = trainer["command"]
    assert command[:2] == ["/bin/bash", "-c"]
    assert ("torchrun --nnodes=$PET_NNODES --nproc-per-node=8 --node-rank=$PET_NODE_RANK "
            "--master-addr=$PET_MASTER_ADDR --master-port=$PET_MASTER_PORT train.py --epochs 3 --name 'first try'"
            in command[2])
    assert "MLP_ROLE_INDEX=$PET_NODE_RANK" in command[2]


def test_pytorchjob_fields():
    data = manifest("pytorchjob")
    assert (data["apiVersion"], data["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert data["spec"]["runPolicy"]["backoffLimit"] == 2
    replicas = data["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 2)
    for role in ("Master", "Worker"):
        assert replicas[role]["restartPolicy"] == "OnFailure"
        (container,) = replicas[role]["template"]["spec"]["containers"]
        assert container["name"] == "pytorch"  # the container the operator configures
        assert container["image"] == JOB.image and container["resources"] == {"limits": {"nvidia.com/gpu": 8}}
        check_env(env_of(container))
        assert ("torchrun --nnodes=$WORLD_SIZE --nproc-per-node=8 --node-rank=$RANK --master-addr=$MASTER_ADDR "
                "--master-port=$MASTER_PORT train.py" in container["command"][2])
    one = manifest("pytorchjob", export.ExportJob(job="solo", script="t.py", nnodes=1, nproc_per_node=1,
                                                  image="img"))
    assert list(one["spec"]["pytorchReplicaSpecs"]) == ["Master"]
    assert "resources" not in one["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]


def test_mpijob_fields():
    job = export.ExportJob(**dict(JOB.__dict__, launcher="mpirun"))
    data = manifest("mpijob", job)
    assert (data["apiVersion"], data["kind"]) == ("kubeflow.org/v2beta1", "MPIJob")
    spec = data["spec"]
    assert spec["slotsPerWorker"] == 8 and spec["runPolicy"]["backoffLimit"] == 2
    launcher, worker = spec["mpiReplicaSpecs"]["Launcher"], spec["mpiReplicaSpecs"]["Worker"]
    assert (launcher["replicas"], worker["replicas"]) == (1, 3)
    (run,) = launcher["template"]["spec"]["containers"]
    assert "resources" not in run  # the launcher holds no GPU
    assert run["command"][2].startswith("exec mpirun -np 24 --bind-to none --map-by slot -x NCCL_SOCKET_IFNAME")
    assert "-x HF_TOKEN" in run["command"][2] and run["command"][2].endswith("python train.py --epochs 3 --name "
                                                                               "'first try'")
    (work,) = worker["template"]["spec"]["containers"]
    assert work["command"] == ["/usr/sbin/sshd", "-De"] and work["resources"] == {"limits": {"nvidia.com/gpu": 8}}
    check_env(env_of(run))


def test_sbatch_fields_and_syntax():
    text = export.render(JOB, "sbatch", None)
    options = [line.split(" ", 1)[1] for line in text.splitlines() if line.startswith("#SBATCH ")]
    assert options == ["--job-name=llama-ft", "--nodes=3", "--ntasks-per-node=1", "--cpus-per-task=8",
                       "--gres=gpu:8", "--output=llama-ft-%j.out", "--requeue"]
    assert subprocess.run(["bash", "-n"], input=text, text=True, check=False).returncode == 0
    assert "srun --kill-on-bad-exit=1 --ntasks-per-node=1 --output=llama-ft-%j-%N.out bash -c" in text
    assert '--nproc-per-node=8 --node-rank="$SLURM_NODEID"' in text
    assert "train.py --epochs 3 --name '\"'\"'first try'\"'\"'" in text  # quoted twice: the script, then bash -c
    assert "export NCCL_SOCKET_IFNAME=ens5" in text
    assert ': "${HF_TOKEN:?is a secret of job llama-ft' in text
    assert '-lt 2 ]; then' in text and 'scontrol requeue "$SLURM_JOB_ID"' in text
    assert "--requeue" not in export.render(export.ExportJob(job="j", script="t.py", nnodes=1, nproc_per_node=1),
                                            "sbatch", None)


def test_sbatch_without_a_secret_stops_before_starting_anything(tmp_path):
    """Run by bash as Slurm would, with the secret unset: it stops at once, naming it (srun is never reached)."""
    text = export.render(JOB, "sbatch", None)
    done = subprocess.run(["bash", "-c", text], env={"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "5"},
                          capture_output=True, text=True, cwd=tmp_path, check=False)
    assert done.returncode != 0 and "HF_TOKEN: is a secret of job llama-ft" in done.stderr, done.stderr


@pytest.mark.parametrize("fmt,job,message", [
    ("helm", JOB, "format: 'helm' is not one of sbatch, trainjob, pytorchjob, mpijob"),
    ("sbatch", export.ExportJob(**dict(JOB.__dict__, launcher="mpirun")),
     "launcher: format=sbatch starts the ranks with torchrun or none, not mpirun"),
    ("mpijob", JOB, "launcher: format=mpijob starts the ranks with mpirun or horovodrun, not torchrun"),
    ("trainjob", export.ExportJob(**dict(JOB.__dict__, image="")), "image: format=trainjob needs the container image"),
    ("pytorchjob", export.ExportJob(**dict(JOB.__dict__, job="Llama_FT")), "job: 'Llama_FT' is not a Kubernetes name"),
])
def test_what_a_format_cannot_carry_is_refused(fmt, job, message):
    with pytest.raises(export.ExportError) as error:
        export.render(job, fmt, json.dumps)
    assert str(error.value).startswith(message)
