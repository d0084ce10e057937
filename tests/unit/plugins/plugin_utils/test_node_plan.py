"""The planner's second half (plugin_utils/_control/node_plan.py): what every node's probe decides, from probe fixtures of
ssh, Slurm and container jobs, without a cluster. The probes are shaped as gpufleet.cluster.node_probe returns
them; the Slurm answer is a real `scontrol --oneliner show node` of the container cluster (tests/fixtures/slurm/)."""

import os

import pytest

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import node_plan

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "slurm")
with open(os.path.join(FIXTURES, "scontrol_show_node.txt")) as _handle:
    SCONTROL = {"rc": 0, "stdout": _handle.read(), "stderr": ""}

SETTINGS = node_plan.NodeSettings(python="python3", container_engine="podman")


def probe(gpus=8, running=False, torch=True, **changes):
    found = {
        "gpu_count": gpus,
        "python": {"found": True, "path": "/usr/bin/python3", "version": "3.11.2", "torch": torch},
        "jobs_dir": "/root/.gpufleet/jobs",
        "iface": "eth0",
        "hostname_address": "127.0.1.1",
        "env_file_names": [],
        "launcher_missing": "",
        "job": {"running": running},
    }
    found.update(changes)
    return found


def plan(hosts=("node9", "node8", "node7"), **changes):
    ips = {"node9": "10.213.77.19", "node8": "10.213.77.18", "node7": "10.213.77.17"}
    planned = {
        "job": "demo", "nodes": [{"host": host, "ip": ips.get(host, "192.0.2.%d" % (rank + 10)), "node_rank": rank}
                                 for rank, host in enumerate(hosts)],
        "hosts": list(hosts), "nnodes": len(hosts), "master_host": hosts[0], "master_port": None,
        "nproc_per_node": None, "env": {}, "launcher": "torchrun", "scheduler": "ssh", "container": None,
        "gpus_per_node": None, "max_restarts": 0,
    }
    planned.update(changes)
    return planned


def master_probe(**changes):
    return probe(free_port=41000, free_ports=[41001, 41002], **changes)


# --- ssh jobs -------------------------------------------------------------------------------------------------------

def test_ranks_world_size_and_slots_follow_each_nodes_gpus_in_rank_order():
    probes = {"node9": master_probe(gpus=8), "node8": probe(gpus=4), "node7": probe(gpus=0)}
    decided = node_plan.decide(plan(max_restarts=2), probes, SETTINGS, force=False)
    assert decided.problems == {} and decided.refusal == ""
    # A node without GPUs still runs one rank.
    assert decided.nproc == {"node9": 8, "node8": 4, "node7": 1}
    assert decided.slots == [8, 4, 1] and decided.world_size == 13
    assert (decided.master_port, decided.restart_ports) == (41000, [41001, 41002])
    assert decided.check_ports is True and decided.slurm is None


def test_nproc_per_node_wins_then_gpufleet_gpus_then_the_probe():
    probes = {"node9": master_probe(gpus=8), "node8": probe(gpus=8), "node7": probe(gpus=8)}
    assert node_plan.decide(plan(nproc_per_node=2), probes, SETTINGS, False).slots == [2, 2, 2]
    settings = node_plan.NodeSettings("python3", "docker", gpus={"node9": "4", "node8": None, "node7": 0})
    decided = node_plan.decide(plan(), probes, settings, False)
    assert decided.slots == [4, 8, 8] and decided.world_size == 20


def test_a_gpufleet_gpus_that_is_not_a_number_names_the_host_and_the_variable():
    settings = node_plan.NodeSettings("python3", "docker", gpus={"node8": "eight"})
    probes = {"node9": master_probe(), "node8": probe(), "node7": probe()}
    decided = node_plan.decide(plan(), probes, settings, False)
    assert decided.problems == {"node8": "node8: gpufleet_gpus='eight' is not a whole number of GPUs"}


def test_a_given_master_port_is_used_and_the_relaunch_ports_are_free_ones():
    probes = {"node9": master_probe(), "node8": probe(), "node7": probe()}
    decided = node_plan.decide(plan(master_port=29400), probes, SETTINGS, False)
    assert (decided.master_port, decided.restart_ports) == (29400, [41001, 41002])


def test_a_single_node_job_checks_no_ports_between_nodes():
    decided = node_plan.decide(plan(hosts=("node9",)), {"node9": master_probe()}, SETTINGS, False)
    assert decided.check_ports is False and decided.world_size == 8


def test_a_job_still_running_is_refused_naming_the_nodes_and_keeps_its_ports():
    running = {"running": True, "master_port": 29500, "restart_ports": [29501]}
    probes = {"node9": master_probe(job=running), "node8": probe(job=running), "node7": probe()}
    decided = node_plan.decide(plan(), probes, SETTINGS, False)
    assert decided.running_hosts == ["node9", "node8"]
    assert decided.refusal == ("job demo is still running on node9, node8; stop it with playbooks/stop.yml -e job=demo, "
                               "or launch again with -e force=true, which stops only that job first")
    assert (decided.master_port, decided.restart_ports) == (29500, [29501])
    assert decided.check_ports is False


def test_a_forced_relaunch_is_not_refused_and_takes_free_ports():
    running = {"running": True, "master_port": 29500, "restart_ports": [29501]}
    probes = {"node9": master_probe(job=running), "node8": probe(), "node7": probe()}
    decided = node_plan.decide(plan(), probes, SETTINGS, True)
    assert decided.refusal == "" and decided.running_hosts == ["node9"]
    assert (decided.master_port, decided.restart_ports) == (41000, [41001, 41002])


# One problem per node, the first in the role's order; the others still get theirs.
@pytest.mark.parametrize("changes, planned, problem", [
    ({"python": {"found": False, "error": "No such file"}}, {},
     "node8: gpufleet_python=python3 was not found or does not run on the node No such file"),
    ({"python": {"found": False}}, {}, "node8: gpufleet_python=python3 was not found or does not run on the node"),
    ({"python": {"found": True, "torch": False, "path": "/opt/py/bin/python3"}}, {},
     "node8: gpufleet_python=python3 (/opt/py/bin/python3) cannot import torch; install it there or point "
     "gpufleet_python at a Python that has it"),
    ({"iface": ""}, {},
     "node8: its hostname resolves to 127.0.1.1 and no interface of the node holds its cluster address 10.213.77.18, "
     "so Gloo and NCCL would advertise a loopback address; run playbooks/provision.yml --tags etc_hosts,nccl_env, or "
     "set GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME in gpufleet_env"),
    ({"launcher_missing": "needs mpirun (Open MPI) on the node"}, {"launcher": "mpirun"},
     "node8: launcher=mpirun needs mpirun (Open MPI) on the node"),
    ({"gpu_count": 4}, {"nproc_per_node": 8},
     "node8: nproc_per_node=8 is more than the 4 GPUs nvidia-smi lists on the node"),
    ({"port_in_use": True}, {"master_port": 29500},
     "node8: master_port=29500 is already in use on the master node; omit master_port to have a free port chosen, "
     "or name another"),
])
def test_each_node_problem_names_the_host_and_the_variable(changes, planned, problem):
    probes = {"node9": master_probe(), "node8": probe(**changes), "node7": probe()}
    assert node_plan.decide(plan(**planned), probes, SETTINGS, False).problems == {"node8": problem}


@pytest.mark.parametrize("changes, planned", [
    ({"python": {"found": True, "torch": False}}, {"launcher": "none"}),  # launcher none needs no torch
    ({"iface": "", "hostname_address": "10.213.77.18"}, {}),  # the hostname resolves to no loopback address
    ({"iface": "", "env_file_names": ["GLOO_SOCKET_IFNAME"]}, {}),  # the user named the interface
    ({"iface": ""}, {"env": {"GLOO_SOCKET_IFNAME": "ib0"}}),
    ({"gpu_count": 0}, {"nproc_per_node": 8}),  # a node without GPUs runs any number of CPU ranks
    ({"port_in_use": True, "job": {"running": True}}, {"master_port": 29500}),  # the job itself holds it
])
def test_what_is_not_a_problem(changes, planned):
    probes = {"node9": master_probe(), "node8": probe(**changes), "node7": probe()}
    assert node_plan.decide(plan(**planned), probes, node_plan.NodeSettings("python3", "docker"), True).problems == {}


def test_the_first_problem_of_a_node_is_the_one_reported():
    broken = probe(python={"found": False}, iface="", launcher_missing="x", gpu_count=1)
    problems = node_plan.decide(plan(nproc_per_node=8), {"node9": master_probe(), "node8": broken, "node7": probe()},
                                SETTINGS, False).problems
    assert list(problems) == ["node8"] and "gpufleet_python=python3 was not found" in problems["node8"]


def test_a_node_without_a_probe_is_left_out_of_the_job_wide_sets():
    decided = node_plan.decide(plan(), {"node9": master_probe(), "node7": probe(running=True)}, SETTINGS, False)
    assert decided.running_hosts == ["node7"] and decided.nproc == {"node9": 8, "node7": 8}


# --- container jobs -------------------------------------------------------------------------------------------------

CONTAINER = {"image": "registry.example/train:1", "archive": None, "pull": "missing"}


def test_with_an_image_the_hosts_python_and_launcher_do_not_count_but_the_engine_does():
    host_broken = dict(python={"found": False}, launcher_missing="needs mpirun", container={"image_id": "", "error": ""})
    probes = {"node9": master_probe(container={"image_id": "", "error": ""}), "node8": probe(**host_broken),
              "node7": probe(container={"image_id": "", "error": "Cannot connect to the Docker daemon"})}
    decided = node_plan.decide(plan(container=CONTAINER), probes, SETTINGS, False)
    assert decided.problems == {"node7": "node7: container_engine=podman: Cannot connect to the Docker daemon"}
    assert decided.world_size == 24


# --- Slurm jobs -----------------------------------------------------------------------------------------------------

def test_under_slurm_node_0_picks_the_ports_and_slurm_is_asked_for_the_nodes_in_rank_order():
    probes = {host: probe(gpus=0) for host in ("node9", "node8", "node7")}
    decided = node_plan.decide(plan(scheduler="slurm", nproc_per_node=2), probes, SETTINGS, False, SCONTROL)
    assert (decided.master_port, decided.restart_ports, decided.check_ports) == (0, [], False)
    assert decided.slurm == {"problem": "", "slurm_nodes": ["node9", "node8", "node7"], "cpus_per_node": 2,
                             "gpus_per_node": 0}
    given = node_plan.decide(plan(scheduler="slurm", master_port=29400), probes, SETTINGS, False, SCONTROL)
    assert given.master_port == 29400


def test_under_slurm_a_node_asking_more_cpus_than_slurm_gives_is_refused_naming_it():
    probes = {host: probe(gpus=0) for host in ("node9", "node8", "node7")}
    decided = node_plan.decide(plan(scheduler="slurm", nproc_per_node=4), probes, SETTINGS, False, SCONTROL)
    assert decided.slurm["problem"] == ("scheduler=slurm: nproc_per_node needs 4 CPUs on node9 (one per rank), and "
                                        "Slurm's node node9 has 2")
    assert decided.refusal == decided.slurm["problem"]  # refused job-wide, before anything is submitted


def test_under_slurm_a_job_still_running_is_refused_first_and_a_forced_one_is_checked_against_slurm():
    probes = {host: probe(gpus=0, running=True) for host in ("node9", "node8", "node7")}
    decided = node_plan.decide(plan(scheduler="slurm", nproc_per_node=4), probes, SETTINGS, False, SCONTROL)
    assert decided.refusal.startswith("job demo is still running on node9, node8, node7")
    forced = node_plan.decide(plan(scheduler="slurm", nproc_per_node=4), probes, SETTINGS, True, SCONTROL)
    assert forced.refusal.startswith("scheduler=slurm: nproc_per_node needs 4 CPUs on node9")


def test_under_slurm_without_slurms_answer_nothing_is_launched():
    probes = {host: probe(gpus=0) for host in ("node9", "node8", "node7")}
    decided = node_plan.decide(plan(scheduler="slurm"), probes, SETTINGS, False, None)
    assert decided.refusal == "scheduler=slurm: Slurm's node table was not read" and decided.slurm is None


def test_under_slurm_job_folders_that_differ_are_refused():
    probes = {"node9": probe(gpus=0), "node8": probe(gpus=0, jobs_dir="/home/a/.gpufleet/jobs"), "node7": probe(gpus=0)}
    decided = node_plan.decide(plan(scheduler="slurm", nproc_per_node=1), probes, SETTINGS, False, SCONTROL)
    assert "the job folder must be the same path on every node" in decided.slurm["problem"] == decided.refusal


def test_under_slurm_nothing_is_asked_of_slurm_while_a_node_has_a_problem():
    probes = {"node9": probe(gpus=0), "node8": probe(gpus=0, python={"found": False}), "node7": probe(gpus=0)}
    decided = node_plan.decide(plan(scheduler="slurm"), probes, SETTINGS, False, SCONTROL)
    assert list(decided.problems) == ["node8"] and decided.slurm is None and decided.refusal == ""


def test_the_decisions_are_plain_data_for_the_role():
    decided = node_plan.decide(plan(hosts=("node9",)), {"node9": master_probe()}, SETTINGS, False).as_dict()
    assert sorted(decided) == ["check_ports", "gate_faults", "gpu_warnings", "master_port", "no_gpu", "nproc",
                               "port_check_note",
                               "problems", "refusal", "restart_ports", "running_hosts", "slots", "slurm", "slurm_drain",
                               "spare_problems", "spares", "world_size"]


def remembered(host, port=41000, age=60.0):
    nodes = [["node9", "10.213.77.19"], ["node8", "10.213.77.18"], ["node7", "10.213.77.17"]]
    return {"%s:%d" % (host, port): {"host": host, "port": port, "nodes": nodes, "master": "node9", "tcp": True,
                                     "age_s": age}}


def test_the_port_check_is_skipped_where_every_node_remembers_a_pass_on_the_chosen_port():
    probes = {"node9": master_probe(port_memory=remembered("node9")), "node8": probe(port_memory=remembered("node8")),
              "node7": probe(port_memory=remembered("node7"))}
    decided = node_plan.decide(plan(port_check={"mode": "remembered", "ttl_s": 3600}), probes, SETTINGS, False)
    assert decided.check_ports is False
    assert decided.port_check_note == ("every node remembers a pass on port 41000 for these 3 nodes within "
                                       "port_check_ttl_s=3600")
    # port_check=always, a pass too old, one node that remembers none: the check runs, saying why.
    always = node_plan.decide(plan(port_check={"mode": "always", "ttl_s": 3600}), probes, SETTINGS, False)
    assert (always.check_ports, always.port_check_note) == (True, "port_check=always")
    probes["node7"] = probe(port_memory=remembered("node7", age=4000.0))
    old = node_plan.decide(plan(port_check={"mode": "remembered", "ttl_s": 3600}), probes, SETTINGS, False)
    assert (old.check_ports, old.port_check_note) == (True, "node7's pass on port 41000 is 4000.0 s old "
                                                            "(port_check_ttl_s=3600)")
    probes["node7"] = probe()
    assert node_plan.decide(plan(port_check={"mode": "remembered", "ttl_s": 3600}), probes, SETTINGS,
                            False).check_ports is True
    # The master picked another port than the one remembered: checked.
    probes = {host: probe(port_memory=remembered(host, port=41005)) for host in ("node8", "node7")}
    probes["node9"] = master_probe(port_memory=remembered("node9", port=41005))
    assert node_plan.decide(plan(port_check={"mode": "remembered", "ttl_s": 3600}), probes, SETTINGS,
                            False).check_ports is True


def test_spares_stand_by_unless_read_as_a_node_they_have_a_problem():
    """A spare's problems leave it out (the job runs without it), never refuse the job."""
    spares = [{"host": "s1", "ip": "192.0.2.31", "node_rank": 2}, {"host": "s2", "ip": "192.0.2.32", "node_rank": 3},
              {"host": "s3", "ip": "192.0.2.33", "node_rank": 4}, {"host": "s4", "ip": "192.0.2.34", "node_rank": 5}]
    probes = {"node9": master_probe(gpus=8), "node8": probe(gpus=8), "s1": probe(gpus=8), "s2": probe(torch=False),
              "s3": probe(gpus=4), "s4": probe(gpus=8, running=True)}
    decided = node_plan.decide(plan(hosts=("node9", "node8"), spares=spares, spare_hosts=["s1", "s2", "s3", "s4"]),
                               probes, SETTINGS, force=False)
    assert decided.problems == {} and decided.refusal == ""
    assert decided.spares == [["s1", "192.0.2.31"]] and decided.slots == [8, 8]
    assert decided.spare_problems == {
        "s2": "s2: gpufleet_python=python3 (/usr/bin/python3) cannot import torch; install it there or point "
              "gpufleet_python at a Python that has it",
        "s3": "s3: runs 4 ranks, fewer than the 8 of a node it would replace",
        "s4": "s4: job demo is still running there (force=true stops it first)"}
    # force=true stops the job there first, as on a node.
    forced = node_plan.decide(plan(hosts=("node9", "node8"), spares=spares[3:], spare_hosts=["s4"]), probes, SETTINGS,
                              force=True)
    assert forced.spares == [["s4", "192.0.2.34"]]


# --- the GPU health gate (plugin_utils/_control/gpu_gate.py) in the plan --------------------------------------------------------

def gpu_health(count=2, **more):
    gpus = [{"index": index, "bus_id": "00000000:%02X:00.0" % (0x18 + index), "error": "", "pcie_width": 16.0,
             "pcie_width_max": 16.0, "event_reasons": 1} for index in range(count)]
    found = {"nvidia_smi": True, "gpus": gpus, "lost": [], "error": "", "processes": [], "nvlink": {}, "xids": [],
             "kernel_log": "/dev/kmsg", "pci_gpus": count}
    found.update(more)
    return found


BUSY = [{"bus_id": "00000000:19:00.0", "pid": 4242, "user": "alice", "command": "python3", "memory": 512.0}]


def test_every_gpu_refusal_of_a_node_comes_before_its_gpu_count():
    lost = gpu_health(1, lost=[{"bus_id": "0000:19:00.0", "error": "Unknown Error"}],
                      processes=[dict(BUSY[0], bus_id="00000000:18:00.0")])
    probes = {"node9": master_probe(gpus=1, gpu_health=lost), "node8": probe(gpus=2, gpu_health=gpu_health())}
    decided = node_plan.decide(plan(hosts=("node9", "node8"), nproc_per_node=2), probes, SETTINGS, False)
    assert decided.problems == {"node9": (
        "node9 GPU at 0000:19:00.0: nvidia-smi cannot reach it (Unknown Error); reboot the node, or leave it out of "
        "the inventory until it is repaired\n"
        "node9 GPU 0 (0000:18:00.0): is held by another process: pid 4242 (alice, python3, 512 MiB); stop that "
        "process, or launch with -e allow_busy_gpus=true to share the GPU")}


def test_a_gpu_outside_the_nodes_ranks_may_be_busy_and_allow_busy_lets_any_through():
    probes = {"node9": master_probe(gpus=2, gpu_health=gpu_health(processes=BUSY))}
    assert node_plan.decide(plan(hosts=("node9",), nproc_per_node=1), probes, SETTINGS, False).problems == {}
    assert list(node_plan.decide(plan(hosts=("node9",)), probes, SETTINGS, False).problems) == ["node9"]
    shared = node_plan.NodeSettings(python="python3", container_engine="podman", allow_busy=True)
    assert node_plan.decide(plan(hosts=("node9",)), probes, shared, False).problems == {}


def test_an_acknowledgement_is_read_per_host_and_a_bad_one_is_refused():
    event = {"bus_id": "0000:18:00", "xid": 79, "meaning": "GPU has fallen off the bus", "class": "hardware",
             "detail": "", "time": 1764064931.0}
    probes = {"node9": master_probe(gpus=2, gpu_health=gpu_health(xids=[event])),
              "node8": probe(gpus=2, gpu_health=gpu_health(xids=[event]))}
    settings = node_plan.NodeSettings(python="python3", container_engine="podman",
                                      acknowledged={"node9": "2026-11-25T10:02:12+00:00", "node8": "last week"})
    decided = node_plan.decide(plan(hosts=("node9", "node8")), probes, settings, False)
    assert decided.problems == {"node8": "node8: gpufleet_xids_acknowledged_before='last week' is not a date and "
                                         "time; write one such as 2026-11-25T10:02:12+00:00"}


def test_warnings_go_on_and_nodes_without_gpus_are_listed_once():
    narrow = gpu_health(1)
    narrow["gpus"][0]["pcie_width"] = 8.0
    probes = {"node9": master_probe(gpus=1, gpu_health=narrow), "node8": probe(gpus=0, gpu_health={
        "nvidia_smi": False, "pci_gpus": 0}), "node7": probe(gpus=0)}
    decided = node_plan.decide(plan(), probes, SETTINGS, False)
    assert decided.problems == {} and decided.no_gpu == ["node8", "node7"]
    assert decided.gpu_warnings == {"node9": [
        "node9 GPU 0 (0000:18:00.0): its PCIe link runs at x8, narrower than its x16; the job runs, with slower host "
        "transfers; reseat the GPU or check its riser and slot"]}


# --- the action: what it reads from the hosts' variables -------------------------------------------------------------

def test_the_action_reads_each_hosts_probe_as_given_and_its_gpufleet_gpus():
    from unittest import mock

    from ansible.parsing.dataloader import DataLoader
    from ansible.playbook.task import Task
    from ansible.template import Templar

    from ansible_collections.gpufleet.cluster.plugins.action import job_nodes

    task = Task()
    probes = {"node9": master_probe(gpu_health=gpu_health(xids=[{
        "bus_id": "0000:18:00", "xid": 79, "meaning": "", "class": "hardware", "detail": "", "time": 1764064931.0}])),
              "node8": probe(python={"found": False}),
              # A host whose probe failed (the play stops it before this runs; left out if it did not).
              "node7": {"failed": True, "msg": "unreachable"}}
    task.args = {"plan": plan(), "probes": probes, "force": "false", "python": "/opt/py/bin/python3"}
    hostvars = {"node9": {"gpufleet_gpus": 2, "gpufleet_xids_acknowledged_before": "2026-11-25T10:02:12Z"},
                "node8": {}, "node7": {}}
    action = job_nodes.ActionModule(task, mock.Mock(), mock.Mock(), loader=DataLoader(),
                                    templar=Templar(loader=DataLoader()), shared_loader_obj=None)
    with mock.patch("ansible.plugins.action.ActionBase.run", return_value={}):
        result = action.run(task_vars={"hostvars": hostvars})
    assert result["changed"] is False
    decided = result["decided"]
    assert decided["nproc"] == {"node9": 2, "node8": 8}
    assert decided["problems"] == {
        "node8": "node8: gpufleet_python=/opt/py/bin/python3 was not found or does not run on the node"}


def test_under_slurm_a_node_the_gpu_gate_refuses_is_to_be_drained_with_its_fault():
    ecc = gpu_health(2)
    ecc["gpus"][1]["ecc_uncorrected"] = 3.0
    probes = {"node9": probe(gpus=2, gpu_health=ecc), "node8": probe(gpus=0), "node7": probe(gpus=0)}
    decided = node_plan.decide(plan(scheduler="slurm"), probes, SETTINGS, False, SCONTROL)
    assert list(decided.problems) == ["node9"]
    assert decided.slurm_drain == [{"name": "node9", "host": "node9", "reason": (
        "gpufleet: GPU 1 (0000:19:00.0): 3 uncorrectable ECC errors since the driver loaded")}]
    # Not under Slurm, or without Slurm's node table: nothing to drain.
    assert node_plan.decide(plan(), probes, SETTINGS, False).slurm_drain == []
    assert node_plan.decide(plan(scheduler="slurm"), probes, SETTINGS, False, {"rc": 1, "stdout": ""}).slurm_drain == []
