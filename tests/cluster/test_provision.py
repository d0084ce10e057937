"""provision.yml and train.yml on a real 3-node cluster of containers, reached over SSH with host keys checked."""

import json
import re

import pytest

from conftest import OWN_KEY, REPO

pytestmark = pytest.mark.cluster


def test_provision_converges_then_changes_nothing(cluster, provisioned):
    assert provisioned["converge"].rc == 0
    assert provisioned["converge"].recap()["node0"]["changed"] > 0
    for name in ("idempotence", "check"):
        run = provisioned[name]
        assert run.rc == 0, name
        recap = run.recap()
        assert all(recap[node]["changed"] == 0 for node in cluster.nodes), (name, recap)
        assert all(recap[node]["failed"] == 0 and recap[node]["unreachable"] == 0 for node in cluster.nodes)


def test_every_node_reaches_every_node_by_name_and_address(cluster, provisioned):
    assert provisioned["converge"].rc == 0
    for node in cluster.nodes:
        host = cluster.host(node)
        for target in cluster.nodes:
            for how in (target, cluster.addresses[target]):
                out = host.run("ssh -o BatchMode=yes -o StrictHostKeyChecking=yes %s hostname", how)
                assert out.rc == 0 and out.stdout.strip() == target, (node, how, out.stderr)
        assert OWN_KEY in host.file("/root/.ssh/authorized_keys").content_string


def _around(out: str, task: str) -> str:
    """What a failing check shows: the task's section, and every line that says what a read found different."""
    section = out.split(task, 1)[1][:1500] if task in out else "(task %r not in the output)" % task
    found = re.compile(r"differs|is not (held|installed)|is installed|missing")
    said = [line for line in out.splitlines() if found.search(line)]
    return "%s\n--- what the reads said:\n%s" % (section, "\n".join(said[-40:]))


def _task_status(out: str, task: str, host: str) -> str:
    """How a task ended on a host in a playbook's output: ok, changed, skipping, failed or '' (not run). A task that
    runs at several points of the play (an internal role included by whichever role comes first on each node) is
    looked for in each."""
    for section in out.split(task)[1:]:
        found = re.search(r"^(ok|changed|skipping|failed|fatal): \[%s\]" % re.escape(host),
                          section.split("\nTASK [", 1)[0], re.M)
        if found:
            return found.group(1)
    return ""


def _included(out: str, task: str, host: str) -> bool:
    """Whether an include task included its file for a host (Ansible says "included: <file> for <hosts>")."""
    return any(re.search(r"^included: .* for .*\b%s\b" % re.escape(host), section.split("\nTASK [", 1)[0], re.M)
               for section in out.split(task)[1:])


MESH_CHECK = "ssh to every node by every name and address"


def test_the_mesh_check_runs_when_the_mesh_changed_and_learns_nothing(cluster, provisioned):
    """The N x N check runs on a node whose remembered mesh differs (here: forgotten), and only there; it only
    checks: known_hosts is left as it was. OpenSSH itself rewrites known_hosts (mode 0600) when it learns a node's
    other host keys (UpdateHostKeys, on by default: mpirun's first ssh may do it); the next provision.yml changes
    nothing, and skips the check, since the mesh is the one checked."""
    assert provisioned["converge"].rc == 0
    node0 = cluster.host("node0")
    known_hosts = "/root/.ssh/known_hosts"
    node0.check_output("sed -i '/^|1|/d' %s && rm -f /root/.ssh/gpufleet-mesh-checked" % known_hosts)
    before = node0.file(known_hosts).content_string
    run = cluster.playbook("provision.yml", "--tags", "ssh_mesh")
    recap = run.recap()
    assert run.rc == 0 and recap["node0"]["changed"] == 1, recap  # the remembered fingerprint, written again
    assert all(recap[node]["changed"] == 0 for node in cluster.nodes if node != "node0"), recap
    assert _task_status(run.out, MESH_CHECK, "node0") == "ok"
    assert _task_status(run.out, MESH_CHECK, "node1") == "skipping"
    assert node0.file(known_hosts).content_string == before, "the mesh check changed known_hosts"
    # What ssh leaves when UpdateHostKeys learns a node's other keys (seen on the benchmark's nodes; whether it does
    # depends on how it finds the key): the learned keys appended hashed, the file replaced by a new one, 0600.
    node0.check_output("ssh-keyscan -H -t rsa,ecdsa %s > /root/learned && cat %s /root/learned > /root/rewritten && "
                       "rm /root/learned && chmod 600 /root/rewritten && mv /root/rewritten %s"
                       % (cluster.addresses["node1"], known_hosts, known_hosts))
    assert "|1|" in node0.file(known_hosts).content_string and node0.file(known_hosts).mode == 0o600
    run = cluster.playbook("provision.yml", "--tags", "ssh_mesh")
    assert run.rc == 0 and all(count["changed"] == 0 for count in run.recap().values()), run.recap()
    assert _task_status(run.out, MESH_CHECK, "node0") == "skipping"


# Each converted role's one include after its read (gpufleet.cluster.node_state), where the role reads the node itself.
CONVERGE_INCLUDES = {
    "etc_hosts": "Configure /etc/hosts where it differs",
    "ssh_mesh": "Authorize the keys, trust the host keys and write the SSH configuration where they differ",
    "nccl_env": "Write the configuration files where they differ",
    "mpi": "Install Open MPI and write the hostfile where the node differs",
    "python_env": "Install where the node differs",
}
# The NVIDIA roles' reads (nodes with the stand-in packages: the driver and Fabric Manager on node2, the fake H100 and
# NVSwitch; CUDA, NCCL and NVIDIA's repository on every node, gpufleet_nvidia_on_gpu_less_nodes).
NVIDIA_INCLUDES = {
    "nvidia_driver": ("Install the driver where the node differs", ["node2"]),
    "nvidia_fabricmanager": ("Install Fabric Manager where the node differs", ["node2"]),
    "cuda_toolkit": ("Install the toolkits where the node differs", ["node0", "node1", "node2"]),
    "nccl": ("Install NCCL where the node differs", ["node0", "node1", "node2"]),
    "nvidia_repo": ("Set up the repository where the read found it", ["node0", "node1", "node2"]),
}
# provision.yml's one read of every role after Fabric Manager, and each role's first task, skipped where that read
# found nothing of the role's to change (the rest of the role is not loaded).
ONE_READ = "Read what the roles below would change on each node, at once"
SKIPPED_ROLE = " (skipped where provision.yml's read found nothing to change)"
ROLE_GATES = {
    "nvidia_peermem": "Set up GPUDirect RDMA where wanted" + SKIPPED_ROLE,
    "cuda_toolkit": "Read and install the toolkits" + SKIPPED_ROLE,
    "nccl": "Read and install NCCL" + SKIPPED_ROLE,
    "etc_hosts": "Read, configure and verify /etc/hosts" + SKIPPED_ROLE,
    "ssh_mesh": "Read, write and check the SSH mesh" + SKIPPED_ROLE,
    "nccl_env": "Read and write the configuration files" + SKIPPED_ROLE,
    "mpi": "Read and install Open MPI and the hostfile" + SKIPPED_ROLE,
    "nccl_tests": "Build nccl-tests",
    "python_env": "Read and install the environment" + SKIPPED_ROLE,
}


def test_a_rerun_on_a_right_cluster_reads_each_role_and_runs_none_of_its_changes(cluster, provisioned):
    """On the idempotence run, provision.yml's one read of each node found nothing of any role's to change (the
    read's wishes match what the roles' tasks wrote, templates included): every role after Fabric Manager is skipped
    at its first task on every node, so none of its own reads, includes or changes ran. The driver and Fabric Manager
    read the node themselves: their includes are skipped."""
    run = provisioned["idempotence"]
    assert run.rc == 0
    for node in cluster.nodes:
        assert _task_status(run.out, ONE_READ, node) == "ok", (node, _around(run.out, ONE_READ))
        for role, gate in ROLE_GATES.items():
            assert _task_status(run.out, gate, node) == "skipping", (role, node, _around(run.out, gate))
    for role, include in CONVERGE_INCLUDES.items():
        assert include not in run.out, (role, _around(run.out, include))
    assert "Write NCCL's configuration file" not in run.out and "Install the pinned packages" not in run.out
    for role in ("nvidia_driver", "nvidia_fabricmanager"):
        include, nodes = NVIDIA_INCLUDES[role]
        for node in nodes:
            assert _task_status(run.out, include, node) == "skipping", (role, node, _around(run.out, include))
    for role in ("cuda_toolkit", "nccl"):
        assert NVIDIA_INCLUDES[role][0] not in run.out, (role, _around(run.out, NVIDIA_INCLUDES[role][0]))
    # NVIDIA's repository is read by the driver role on its GPU node (node2), and skipped with CUDA and NCCL elsewhere.
    repository = NVIDIA_INCLUDES["nvidia_repo"][0]
    assert _task_status(run.out, repository, "node2") == "skipping", _around(run.out, repository)
    assert _task_status(run.out, repository, "node0") == _task_status(run.out, repository, "node1") == ""
    # None of their install tasks ran: not the packages, the holds, the files, nor the repository's key and source.
    for task in ("Install the driver branch", "Install NCCL at the pinned version", "Install the toolkit versions",
                 "Install Fabric Manager and libnvidia-nscq", "Hold the installed packages",
                 "Install NVIDIA's repository key", "Add NVIDIA's repository, signed by that key only"):
        assert task not in run.out, (task, run.out[-3000:])




# The NVIDIA roles' reads, skipped where provision.yml's start-of-run package read found a package of the role missing
# (a first provision): the role goes straight to its install, saying which packages it found missing.
NVIDIA_READS = {
    "nvidia_driver": ("Read the driver's packages, their holds and its files (apt)", ["node2"]),
    "nvidia_fabricmanager": ("Read Fabric Manager's packages and their holds", ["node2"]),
    "cuda_toolkit": ("Read the toolkits' packages and /etc/profile.d/cuda.sh", ["node0", "node1", "node2"]),
    "nccl": ("Read NCCL's packages, their version and holds (apt)", ["node0", "node1", "node2"]),
}


def test_a_first_provision_installs_what_the_package_read_found_missing_without_reading_again(cluster, provisioned):
    """On the converge run the nodes have none of the NVIDIA packages: each role's read is skipped, its install runs,
    and its first task names the packages missing. On the idempotence run the driver's and Fabric Manager's reads run
    (and find nothing), and CUDA and NCCL are skipped by provision.yml's one read of the node."""
    converge, again = provisioned["converge"], provisioned["idempotence"]
    assert converge.rc == 0 and again.rc == 0
    said = " ".join(converge.out.split())
    for role, (read, nodes) in NVIDIA_READS.items():
        include = NVIDIA_INCLUDES[role][0]
        for node in nodes:
            assert _task_status(converge.out, read, node) == "skipping", (role, node, _around(converge.out, read))
            assert _included(converge.out, include, node), (role, node, _around(converge.out, include))
            # The re-run reads the driver and Fabric Manager itself; CUDA and NCCL through its one read of the node.
            if role in ROLE_GATES:
                assert _task_status(again.out, ROLE_GATES[role], node) == "skipping", (role, node)
            else:
                assert _task_status(again.out, read, node) == "ok", (role, node, _around(again.out, read))
    for node in cluster.nodes:
        assert "%s: not installed: cuda-toolkit-12-8" % node in said, said[-3000:]
        assert "%s: not installed: libnccl2, libnccl-dev" % node in said, said[-3000:]
    assert re.search(r"node2: not installed: [^;]*nvidia-fabricmanager", said), said[-3000:]


def test_what_a_person_changed_by_hand_is_found_and_put_back(cluster, provisioned):
    """A re-run is also the check after someone changed a node by hand: the read names the difference, and the
    role's own tasks put it back on that node alone."""
    assert provisioned["converge"].rc == 0
    node1 = cluster.host("node1")
    env_before = node1.file("/etc/gpufleet/nccl.env").content_string
    hostfile_before = node1.file("/etc/gpufleet/hostfile").content_string
    node1.check_output("echo 'export NCCL_SOCKET_IFNAME=lo' >> /etc/gpufleet/nccl.env && chmod 600 "
                       "/etc/gpufleet/hostfile && sed -i 's/HostName .*/HostName 192.0.2.99/' /root/.ssh/config")
    checked = cluster.playbook("provision.yml", "--tags", "nccl_env,mpi,ssh_mesh_configure", "--check", "--diff")
    assert checked.rc == 0 and checked.recap()["node1"]["changed"] == 3, (checked.recap(), checked.out[-3000:])
    assert "-export NCCL_SOCKET_IFNAME=lo" in checked.out and "192.0.2.99" in checked.out  # --diff shows both
    assert "NCCL_SOCKET_IFNAME=lo" in node1.file("/etc/gpufleet/nccl.env").content_string  # and changed nothing
    run = cluster.playbook("provision.yml", "--tags", "nccl_env,mpi,ssh_mesh_configure")
    recap = run.recap()
    assert run.rc == 0 and recap["node1"]["changed"] == 3, (recap, run.out[-3000:])
    assert all(recap[node]["changed"] == 0 for node in cluster.nodes if node != "node1"), recap
    assert node1.file("/etc/gpufleet/nccl.env").content_string == env_before
    assert node1.file("/etc/gpufleet/hostfile").content_string == hostfile_before
    assert node1.file("/etc/gpufleet/hostfile").mode == 0o644
    assert "192.0.2.99" not in node1.file("/root/.ssh/config").content_string
    for include in (CONVERGE_INCLUDES["nccl_env"], CONVERGE_INCLUDES["mpi"], CONVERGE_INCLUDES["ssh_mesh"]):
        assert _task_status(run.out, include, "node0") == "skipping", include


def test_a_name_resolving_elsewhere_fails_the_check_naming_the_node_the_name_and_both_addresses(cluster, provisioned):
    """The resolution check (one getent per name, in one command per node) names what it found and what it wanted."""
    assert provisioned["converge"].rc == 0
    cluster.node_exec("node0", "sh", "-c", "cp /etc/hosts /root/hosts.saved && sed -i '1i 127.0.0.5 node2' /etc/hosts",
                      check=True)
    try:
        run = cluster.playbook("provision.yml", "--tags", "etc_hosts_verify")
    finally:
        cluster.node_exec("node0", "sh", "-c", "cat /root/hosts.saved > /etc/hosts && rm /root/hosts.saved", check=True)
    assert run.rc != 0
    assert "node0: node2 resolves to 127.0.0.5, not to its cluster address %s" % cluster.addresses["node2"] in " ".join(
        run.out.split())
    assert run.recap()["node1"]["failed"] == 0


def test_names_resolve_to_cluster_addresses_never_loopback(cluster, provisioned):
    assert provisioned["converge"].rc == 0
    for node in cluster.nodes:
        host = cluster.host(node)
        for target in cluster.nodes:
            assert host.run("getent ahostsv4 %s", target).stdout.split()[0] == cluster.addresses[target]
        own = host.run("getent ahostsv4 $(hostname)").stdout.split()[0]
        assert own == cluster.addresses[node] and not own.startswith("127.")
        assert "127.0.1.1" not in host.file("/etc/hosts").content_string


def test_nccl_conf_names_the_interface_of_the_cluster_address(cluster, provisioned):
    assert provisioned["converge"].rc == 0
    for node in cluster.nodes:
        host = cluster.host(node)
        links = json.loads(host.check_output("ip -j addr show"))
        iface = next(link["ifname"] for link in links
                     if any(a.get("local") == cluster.addresses[node] for a in link.get("addr_info", [])))
        conf = host.file("/etc/nccl.conf").content_string
        # NCCL's "=": exactly this interface, not every one whose name starts so; Gloo takes the plain name.
        assert re.search(r"^NCCL_SOCKET_IFNAME==%s$" % iface, conf, re.M), conf
        assert "export GLOO_SOCKET_IFNAME=%s\n" % iface in host.file("/etc/gpufleet/nccl.env").content_string
        # node1's fake HCA (testbed.FAKE_SYS): its active port, exactly; no line where a node has none.
        assert ("NCCL_IB_HCA==mlx5_0:1\n" in conf) == (node == "node1") and conf.count("NCCL_IB_HCA") <= 1, conf


def test_mpirun_with_the_generated_hostfile_reaches_all_nodes(cluster, provisioned):
    assert provisioned["converge"].rc == 0
    out = cluster.host("node0").run("mpirun --allow-run-as-root --hostfile /etc/gpufleet/hostfile hostname")
    assert out.rc == 0, out.stderr
    assert sorted(out.stdout.split()) == sorted(cluster.nodes)


def test_train_across_three_nodes_two_ranks_each(cluster, provisioned):
    assert provisioned["converge"].rc == 0
    run = cluster.playbook("train.yml", "-e", "script=%s/examples/train.py" % REPO, "-e", "nproc_per_node=2")
    assert run.rc == 0
    logs = {node: open("%s/logs/train/%s.log" % (cluster.state, node)).read() for node in cluster.nodes}
    for rank in range(6):
        assert any("rank %d of world size 6" % rank in log for log in logs.values())
    accuracy = float(re.search(r"final test_accuracy ([0-9.]+) world_size 6", logs["node0"]).group(1))
    assert accuracy > 0.9
    # The nodes' NCCL/Gloo settings reached the job (launch.sh sources the nccl_env file).
    launch = cluster.host("node1").file("/root/.gpufleet/jobs/train/launch.sh").content_string
    assert ". /etc/gpufleet/nccl.env" in launch and "--master-addr=%s" % cluster.addresses["node0"] in launch


def test_a_node_whose_sshd_is_stopped_stops_provisioning_before_any_change(cluster, provisioned):
    assert provisioned["converge"].rc == 0
    node0 = cluster.host("node0")
    node0.run("rm -f /etc/gpufleet/hostfile")  # the play would write it again: it must not, with node2 down
    cluster.stop_sshd("node2")
    try:
        run = cluster.playbook("provision.yml", fresh_connections=True)
        assert run.rc != 0
        assert "cannot reach node2 over SSH; nothing was changed on any node" in run.out
        assert "Connection refused" in run.out
        assert not node0.file("/etc/gpufleet/hostfile").exists
    finally:
        cluster.start_sshd("node2")
    again = cluster.playbook("provision.yml", fresh_connections=True)
    assert again.rc == 0
    assert node0.file("/etc/gpufleet/hostfile").exists
