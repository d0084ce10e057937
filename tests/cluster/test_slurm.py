"""Slurm from provision.yml (-e slurm_enabled=true --tags slurm) on three container nodes whose init is systemd,
with Debian's own packages (munge, slurmd, slurmctld, slurm-client): converge, idempotence, check mode, every node
idle in sinfo, a job step across all three, one MUNGE key everywhere. Two of the nodes call themselves something
other than their inventory name (Slurm's NodeHostname). What this does not check: GPUs (there are none here; the
Gres and gres.conf lines are unit-tested in tests/unit/plugins/plugin_utils/test_slurm_conf.py) and EL's packages (its
paths and package names are rendered and unit-tested there).

Then train.yml -e scheduler=slurm on the same three nodes, with an inventory in the reverse of Slurm's node order:
ranks in the inventory's order, a failing rank (bound: nothing of the job left within 10 s), status and stop of a
detached job, two jobs in Slurm's queue, and the inputs refused before anything is submitted. Without GPUs, what
keeps two jobs apart here is their CPUs (one per rank, all of a node's 2 at 2 ranks per node): the allocation
Slurm made is shown, not GPUs."""

import hashlib
import os
import re
import shutil

import pytest
import yaml

import gpu_standin
import testbed
from bounds import report as report_bound
from harness import REPO, Cluster
from hostview import wait_until
from jobfaults import FAULTY, train, wait_for, wait_gone, wait_training

# slurmd runs gpufleet's health check every 5 s here (300 s by default), so that a test sees it act.
ARGS = ("-e", "slurm_enabled=true", "-e", "slurm_health_check_interval=5", "--tags", "slurm")


@pytest.fixture(scope="module")
def slurm_cluster(own_nodes_state):
    info = testbed.start_nodes(own_nodes_state, list(testbed.SLURM_NODES), name="slurm.yml")
    try:
        yield Cluster(info, own_nodes_state)
    finally:
        testbed.remove_nodes(list(testbed.SLURM_NODES))


@pytest.fixture(scope="module")
def slurm_runs(slurm_cluster):
    # Bad input first, on untouched nodes: refused before anything is changed.
    refused = slurm_cluster.playbook("provision.yml", *ARGS, "-e", "slurm_controller=node99")
    runs = {"refused": refused}
    # Check mode on nodes that have none of Slurm's packages yet: it says what it would do and changes nothing.
    runs["check_first"] = slurm_cluster.playbook("provision.yml", *ARGS, "--check")
    runs["check_first"].slurmd_installed = [
        node for node in slurm_cluster.nodes
        if slurm_cluster.node_exec(node, "dpkg-query", "--show", "slurmd").returncode == 0]
    runs["converge"] = slurm_cluster.playbook("provision.yml", *ARGS)
    runs["idempotence"] = slurm_cluster.playbook("provision.yml", *ARGS)
    runs["check"] = slurm_cluster.playbook("provision.yml", *ARGS, "--check", "--diff")
    return runs


def _sinfo(slurm_cluster):
    head = slurm_cluster.nodes[0]
    return slurm_cluster.node_exec(head, "sinfo", "--noheader", "--Node", "--format", "%N %T").stdout.decode()


def test_a_controller_outside_the_group_is_refused_before_anything_changes(slurm_cluster, slurm_runs):
    refused = slurm_runs["refused"]
    assert refused.rc != 0
    assert "slurm_controller=\"node99\" must be one of the hosts of slurm_group=gpu_nodes (node7, node8, node9)" \
        in refused.out
    assert all(counts["changed"] == 0 for counts in refused.recap().values()), refused.recap()


def test_check_mode_on_fresh_nodes_reports_the_install_and_changes_nothing(slurm_cluster, slurm_runs):
    run = slurm_runs["check_first"]
    assert run.rc == 0, run.out[-4000:]
    assert all(run.recap()[node]["changed"] > 0 for node in slurm_cluster.nodes), run.recap()
    assert "would install munge, slurmd, slurm-client, slurmctld" in run.out
    assert run.slurmd_installed == [], "check mode installed slurmd on %s" % run.slurmd_installed


def test_converge_then_nothing_changes_and_check_mode_agrees(slurm_runs):
    assert slurm_runs["converge"].rc == 0, slurm_runs["converge"].out[-4000:]
    assert any(counts["changed"] for counts in slurm_runs["converge"].recap().values())
    for name in ("idempotence", "check"):
        run = slurm_runs[name]
        assert run.rc == 0, run.out[-4000:]
        assert all(counts["changed"] == 0 for counts in run.recap().values()), (name, run.recap())


def test_every_node_is_idle_and_a_step_runs_on_all_three(slurm_cluster, slurm_runs):
    assert slurm_runs["converge"].rc == 0
    assert sorted(_sinfo(slurm_cluster).split("\n")[:-1]) == ["node7 idle", "node8 idle", "node9 idle"], \
        _sinfo(slurm_cluster)
    step = slurm_cluster.node_exec("node8", "srun", "--nodes=3", "--ntasks-per-node=1", "--label", "hostname")
    assert step.returncode == 0, step.stderr.decode()
    assert sorted(step.stdout.decode().split()) == sorted(["0:", "1:", "2:", "head-a07", "gpu-b08", "node9"])


def test_slurm_conf_names_each_node_as_the_inventory_does_and_as_it_calls_itself(slurm_cluster, slurm_runs):
    assert slurm_runs["converge"].rc == 0
    text = slurm_cluster.node_exec("node9", "cat", "/etc/slurm/slurm.conf").stdout.decode()
    assert "SlurmctldHost=head-a07(%s)" % slurm_cluster.addresses["node7"] in text
    assert "NodeName=node8 NodeHostname=gpu-b08 NodeAddr=%s " % slurm_cluster.addresses["node8"] in text
    assert "NodeName=node9 NodeAddr=%s " % slurm_cluster.addresses["node9"] in text
    assert "PartitionName=gpufleet Nodes=node7,node8,node9 Default=YES" in text


def test_one_munge_key_owner_only_on_every_node_and_never_printed(slurm_cluster, slurm_runs):
    assert slurm_runs["converge"].rc == 0
    keys = {}
    for node in slurm_cluster.nodes:
        key = slurm_cluster.node_exec(node, "cat", "/etc/munge/munge.key").stdout
        mode = slurm_cluster.node_exec(node, "stat", "-c", "%a %U", "/etc/munge/munge.key").stdout.decode().split()
        assert mode == ["400", "munge"], (node, mode)
        keys[node] = hashlib.sha256(key).hexdigest()
        for run in slurm_runs.values():
            assert key.strip().decode() not in run.out
    assert len(set(keys.values())) == 1, keys


# -- train.yml through Slurm ------------------------------------------------------------------------------------------

CONTRACT = os.path.join(REPO, "tests", "cluster", "scripts", "contract_check.py")
SLURM = ("-e", "scheduler=slurm", "-e", "nproc_per_node=2")


def _inventory_with(slurm_cluster, name, hosts):
    """A copy of the Slurm nodes' inventory whose gpu_nodes are `hosts` (name -> entry), in that order."""
    with open(slurm_cluster.inventory) as handle:
        data = yaml.safe_load(handle)
    data["gpu_nodes"]["hosts"] = hosts
    path = os.path.join(slurm_cluster.state, name)
    with open(path, "w") as handle:
        yaml.safe_dump(data, handle, sort_keys=False)
    return path


@pytest.fixture(scope="module")
def slurm_train(slurm_cluster, slurm_runs):
    """The Slurm nodes with a training Python, and an inventory that lists them in the reverse of Slurm's order."""
    assert slurm_runs["converge"].rc == 0, slurm_runs["converge"].out[-3000:]
    run = slurm_cluster.playbook("provision.yml", "--tags", "python_env")
    assert run.rc == 0, run.out[-3000:]
    with open(slurm_cluster.inventory) as handle:
        hosts = yaml.safe_load(handle)["gpu_nodes"]["hosts"]
    reverse = _inventory_with(slurm_cluster, "slurm-reverse.yml", dict(reversed(list(hosts.items()))))
    return {"reverse": reverse, "hosts": hosts}


def _slurm_job(slurm_cluster, job_id):
    return slurm_cluster.node_exec("node7", "scontrol", "--oneliner", "show", "job", str(job_id)).stdout.decode()


def _table_row(out, node):
    found = re.search(r"^%s\s.*$" % node, out, re.M)
    return found.group(0).split() if found else None


def test_ranks_follow_the_inventory_not_slurm_s_node_table(slurm_cluster, slurm_train):
    run = slurm_cluster.playbook("train.yml", "-e", "script=%s" % CONTRACT, "-e", "job=sl-order", *SLURM,
                                 inventory=slurm_train["reverse"])
    assert run.rc == 0, run.out[-4000:]
    assert re.search(r"Slurm job \d+ submitted for job sl-order", run.out), run.out[-3000:]
    logs = {node: open(os.path.join(slurm_cluster.state, "logs", "sl-order", "%s.log" % node)).read()
            for node in slurm_cluster.nodes}
    # Inventory order node9, node8, node7: node_rank 0, 1, 2, whatever Slurm's own numbering (SLURM_NODEID).
    for node_rank, node in enumerate(("node9", "node8", "node7")):
        for rank in (2 * node_rank, 2 * node_rank + 1):
            assert "ok rank %d of 6 on node %d" % (rank, node_rank) in logs[node], logs[node][-2000:]
            nodeid = re.search(r"slurm job \d+ rank %d on %s nodeid (\d+)" % (rank, node), logs[node])
            assert nodeid, logs[node][-2000:]
            assert int(nodeid.group(1)) == 2 - node_rank  # Slurm's node table: node7, node8, node9
        assert _table_row(run.out, node)[:3] == [node, str(node_rank), "succeeded"], run.out[-2000:]
        assert "COMPLETED" in _table_row(run.out, node)
    batch = slurm_cluster.node_exec("node7", "sh", "-c", "cat /root/.gpufleet/jobs/sl-order/slurm-*.out").stdout
    assert re.search(rb"master port\(s\) \d+ on node9", batch), batch


def test_a_failing_rank_fails_the_play_naming_it_and_slurm_records_the_job_failed(slurm_cluster, slurm_train):
    job = "sl-fail"
    run = slurm_cluster.start_playbook(
        "train.yml", "-e", "script=%s" % FAULTY, "-e", "job=%s" % job, *SLURM,
        "-e", "script_args='--steps 400 --fail-rank 3 --fail-step 10'", log_name="%s.out" % job,
        inventory=slurm_train["reverse"])
    failed = wait_for(slurm_cluster, job, lambda: (lambda s: s if (s or {}).get("attempts") else None)(
        slurm_cluster.view.job_state("node8", job)), what="node8's part ending", run=run, timeout=180)
    fault_at = failed["attempts"][0]["first_exit_at"]
    report_bound("Slurm: rank exit 1 -> nothing left on any node", wait_gone(slurm_cluster, job) - fault_at, 10)
    done = run.finish()
    assert done.rc != 0
    assert "job sl-fail failed on node8 (node_rank 1): global rank 3 (local rank 1) exited with code 1" in done.out, \
        done.out[-3000:]
    job_id = failed["slurm_job_id"]
    assert "JobState=FAILED" in wait_for(slurm_cluster, job, lambda: (lambda t: t if "JobState=FAILED" in t else None)(
        _slurm_job(slurm_cluster, job_id)), what="Slurm recording job %s as failed" % job_id, timeout=60)
    assert all(os.path.exists(os.path.join(slurm_cluster.state, "logs", job, "%s.log" % node))
               for node in slurm_cluster.nodes)


def test_check_mode_submits_nothing_and_writes_no_job_folder(slurm_cluster, slurm_train):
    job = "sl-check"
    run = slurm_cluster.playbook("train.yml", "-e", "script=%s" % FAULTY, "-e", "job=%s" % job, *SLURM,
                                 "--check", "--diff")
    assert run.rc == 0, run.out[-3000:]
    assert "--nnodes=3" in run.out and "--node-rank=2" in run.out  # the launch's diff, per node
    assert slurm_cluster.node_exec("node7", "squeue", "--noheader", "--all", "--states=all",
                                   "--name=%s" % job).stdout == b""
    for node in slurm_cluster.nodes:
        assert slurm_cluster.node_exec(node, "test", "-e", "/root/.gpufleet/jobs/%s" % job).returncode != 0


def test_a_launch_that_fails_on_one_node_cancels_the_submitted_slurm_job(slurm_cluster, slurm_train):
    """The job is submitted held, then node9's launch fails (its jobs folder's path is a file there, which the probe
    does not look into): the play fails naming node9, the Slurm job is cancelled (launch_slurm.yml's rescue), and
    no part of the job is left queued or running on any node (abort.yml). What this does not check: a failure of
    scancel itself, which the failure message would add."""
    job, jobs_dir = "sl-abort", "/srv/gpufleet-jobs"  # the same path on every node, as Slurm's batch script needs
    slurm_cluster.node_exec("node9", "touch", jobs_dir, check=True)
    try:
        # The script travels inside the launch (a single small file): nothing is copied before the submit.
        run = slurm_cluster.playbook("train.yml", "-e", "script=%s" % FAULTY, "-e", "job=%s" % job, *SLURM,
                                     "-e", "script_args='--steps 400'", "-e", "gpufleet_jobs_dir=%s" % jobs_dir)
    finally:
        slurm_cluster.node_exec("node9", "rm", "-f", jobs_dir, check=True)
    assert run.rc != 0, run.out[-3000:]
    flat = " ".join(run.out.split())
    assert "node9: the launch failed, so the job was stopped on every node" in flat, run.out[-3000:]
    queue = slurm_cluster.node_exec("node7", "squeue", "--noheader", "--all", "--states=all", "--name=%s" % job,
                                    "--format=%i %T").stdout.decode().split()
    assert len(queue) == 2 and queue[1] == "CANCELLED", (queue, run.out[-3000:])
    assert "JobState=CANCELLED" in _slurm_job(slurm_cluster, queue[0])
    assert not slurm_cluster.view.processes(job), slurm_cluster.view.describe(job)
    # The parts node7 and node8 had queued never started; their status settles on Slurm's word: stopped.
    status = slurm_cluster.playbook("status.yml", "-e", "job=%s" % job, "-e", "gpufleet_jobs_dir=%s" % jobs_dir)
    for node in ("node7", "node8"):
        row = _table_row(status.out, node)
        assert row and row[3] == "stopped", (node, status.out[-2000:])
        slurm_cluster.node_exec(node, "rm", "-rf", jobs_dir, check=True)


def test_status_shows_both_states_and_stop_cancels_a_detached_job(slurm_cluster, slurm_train):
    job = "sl-detached"
    run = slurm_cluster.playbook("train.yml", "-e", "script=%s" % FAULTY, "-e", "job=%s" % job, *SLURM,
                                 "-e", "script_args='--steps 400'", "-e", "wait=false")
    assert run.rc == 0, run.out[-3000:]
    job_id = re.search(r"Slurm job (\d+) submitted", run.out).group(1)
    wait_for(slurm_cluster, job, lambda: all((slurm_cluster.view.job_state(node, job) or {}).get("state") == "running"
                                             for node in slurm_cluster.nodes), what="every node's part running")
    status = slurm_cluster.playbook("status.yml", "-e", "job=%s" % job)
    assert status.rc == 0, status.out[-3000:]
    for node in slurm_cluster.nodes:
        row = _table_row(status.out, node)  # node, job, rank, state, ..., slurm (id, state), log
        assert row[3] == "running" and row[-3:-1] == [job_id, "RUNNING"], status.out[-2000:]
    stop = slurm_cluster.playbook("stop.yml", "-e", "job=%s" % job)
    assert stop.rc == 0, stop.out[-3000:]
    assert not slurm_cluster.view.processes(job), slurm_cluster.view.describe(job)
    for node in slurm_cluster.nodes:
        assert _table_row(stop.out, node)[2] == "stopped", stop.out[-2000:]
    assert "JobState=CANCELLED" in _slurm_job(slurm_cluster, job_id)


def test_a_second_job_waits_in_slurm_s_queue_then_runs(slurm_cluster, slurm_train):
    first = slurm_cluster.start_playbook("train.yml", "-e", "script=%s" % FAULTY, "-e", "job=sl-first", *SLURM,
                                         "-e", "script_args='--steps 60'", log_name="sl-first.out")
    wait_for(slurm_cluster, "sl-first", lambda: all(
        (slurm_cluster.view.job_state(node, "sl-first") or {}).get("state") == "running"
        for node in slurm_cluster.nodes), what="the first job running on every node", run=first, timeout=120)
    second = slurm_cluster.playbook("train.yml", "-e", "script=%s" % FAULTY, "-e", "job=sl-second", *SLURM,
                                    "-e", "script_args='--steps 8'")
    done = first.finish()
    assert done.rc == 0, done.out[-3000:]
    assert second.rc == 0, second.out[-3000:]
    assert re.search(r"Slurm job (\d+): pending \(Resources\)", second.out), second.out[-3000:]
    assert re.search(r"Slurm job \d+ started", second.out), second.out[-3000:]
    # The allocations Slurm made: every CPU of every node for each job, one after the other.
    ids = {job: re.search(r"^node7 .* (\d+) COMPLETED", out, re.M).group(1)
           for job, out in (("sl-first", done.out), ("sl-second", second.out))}
    shown = {job: _slurm_job(slurm_cluster, job_id) for job, job_id in ids.items()}
    print("the allocations Slurm made:\n%s" % "\n".join(shown.values()))
    for text in shown.values():
        assert "NodeList=node[7-9]" in text and "NumCPUs=6" in text, text
    ended_first = re.search(r"EndTime=(\S+)", shown["sl-first"]).group(1)
    started_second = re.search(r"StartTime=(\S+)", shown["sl-second"]).group(1)
    assert started_second >= ended_first, (ended_first, started_second)


def test_max_restarts_relaunches_the_gang_inside_the_slurm_step_on_a_port_chosen_at_start(slurm_cluster,
                                                                                             slurm_train):
    job = "sl-restart"
    run = slurm_cluster.playbook("train.yml", "-e", "script=%s" % FAULTY, "-e", "job=%s" % job, *SLURM,
                                 "-e", "max_restarts=1",
                                 "-e", "script_args='--steps 16 --fail-rank 3 --fail-step 6 --fail-attempt 1'")
    assert run.rc == 0, run.out[-3000:]
    for node in slurm_cluster.nodes:
        row = _table_row(run.out, node)
        assert row[2] == "succeeded" and row[4] == "2" and "COMPLETED" in row, row  # state, attempts, Slurm's
    states = {node: slurm_cluster.view.job_state(node, job) for node in slurm_cluster.nodes}
    first = {state["attempts"][0]["master_port"] for state in states.values()}
    second = {state["attempts"][1]["master_port"] for state in states.values()}
    # Both ports were chosen on node_rank 0 when Slurm started the job; the same on every node, the second fresh.
    assert len(first) == 1 and len(second) == 1 and first != second, states
    assert len({state["slurm_job_id"] for state in states.values()}) == 1


def test_bad_slurm_inputs_are_refused_before_anything_is_submitted(slurm_cluster, slurm_train):
    # A node Slurm does not know is refused by the same check (slurm_batch.allocation, its unit test): this module's
    # nodes are all Slurm's, and it does not start the session cluster (it runs beside it in make test).
    script = ("-e", "script=%s" % CONTRACT)
    outputs = {}
    outputs["scheduler"] = slurm_cluster.playbook("train.yml", *script, "-e", "scheduler=pbs")
    outputs["gpus"] = slurm_cluster.playbook("train.yml", *script, *SLURM, "-e", "gpus_per_node=1")
    slurm_cluster.node_exec("node7", "systemctl", "stop", "slurmctld", check=True)
    try:
        outputs["down"] = slurm_cluster.playbook("train.yml", *script, *SLURM)
    finally:
        slurm_cluster.node_exec("node7", "systemctl", "start", "slurmctld", check=True)
        wait_for(slurm_cluster, "-", lambda: slurm_cluster.node_exec("node7", "scontrol", "ping").returncode == 0,
                 what="slurmctld answering again", timeout=60)
    expected = {
        "scheduler": "scheduler: 'pbs' is not one of ssh, slurm",
        "gpus": "scheduler=slurm: gpus_per_node=1 is more than the 0 GPUs Slurm's Gres gives node7 (node node7, "
                "Gres=(null))",
        "down": "scheduler=slurm: slurmctld does not answer (scontrol on node7 said: slurm_load_node error: Unable "
                "to contact slurm controller",
    }
    for name, text in expected.items():
        run = outputs[name]
        assert run.rc != 0 and text in run.out.replace("\n    ", " "), (name, run.out[-3000:])
        assert all(counts["changed"] == 0 for counts in run.recap().values()), (name, run.recap())
    # Nothing was submitted (the refused runs' job is named after the script).
    assert slurm_cluster.node_exec("node7", "squeue", "--noheader", "--all", "--states=all",
                                   "--name=contract_check").stdout == b""
    shutil.rmtree(os.path.join(slurm_cluster.state, "logs", "contract_check"), ignore_errors=True)


def test_the_exported_sbatch_script_trains_under_plain_sbatch(slurm_cluster, slurm_train):
    """export.yml's sbatch script, submitted with Slurm's own sbatch on node7, not through gpufleet: the example
    training across the three nodes, two ranks each. The interface setting comes from the inventory's
    nccl_env_socket_ifname, as on a cluster whose hostnames resolve to 127.0.1.1 (these nodes' do)."""
    script = os.path.join(slurm_cluster.state, "sl-export.sbatch")
    run = slurm_cluster.playbook("export.yml", "-e", "script=train.py", "-e", "format=sbatch", "-e", "job=sl-export",
                                 "-e", "nproc_per_node=2", "-e", "nccl_env_socket_ifname=eth0",
                                 "-e", "dest=%s" % script)
    assert run.rc == 0, run.out[-3000:]
    for node in slurm_cluster.nodes:  # the script at the same path on every node, as on shared storage
        slurm_cluster.node_exec(node, "mkdir", "-p", "/root/export", check=True)
        testbed.podman("cp", os.path.join(REPO, "examples", "train.py"), "%s%s:/root/export/train.py"
                       % (testbed.PREFIX, node))
    testbed.podman("cp", script, "%snode7:/root/export/sl-export.sbatch" % testbed.PREFIX)
    done = slurm_cluster.node_exec("node7", "sh", "-c", "cd /root/export && sbatch --parsable --wait sl-export.sbatch")
    job_id = done.stdout.decode().strip().split(";")[0]
    # One output file per node, named by Slurm's %N: the name the node calls itself (head-a07, gpu-b08, node9).
    outputs = {node: slurm_cluster.node_exec(node, "sh", "-c", "cat /root/export/sl-export-%s-$(hostname -s).out"
                                             % job_id).stdout.decode() for node in slurm_cluster.nodes}
    batch = slurm_cluster.node_exec("node7", "cat", "/root/export/sl-export-%s.out" % job_id).stdout.decode()
    assert done.returncode == 0, (done.stderr.decode(), batch, outputs)
    assert "JobState=COMPLETED" in _slurm_job(slurm_cluster, job_id)
    ranks = {node: sorted(int(found) for found in re.findall(r"rank (\d+) of world size 6 on", text))
             for node, text in outputs.items()}
    # Two ranks on each node, in Slurm's order of the allocation (node7, node8, node9).
    assert ranks == {"node7": [0, 1], "node8": [2, 3], "node9": [4, 5]}, outputs
    assert "rendezvous %s:" % slurm_cluster.addresses["node7"] in batch, batch


def test_a_node_the_gpu_gate_refuses_is_drained_in_slurm_and_a_later_job_does_not_get_it(slurm_cluster, slurm_train):
    """node9 gets two stand-in GPUs (tests/cluster/gpu_standin.py), one with uncorrectable ECC errors: train.yml under
    Slurm refuses it before anything is submitted, and drains it in Slurm with the fault as reason, as NHC does. A
    later job, with node9's GPUs healthy again, is refused as well: Slurm would place nothing there. Undraining is the
    operator's (the test does it after)."""
    gpu_standin.install("node9", {"gpus": [{}, {"ecc.errors.uncorrected.volatile.total": 3}]})
    try:
        refused = slurm_cluster.playbook("train.yml", "-e", "script=%s" % CONTRACT, "-e", "job=sl-drain", *SLURM,
                                         *gpu_standin.KERNEL_LOG_ARGS, inventory=slurm_train["reverse"])
        out = " ".join(refused.out.split())
        assert refused.rc != 0
        assert "node9 GPU 1 (0000:19:00.0): 3 uncorrectable ECC errors since the driver loaded" in out, out[-3000:]
        assert "Slurm job" not in out  # nothing was submitted
        shown = slurm_cluster.node_exec("node7", "scontrol", "--oneliner", "show", "node", "node9").stdout.decode()
        assert re.search(r"State=\S*DRAIN", shown), shown
        assert "Reason=gpufleet: GPU 1 (0000:19:00.0): 3 uncorrectable ECC errors since the driver loaded" in shown, shown
        gpu_standin.write_state("node9", {"gpus": [{}, {}]})
        later = slurm_cluster.playbook("train.yml", "-e", "script=%s" % CONTRACT, "-e", "job=sl-drain", *SLURM,
                                       *gpu_standin.KERNEL_LOG_ARGS, inventory=slurm_train["reverse"])
        assert later.rc != 0
        assert re.search(r"scheduler=slurm: node9 is \S*DRAIN\S* in Slurm \(node node9\), so the job would never start",
                         " ".join(later.out.split())), later.out[-3000:]
    finally:
        gpu_standin.remove("node9")
        slurm_cluster.node_exec("node7", "scontrol", "update", "NodeName=node9", "State=RESUME")
    for node in slurm_cluster.nodes:
        assert slurm_cluster.node_exec(node, "test", "-e", "/root/.gpufleet/jobs/sl-drain").returncode != 0


def test_a_node_whose_gpu_raises_an_xid_during_a_slurm_job_is_drained_with_it_as_reason(slurm_cluster, slurm_train):
    """node9 gets two healthy stand-in GPUs and trains; an XID 79 line in its kernel log during the Slurm job fails
    the job on every node naming node9's GPU, and train.yml's wait drains node9 in Slurm with the XID as reason. What
    this does not check: a real GPU falling off the bus (no NVIDIA hardware here)."""
    job = "sl-xid"
    gpu_standin.install("node9", {"gpus": [{}, {}]})
    try:
        # Slurm gives these nodes no GPU (Gres=(null)): the stand-in GPUs are for the watch, not for Slurm.
        run = train(slurm_cluster, job, "-e", "scheduler=slurm", "-e", "gpus_per_node=0", *gpu_standin.KERNEL_LOG_ARGS)
        wait_training(slurm_cluster, job, steps=5, run=run)
        gpu_standin.log_kernel("node9", gpu_standin.xid_line("0000:19:00", 79))
        done = run.finish()
        out = " ".join(done.out.split())
        fault = "node9 GPU 1 (0000:19:00.0): XID 79, GPU has fallen off the bus"
        assert done.rc != 0 and "job %s failed on node9 (node_rank 2): %s" % (job, fault) in out, done.out[-3000:]
        shown = slurm_cluster.node_exec("node7", "scontrol", "--oneliner", "show", "node", "node9").stdout.decode()
        assert re.search(r"State=\S*DRAIN", shown) and "Reason=gpufleet: %s" % fault in shown, shown
        for node in ("node7", "node8"):  # only the faulty node
            shown = slurm_cluster.node_exec("node7", "scontrol", "--oneliner", "show", "node", node).stdout.decode()
            assert "DRAIN" not in shown, shown
    finally:
        gpu_standin.remove("node9")
        slurm_cluster.node_exec("node7", "scontrol", "update", "NodeName=node9", "State=RESUME")
        for node in slurm_cluster.nodes:
            slurm_cluster.node_exec(node, "rm", "-rf", "/root/.gpufleet/jobs/%s" % job)


def _node(slurm_cluster, name):
    return slurm_cluster.node_exec("node7", "scontrol", "--oneliner", "show", "node", name).stdout.decode()


def test_slurm_s_health_check_drains_a_node_whose_gpu_reports_uncorrectable_ecc_and_resumes_it(slurm_cluster,
                                                                                               slurm_runs):
    """slurmd runs gpufleet's HealthCheckProgram (the launch's gate as one program, roles/slurm) on every node: node8
    (which calls itself gpu-b08) gets two stand-in GPUs, one with uncorrectable ECC errors, and is drained with the
    fault as reason, with no playbook running; Slurm places nothing there; once its GPUs are healthy the program
    resumes it. What this does not check: a real GPU (no NVIDIA hardware here)."""
    assert slurm_runs["converge"].rc == 0
    conf = slurm_cluster.node_exec("node9", "cat", "/etc/slurm/slurm.conf").stdout.decode()
    assert "HealthCheckProgram=/usr/local/sbin/gpufleet-health-check\nHealthCheckInterval=5\n" \
           "HealthCheckNodeState=ANY\n" in conf, conf
    reason = "gpufleet health: GPU 1 (0000:19:00.0): 2 uncorrectable ECC errors since the driver loaded"
    gpu_standin.install("node8", {"gpus": [{}, {"ecc.errors.uncorrected.volatile.total": 2}]})
    try:
        shown = wait_until(lambda: (lambda text: text if "DRAIN" in text else None)(_node(slurm_cluster, "node8")),
                           60, "node8 drained by slurmd's health check",
                           explain=lambda: _node(slurm_cluster, "node8") + slurm_cluster.node_exec(
                               "node8", "tail", "-5", "/var/log/gpufleet-health-check.log").stdout.decode())
        assert "Reason=%s [root@" % reason in shown, shown
        step = slurm_cluster.node_exec("node7", "srun", "--nodes=3", "--immediate=5", "hostname")
        assert step.returncode != 0, "Slurm placed a step on the drained node8"
        gpu_standin.write_state("node8", {"gpus": [{}, {}]})
        wait_until(lambda: "DRAIN" not in _node(slurm_cluster, "node8"), 60, "node8 resumed by the health check",
                   explain=lambda: _node(slurm_cluster, "node8"))
    finally:
        gpu_standin.remove("node8")
        slurm_cluster.node_exec("node7", "scontrol", "update", "NodeName=node8", "State=RESUME")
    log = slurm_cluster.node_exec("node8", "cat", "/var/log/gpufleet-health-check.log").stdout.decode()
    assert "node8: drained: %s" % reason in log and "node8: passed, resumed" in log, log[-3000:]


REBOOT_RECORDS_SLURM = """#!/bin/sh
# maintain.yml's reboot on a container, which cannot reboot: what Slurm says of this node at that moment, and a new
# boot id.
scontrol --oneliner show node %s > /var/lib/gpufleet-test/at-reboot
srun --nodelist=%s --immediate=5 hostname >> /var/lib/gpufleet-test/at-reboot 2>&1
echo "srun rc=$?" >> /var/lib/gpufleet-test/at-reboot
date +%%s%%N > /var/lib/gpufleet-test/boot-id
"""


def test_maintain_drains_each_node_with_the_maintenance_as_reason_while_it_changes_and_resumes_it(slurm_cluster,
                                                                                                  slurm_runs):
    """A reboot alone (maintain_reboot=always, --skip-tags all: no role runs), one node at a time: at its reboot
    each node is drained in Slurm with the maintenance as reason and Slurm places no step there (the health check
    program, every 5 s here, leaves that drain alone); after its check it is resumed. node9, drained by an operator
    first, keeps its drain and reason."""
    assert slurm_runs["converge"].rc == 0
    for node in slurm_cluster.nodes:
        slurm_cluster.node_exec(node, "sh", "-c", "mkdir -p /var/lib/gpufleet-test && echo 0 > /var/lib/gpufleet-test/"
                                "boot-id && printf '%s' \"$0\" > /usr/local/sbin/gpufleet-test-reboot && chmod 755 "
                                "/usr/local/sbin/gpufleet-test-reboot", REBOOT_RECORDS_SLURM % (node, node), check=True)
    slurm_cluster.node_exec("node7", "scontrol", "update", "NodeName=node9", "State=DRAIN", "Reason=operator: fan",
                            check=True)
    try:
        run = slurm_cluster.playbook(
            "maintain.yml", "-e", "slurm_enabled=true", "-e", "maintain_reboot=always", "--skip-tags", "all",
            "-e", "maintain_reboot_command=/usr/local/sbin/gpufleet-test-reboot",
            "-e", "maintain_boot_time_command='cat /var/lib/gpufleet-test/boot-id'")
        assert run.rc == 0, run.out[-5000:]
        for node in slurm_cluster.nodes:
            seen = slurm_cluster.node_exec(node, "cat", "/var/lib/gpufleet-test/at-reboot").stdout.decode()
            reason = "operator: fan" if node == "node9" else "gpufleet maintenance: provision.yml --skip-tags all"
            assert re.search(r"State=\S*DRAIN", seen) and "Reason=%s [root@" % reason in seen, "%s: %s" % (node, seen)
            assert "srun rc=0" not in seen, (node, seen)
        assert "DRAIN" not in _node(slurm_cluster, "node7") and "DRAIN" not in _node(slurm_cluster, "node8")
        assert "Reason=operator: fan [root@" in _node(slurm_cluster, "node9")
        assert re.search(r"^node9\s+back in service\s", run.out, re.M), run.out[-3000:]
    finally:
        slurm_cluster.node_exec("node7", "scontrol", "update", "NodeName=node9", "State=RESUME")
        for node in slurm_cluster.nodes:
            slurm_cluster.node_exec(node, "rm", "-rf", "/var/lib/gpufleet-test", "/usr/local/sbin/gpufleet-test-reboot")
