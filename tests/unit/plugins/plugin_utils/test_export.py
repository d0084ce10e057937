"""playbooks/export.yml's files, field by field: what Slurm and the Kubernetes operators read of them, checked
against the job. There is no Kubernetes cluster here: the manifests are checked as data, never applied; the sbatch
script is submitted with plain sbatch on the container cluster's Slurm (tests/cluster/test_slurm.py)."""

import json
import os
import subprocess

import pytest
import yaml

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._export import export

JOB = export.ExportJob(job="llama-ft", script="train.py", nnodes=3, nproc_per_node=8, gpus_per_node=8,
                       script_args=("--epochs", "3", "--name", "first try"),
                       env=(("NCCL_SOCKET_IFNAME", "ens5"), ("GLOO_SOCKET_IFNAME", "ens5")),
                       secret_names=("HF_TOKEN",), max_restarts=2,
                       container_image="nvcr.io/nvidia/pytorch:25.01-py3")


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
    data = manifest("trainjob", export.ExportJob(**dict(JOB.__dict__, max_restarts=0)))
    assert (data["apiVersion"], data["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert data["metadata"]["name"] == "llama-ft"
    assert data["metadata"]["annotations"]["gpufleet/written-for"] == "kubeflow-trainer-v2.0"
    assert data["spec"]["runtimeRef"] == {"name": "torch-distributed", "apiGroup": "trainer.kubeflow.org",
                                          "kind": "ClusterTrainingRuntime"}
    trainer = data["spec"]["trainer"]
    assert (trainer["image"], trainer["numNodes"], trainer["numProcPerNode"]) == (JOB.container_image, 3, 8)
    assert trainer["resourcesPerNode"] == {"limits": {"nvidia.com/gpu": 8}}
    check_env(env_of(trainer))
    command = trainer["command"]
    assert command[:2] == ["/bin/bash", "-c"]
    assert ("torchrun --nnodes=$PET_NNODES --node-rank=$PET_NODE_RANK --nproc-per-node=8 "
            "--master-addr=$PET_MASTER_ADDR --master-port=$PET_MASTER_PORT --rdzv-backend=static --max-restarts=0 "
            "train.py --epochs 3 --name 'first try'"
            in command[2])
    assert "MLP_ROLE_INDEX=$PET_NODE_RANK" in command[2]


def test_pytorchjob_fields():
    data = manifest("pytorchjob")
    assert (data["apiVersion"], data["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    # The operator's backoffLimit counts every pod's restarts: two restarts of the 3-pod job are 6 of them.
    assert data["spec"]["runPolicy"]["backoffLimit"] == 6
    # With nprocPerNode the operator's WORLD_SIZE is pods x ranks (envvar.go), and PET_NPROC_PER_NODE is set.
    assert data["spec"]["nprocPerNode"] == "8"
    replicas = data["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 2)
    for role in ("Master", "Worker"):
        assert replicas[role]["restartPolicy"] == "OnFailure"
        (container,) = replicas[role]["template"]["spec"]["containers"]
        assert container["name"] == "pytorch"  # the container the operator configures
        assert container["image"] == JOB.container_image and container["resources"] == {"limits": {"nvidia.com/gpu": 8}}
        check_env(env_of(container))
        assert ("torchrun --nnodes=$PET_NNODES --node-rank=$PET_NODE_RANK --nproc-per-node=8 "
                "--master-addr=$MASTER_ADDR --master-port=$MASTER_PORT --rdzv-backend=static --max-restarts=0 "
                "train.py" in container["command"][2])
    one = manifest("pytorchjob", export.ExportJob(job="solo", script="t.py", nnodes=1, nproc_per_node=1,
                                                  container_image="img"))
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
    launch = run["command"][2]
    assert ('exec mpirun $root --hostfile "$hostfile" -np 24 --map-by slot --bind-to none -x PATH -x LD_LIBRARY_PATH'
            in launch)
    assert "hostfile=/etc/mpi/hostfile" in launch  # where the operator mounts it
    assert "-x HF_TOKEN" in launch and "-x NCCL_SOCKET_IFNAME" in launch and "-x GPUFLEET_RANK_STARTS" in launch
    assert launch.rstrip().endswith("gpufleet-rank python train.py --epochs 3 --name 'first try'")
    assert subprocess.run(["bash", "-n"], input=launch, text=True, check=False).returncode == 0
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
    assert '--node-rank="$SLURM_NODEID" --nproc-per-node=8' in text
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
    ("trainjob", export.ExportJob(**dict(JOB.__dict__, container_image="")),
     "container_image: format=trainjob needs the container image"),
    ("pytorchjob", export.ExportJob(**dict(JOB.__dict__, job="Llama_FT")), "job: 'Llama_FT' is not a Kubernetes name"),
])
def test_what_a_format_cannot_carry_is_refused(fmt, job, message):
    with pytest.raises(export.ExportError) as error:
        export.render(job, fmt, json.dumps)
    assert str(error.value).startswith(message)


def with_(**changes):
    return export.ExportJob(**dict(JOB.__dict__, **changes))


LONG = "a" * 54  # 54 + len("-worker-11") = 64 characters


@pytest.mark.parametrize("fmt,job,message", [
    # A variable has one value: in both lists, Kubernetes' list-map env (TrainJob) would refuse the manifest.
    ("sbatch", with_(env=(("HF_TOKEN", "x"),)),
     "gpufleet_secret_env: HF_TOKEN is also in gpufleet_env"),
    ("trainjob", with_(max_restarts=0, env=(("MLP_WORKER_NUM", "9"),)),
     "gpufleet_env: MLP_WORKER_NUM is set by gpufleet for every rank (the job's contract)"),
    ("pytorchjob", with_(env=(("MASTER_ADDR", "10.0.0.1"),)),
     "gpufleet_env: MASTER_ADDR is set by gpufleet for every rank"),
    # The Trainer webhook's reserved names (TorchRunReservedEnvNames), and torchrun's PET_* options generally.
    ("trainjob", with_(max_restarts=0, env=(("PET_NNODES", "2"),)),
     "gpufleet_env: PET_NNODES is set by the operator of format=trainjob in the rank's container (PET_* are "
     "torchrun's options)"),
    ("pytorchjob", with_(secret_names=("PET_RDZV_CONF",)),
     "gpufleet_secret_env: PET_RDZV_CONF is set by the operator of format=pytorchjob"),
    ("pytorchjob", with_(env=(("PYTHONUNBUFFERED", "0"),)),
     "gpufleet_env: PYTHONUNBUFFERED is set by the operator of format=pytorchjob"),
    ("mpijob", with_(launcher="mpirun", env=(("OMPI_MCA_plm_rsh_args", "-p 2222"),)),
     "gpufleet_env: OMPI_MCA_plm_rsh_args is set by the operator of format=mpijob"),
    # Pod hostnames are DNS labels of at most 63 characters.
    ("mpijob", with_(launcher="mpirun", job=LONG, nnodes=12),
     "job: '%s' is too long for format=mpijob: its pod %s-worker-11 would have a 64-character hostname (at most "
     "63); use a job name of at most 53 characters" % (LONG, LONG)),
    ("trainjob", with_(max_restarts=0, job="b" * 56, nnodes=2),
     "job: '%s' is too long for format=trainjob: its pod %s-node-0-1 would have a 65-character hostname"
     % ("b" * 56, "b" * 56)),
    ("pytorchjob", with_(job="c" * 55, nnodes=2),
     "job: '%s' is too long for format=pytorchjob: its pod %s-worker-0 would have a 64-character hostname"
     % ("c" * 55, "c" * 55)),
    # TrainJob v2.0 has no restarts field: refused rather than dropped.
    ("trainjob", JOB, "max_restarts: 2 cannot be carried by format=trainjob: not carried: a TrainJob (Kubeflow "
                      "Trainer v2.0) has no field for it"),
])
def test_what_the_operators_would_refuse_or_override_is_refused_before_writing(fmt, job, message):
    with pytest.raises(export.ExportError) as error:
        export.render(job, fmt, json.dumps)
    assert str(error.value).startswith(message), str(error.value)


def test_names_at_the_limit_and_variables_of_other_formats_pass():
    # 53 + "-worker-9" = 62, and the launcher's "-launcher" = 62: within 63.
    export.render(with_(launcher="mpirun", job="d" * 53, nnodes=10), "mpijob", json.dumps)
    # PET_* is the operators' in trainjob and pytorchjob only; OMPI_MCA_* other than the operator's own pass.
    export.render(with_(env=(("PET_LOG", "1"),)), "sbatch", None)
    export.render(with_(launcher="mpirun", env=(("OMPI_MCA_btl_tcp_if_include", "eth0"),)), "mpijob", json.dumps)


def test_each_format_says_how_it_restarts():
    assert export.warnings(JOB, "pytorchjob") == [
        "max_restarts=2 with format=pytorchjob restarts each failed pod in place (restartPolicy OnFailure); the other "
        "pods' torchrun fails when its peer goes and restarts too, so backoffLimit, which counts every pod's "
        "restarts, is max_restarts x nodes (backoffLimit 6)"]
    assert export.warnings(with_(max_restarts=0), "pytorchjob") == []
    assert export.warnings(with_(launcher="mpirun"), "mpijob") == []
    header = export.render(with_(launcher="mpirun"), "mpijob", json.dumps).splitlines()[1]
    assert header == ("# max_restarts=2 restarts the whole job: the launcher's mpirun starts again, up to "
                      "backoffLimit = max_restarts times.")


def test_dest_a_folder_gets_the_default_name_and_a_missing_folder_is_refused(tmp_path):
    (tmp_path / "out").mkdir()
    assert export.resolve_dest(None, "train", "mpijob", str(tmp_path)) == str(tmp_path / "train-mpijob.yaml")
    assert export.resolve_dest("out", "train", "sbatch", str(tmp_path)) == str(tmp_path / "out" / "train.sbatch")
    assert export.resolve_dest("out/x.yaml", "train", "trainjob", str(tmp_path)) == str(tmp_path / "out" / "x.yaml")
    assert export.resolve_dest(str(tmp_path / "y.sbatch"), "t", "sbatch", "/") == str(tmp_path / "y.sbatch")
    with pytest.raises(export.ExportError) as error:
        export.resolve_dest("nowhere/x.yaml", "train", "trainjob", str(tmp_path))
    assert str(error.value) == ("dest: nowhere/x.yaml is in the folder %s, which does not exist (a folder as dest "
                                "gets train-trainjob.yaml)" % (tmp_path / "nowhere"))


STANDIN_MPIRUN = r"""#!/bin/bash
# A stand-in for Open MPI's mpirun, for the launcher's script only: it starts -np copies of the command here, one
# after another, with the variables Open MPI gives each rank (OMPI_COMM_WORLD_RANK, _LOCAL_RANK, _SIZE), ranks
# filling the hostfile's slots in order (--map-by slot). It records its own arguments.
echo "$*" > "$RECORD/args"
np=0; hostfile=""
while [ $# -gt 0 ]; do
  case $1 in
    -np) np=$2; shift 2 ;;
    --hostfile) hostfile=$2; shift 2 ;;
    -x|--map-by|--bind-to) shift 2 ;;
    --allow-run-as-root) shift ;;
    *) break ;;
  esac
done
slots=$(awk 'NF {sub("slots=", "", $2); print $2; exit}' "$hostfile")
for rank in $(seq 0 $((np - 1))); do
  OMPI_COMM_WORLD_RANK=$rank OMPI_COMM_WORLD_LOCAL_RANK=$((rank % slots)) OMPI_COMM_WORLD_SIZE=$np "$@" || exit $?
done
"""


def test_the_mpijob_launcher_gives_every_rank_the_contract(tmp_path):
    """The launcher's script as the MPI Operator runs it (its hostfile, the launcher's environment), with a stand-in
    mpirun that starts the ranks here as Open MPI would number them; a stand-in python prints what each rank sees.
    Checks the contract's variables per rank; not Open MPI itself (tests/cluster runs the real one)."""
    job = with_(launcher="mpirun", nnodes=3, nproc_per_node=2)
    launch = yaml.safe_load(export.render(job, "mpijob", yaml.safe_dump))["spec"]["mpiReplicaSpecs"]["Launcher"]
    container = launch["template"]["spec"]["containers"][0]
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join("llama-ft-worker-%d.llama-ft.team.svc slots=2\n" % i for i in range(3)))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mpirun").write_text(STANDIN_MPIRUN)
    (bin_dir / "python").write_text("#!/bin/bash\necho \"$RANK $LOCAL_RANK $WORLD_SIZE $NODE_RANK $MLP_ROLE_INDEX "
                                    "$MASTER_ADDR:$MASTER_PORT $MLP_WORKER_NUM $* \"\n")
    for tool in ("mpirun", "python"):
        (bin_dir / tool).chmod(0o755)
    env = {"PATH": "%s:/usr/bin:/bin" % bin_dir, "RECORD": str(tmp_path)}
    env.update({item["name"]: item["value"] for item in container["env"] if "value" in item})
    script = container["command"][2].replace("/etc/mpi/hostfile", str(hostfile))
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == ("[gpufleet] job llama-ft: 6 ranks on llama-ft-worker-0.llama-ft.team.svc,llama-ft-worker-1."
                        "llama-ft.team.svc,llama-ft-worker-2.llama-ft.team.svc, rendezvous "
                        "llama-ft-worker-0.llama-ft.team.svc:29500")
    master = "llama-ft-worker-0.llama-ft.team.svc:29500"
    assert lines[1:] == ["%d %d 6 %d %d %s 3 train.py --epochs 3 --name first try " % (r, r % 2, r // 2, r // 2,
                                                                                        master) for r in range(6)]
    args = (tmp_path / "args").read_text()
    assert "-x PATH -x LD_LIBRARY_PATH" in args
    # Open MPI refuses root without it (NGC images run as root); a user's ranks get none.
    assert ("--allow-run-as-root" in args) == (os.getuid() == 0)
