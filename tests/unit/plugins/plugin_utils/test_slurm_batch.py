"""train.yml -e scheduler=slurm on the controller: the job checked against Slurm's node table (a real
`scontrol --oneliner show node` of the container cluster, tests/fixtures/slurm/), and its sbatch script."""

import os
import subprocess

import pytest

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import slurm_batch

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "slurm")
with open(os.path.join(FIXTURES, "scontrol_show_node.txt")) as _handle:
    NODES = _handle.read()
ANSWER = {"rc": 0, "stdout": NODES, "stderr": ""}


def node(host, ip, ranks=2, gpus=0, jobs_dir="/root/.gpufleet/jobs"):
    return {"host": host, "ip": ip, "ranks": ranks, "gpus": gpus, "jobs_dir": jobs_dir}


GROUP = [node("node9", "10.213.77.19"), node("node8", "10.213.77.18"), node("node7", "10.213.77.17")]


def test_the_node_table_is_read_from_scontrol():
    table = slurm_batch.node_table(NODES)
    assert sorted(table) == ["node7", "node8", "node9"]
    assert table["node7"]["hostname"] == "head-a07" and table["node7"]["addr"] == "10.213.77.17"
    assert table["node7"]["cpus"] == 2 and table["node7"]["gpus"] == 0 and table["node7"]["state"] == "IDLE"


@pytest.mark.parametrize("gres,gpus", [("(null)", 0), ("gpu:8", 8), ("gpu:h100:8(S:0-1)", 8),
                                       ("gpu:a100:4,gpu:h100:4", 8), ("gpu:h100:8,shard:64", 8), ("", 0)])
def test_gpus_are_counted_from_gres(gres, gpus):
    assert slurm_batch.gres_gpus(gres) == gpus


def test_the_nodes_keep_the_inventory_order_whatever_slurm_s_order():
    found = slurm_batch.allocation(ANSWER, GROUP, None, "node9")
    assert found == {"problem": "", "slurm_nodes": ["node9", "node8", "node7"], "cpus_per_node": 2,
                     "gpus_per_node": 0}


def test_a_node_named_otherwise_in_the_inventory_is_found_by_its_address():
    found = slurm_batch.allocation(ANSWER, [node("gpu-b", "10.213.77.18")], None, "gpu-b")
    assert found["slurm_nodes"] == ["node8"] and not found["problem"]


@pytest.mark.parametrize("answer,group,gpus,problem", [
    ({"rc": None, "msg": "[Errno 2] No such file or directory: b'scontrol'"}, GROUP, None,
     "scheduler=slurm: node9 has no Slurm client (scontrol); provision the nodes with -e slurm_enabled=true"),
    ({"rc": 1, "stdout": "", "stderr": "slurm_load_node error: Unable to contact slurm controller (connect failure)"},
     GROUP, None, "scheduler=slurm: slurmctld does not answer (scontrol on node9 said: slurm_load_node error: "
     "Unable to contact slurm controller (connect failure))"),
    (ANSWER, GROUP[:2] + [node("node0", "10.213.77.10")], None,
     "scheduler=slurm: node0 (address 10.213.77.10) is not one of Slurm's nodes (node7, node8, node9)"),
    (ANSWER, GROUP, 1, "scheduler=slurm: gpus_per_node=1 is more than the 0 GPUs Slurm's Gres gives node9 "
     "(node node9, Gres=(null))"),
    (ANSWER, [node("node9", "10.213.77.19", ranks=3)], None,
     "scheduler=slurm: nproc_per_node needs 3 CPUs on node9 (one per rank), and Slurm's node node9 has 2"),
    (ANSWER, [node("node9", "10.213.77.19", gpus=8, ranks=1)], None,
     "scheduler=slurm: gpus_per_node=1 is more than the 0 GPUs Slurm's Gres gives node9"),
    (ANSWER, [node("node9", "10.213.77.19"), node("node8", "10.213.77.18", jobs_dir="/home/ml/.gpufleet/jobs")],
     None, "scheduler=slurm: the job folder must be the same path on every node"),
    ({"rc": 0, "stdout": NODES.replace("State=IDLE", "State=DOWN+DRAIN", 1)}, GROUP, None,
     "scheduler=slurm: node7 is DOWN+DRAIN in Slurm (node node7), so the job would never start"),
])
def test_what_slurm_cannot_run_is_refused_naming_the_host(answer, group, gpus, problem):
    found = slurm_batch.allocation(answer, group, gpus, "node9")
    assert found["problem"].startswith(problem), found["problem"]


def test_gpus_default_to_the_ranks_of_a_node_with_gpus():
    with_gpus = NODES.replace("Gres=(null)", "Gres=gpu:h100:8(S:0-1)")
    found = slurm_batch.allocation({"rc": 0, "stdout": with_gpus}, [node("node9", "10.213.77.19", ranks=8, gpus=8)],
                                   None, "node9")
    assert found["problem"].startswith("scheduler=slurm: nproc_per_node needs 8 CPUs")  # 2 CPUs in the fixture
    more_cpus = with_gpus.replace("CPUTot=2", "CPUTot=64")
    found = slurm_batch.allocation({"rc": 0, "stdout": more_cpus}, [node("node9", "10.213.77.19", ranks=8, gpus=8)],
                                   None, "node9")
    assert (found["problem"], found["gpus_per_node"], found["cpus_per_node"]) == ("", 8, 8)


PLAN = {"job": "llama ft", "run_id": "abc123", "max_restarts": 0}


def test_the_batch_script_asks_for_every_node_and_chooses_the_port_on_node_rank_0():
    script = slurm_batch.batch_script(PLAN, "/root/.gpufleet/jobs/llama ft", ["node9", "node8", "node7"], 2, 8)
    options = [line[len("#SBATCH "):] for line in script.splitlines() if line.startswith("#SBATCH ")]
    assert options == ["'--job-name=llama ft'", "--nodes=3", "--nodelist=node9,node8,node7", "--ntasks-per-node=1",
                       "--cpus-per-task=2", "--gres=gpu:8", "'--chdir=/root/.gpufleet/jobs/llama ft'",
                       "'--output=/root/.gpufleet/jobs/llama ft/slurm-%j.out'", "'--comment=gpufleet run abc123'"]
    assert "ports=$(srun --nodes=1 --ntasks=1 --nodelist=node9 \"$job_dir/slurm_task.sh\" ports 1)" in script
    assert script.rstrip().endswith(
        'exec srun --kill-on-bad-exit=1 --nodes=3 --ntasks-per-node=1 "$job_dir/slurm_task.sh"')
    assert subprocess.run(["bash", "-n"], input=script, text=True, check=False).returncode == 0


def test_given_ports_and_relaunch_ports():
    fixed = slurm_batch.batch_script(PLAN, "/j", ["node9"], 1, 0, master_port=29555)
    assert "ports=29555\n" in fixed and "--gres" not in fixed and "ports=$(" not in fixed
    restarts = slurm_batch.batch_script(dict(PLAN, max_restarts=2), "/j", ["node9"], 1, 0, master_port=29555)
    assert 'ports=29555,$(srun --nodes=1 --ntasks=1 --nodelist=node9 "$job_dir/slurm_task.sh" ports 2)' in restarts
    chosen = slurm_batch.batch_script(dict(PLAN, max_restarts=2), "/j", ["node9"], 1, 0)
    assert '"$job_dir/slurm_task.sh" ports 3)' in chosen
