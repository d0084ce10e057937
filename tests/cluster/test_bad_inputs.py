"""Bad inputs on the 3-node container cluster: each refused before any node is touched, naming the culprit.

The whole list runs against the local two-node inventory in tests/integration/test_train_local.py
(BAD_INPUTS). Here, where the nodes are real SSH hosts and "not touched" is checked on each of them (no job
folder and no virtual environment appear), run the cases whose refusal depends on the nodes or on how they are
reached: what a node has (GPUs, an InfiniBand port, a port in use, a Python, a launcher, a wheelhouse) and the
addresses the inventory gives. The cases the controller refuses from the arguments alone, before it connects to
any node (a missing script, a job name, nproc_per_node 0, a host group, an environment variable's name,
max_restarts, hang_timeout, script_args, an unknown launcher), meet the same code with the same message there:
run here as well, they cost the session cluster's stream about a minute and showed nothing more.
"""

import os

import pytest

import gpu_standin

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRIPT = ["-e", "script=%s/examples/train.py" % REPO, "-e", "job=bad-input"]
JOB_DIR = "/root/.gpufleet/jobs/bad-input"
VENV = "/opt/bad-input-venv"


def _inventory(cluster, body):
    """The cluster's inventory with other hosts (its connection variables kept)."""
    path = os.path.join(cluster.state, "bad-hosts.yml")
    with open(cluster.inventory) as handle:
        common = handle.read().split("  vars:\n", 1)[1]
    with open(path, "w") as handle:
        handle.write("---\ngpu_nodes:\n  hosts:\n%s  vars:\n%s" % (body, common))
    return path


def _fake_gpu(cluster):
    """node0 lists one GPU (the stand-in nvidia-smi, tests/cluster/gpu_standin.py); removed afterwards."""
    del cluster
    gpu_standin.install("node0", {"gpus": [{}]})
    return lambda: gpu_standin.remove("node0")


def _port_taken(cluster):
    """Something else listening on node0's port 29433 (stopped afterwards by its PID)."""
    cluster.node_exec("node0", "sh", "-c", "python3 -c 'import socket,time; s=socket.socket(); "
                      "s.bind((\"0.0.0.0\", 29433)); s.listen(); time.sleep(300)' >/dev/null 2>&1 & "
                      "echo $! > /tmp/bad-input-listener.pid; sleep 1", check=True)
    return lambda: cluster.node_exec("node0", "sh", "-c", "kill $(cat /tmp/bad-input-listener.pid)")


IB_PORT = "/fake-sys/class/infiniband/mlx5_0/ports/1"  # node1's HCA (testbed.FAKE_SYS), which its NCCL_IB_HCA names


def _ib_port_down(cluster):
    """node1's InfiniBand port down, as the kernel says it when the cable is out; up again afterwards."""
    cluster.node_exec("node1", "sh", "-c", "echo '1: DOWN' > %s/state; echo '2: Polling' > %s/phys_state"
                      % (IB_PORT, IB_PORT), check=True)
    return lambda: cluster.node_exec("node1", "sh", "-c", "echo '4: ACTIVE' > %s/state; echo '5: LinkUp' > "
                                     "%s/phys_state" % (IB_PORT, IB_PORT), check=True)


# (name, playbook, arguments, inventory hosts or None, setup or None, what the message must say)
CASES = [
    ("two nodes with the same address", "train.yml", SCRIPT,
     "    node0:\n      ansible_host: 10.213.77.10\n    node1:\n      ansible_host: 10.213.77.10\n", None,
     "node1: cluster address 10.213.77.10 (from ansible_host='10.213.77.10') is also the address of node0"),
    ("unresolvable master address", "train.yml", SCRIPT,
     "    node0:\n      ansible_host: 10.213.77.10\n      gpufleet_cluster_address: no-such-host.invalid\n"
     "    node1:\n      ansible_host: 10.213.77.11\n", None,
     "node0: gpufleet_cluster_address='no-such-host.invalid' does not resolve to an IP address"),
    ("nproc_per_node above the GPU count", "train.yml", SCRIPT + ["-e", "nproc_per_node=2"], None, _fake_gpu,
     "node0: nproc_per_node=2 is more than the 1 GPUs nvidia-smi lists on the node"),
    ("an InfiniBand port in use is down", "train.yml", SCRIPT, None, _ib_port_down,
     "node1 mlx5_0 port 1: the link is not up (its state is 1: DOWN, its physical state 2: Polling)"),
    ("master port in use", "train.yml", SCRIPT + ["-e", "master_port=29433"], None, _port_taken,
     "node0: master_port=29433 is already in use on the master node"),
    ("python missing on the nodes", "train.yml", SCRIPT + ["-e", "gpufleet_python=/no/such/python"], None, None,
     "gpufleet_python=/no/such/python was not found or does not run on the node"),
    ("launcher not installed on the nodes", "train.yml", SCRIPT + ["-e", "launcher=horovodrun"], None, None,
     "node0: launcher=horovodrun needs Horovod in gpufleet_python"),
    ("wheelhouse missing on the nodes", "../tests/integration/playbooks/python_env_alone.yml",
     ["-e", "python_env_wheelhouse=/no/such/wheelhouse", "-e", "python_env_path=%s" % VENV], None, None,
     "node0: python_env_wheelhouse=/no/such/wheelhouse is not a folder on the node"),
]


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_bad_input_is_refused_before_any_node_is_touched(cluster, provisioned, case):
    _name, playbook, args, hosts, setup, needle = case
    cleanup = setup(cluster) if setup else None
    try:
        run = cluster.playbook(playbook, *args, inventory=_inventory(cluster, hosts) if hosts is not None else None)
    finally:
        if cleanup:
            cleanup()
    assert run.rc != 0
    assert needle in " ".join(run.out.split()), needle
    for node in cluster.nodes:
        touched = cluster.node_exec(node, "sh", "-c", "ls -d %s %s 2>/dev/null" % (JOB_DIR, VENV)).stdout.strip()
        assert not touched, "%s was touched: %s" % (node, touched)
