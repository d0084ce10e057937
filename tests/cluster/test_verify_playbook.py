"""nccl_tests and verify.yml on the 3-node container cluster.

There is no GPU and no CUDA here: nccl_tests builds a stand-in source (tests/cluster/standin_repo.py)
whose make records the variables the role passes, and whose all_reduce_perf prints nccl-tests' layout
with fixed figures from every MPI rank. So these tests check the build logic (inputs passed, versioned
folder, rebuilt only when an input changes) and verify.yml's orchestration: the version table and its
agreement check, mpirun across all nodes with the generated hostfile, parsing, the JSON report, the PNG
plot, the pass/fail verdict and the pairwise mode. The NCCL figures are the stand-in's, not a measurement.

verify.yml runs NCCL only on nodes whose driver lists GPUs: the tests of the NCCL path give every node a stand-in
GPU (tests/cluster/gpu_standin.py, nvidia-smi answering for one idle H100); without it the nodes are what they are,
GPU-less, and verify.yml measures them with a Gloo all_reduce of the training Python (a real measurement, over the
containers' network), as on a node with some GPUs in test_verify_measures_nccl_where_the_gpus_are_and_gloo_across_all.
"""

import contextlib
import json
import os

import pytest

import gpu_standin

pytestmark = pytest.mark.cluster

# node2's fake NVSwitch (tests/cluster/testbed.py FAKE_SYS) makes Fabric Manager needed there, and it cannot run on a
# node whose init is not systemd: verify.yml rightly fails on it (test_verify_names_a_node_whose_fabric_manager_...).
# The other verify runs read the nodes' real /sys, where there is no NVSwitch.
REAL_SYS = ("-e", "gpufleet_sys_root=/sys")
# The stand-in GPUs' kernel log (an empty one: the gate reads no XID).
GPU_ARGS = (*REAL_SYS, *gpu_standin.KERNEL_LOG_ARGS)


@contextlib.contextmanager
def stand_in_gpus(cluster, nodes=None):
    """One stand-in GPU on each of these nodes (all by default) while the block runs."""
    nodes = list(cluster.nodes if nodes is None else nodes)
    try:
        for node in nodes:
            gpu_standin.install(node, {"gpus": [{}]})
        yield
    finally:
        for node in nodes:
            gpu_standin.remove(node)


def test_nccl_tests_built_with_mpi_into_a_versioned_folder_and_only_rebuilt_on_change(cluster, provisioned):
    assert provisioned["converge"].rc == 0
    host = cluster.host("node1")
    assert host.file("/opt/nccl-tests/current").linked_to == "/opt/nccl-tests/2.19.6"
    inputs = host.file("/opt/nccl-tests/2.19.6/src/build/inputs.txt").content_string.split()
    assert inputs == ["MPI=1", "MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi", "CUDA_HOME=/usr/local/cuda",
                      "NCCL_HOME=/usr"]
    # No GPU and no nvcc on the test nodes: the defaults nccl-tests itself builds for the inventory's CUDA 12.8.
    gencode = host.file("/opt/nccl-tests/2.19.6/src/build/gencode.txt").content_string.split()
    assert gencode[0] == "-gencode=arch=compute_60,code=sm_60" and "-gencode=arch=compute_100,code=sm_100" in gencode
    assert gencode[-1] == "-gencode=arch=compute_120,code=compute_120"
    built_at = host.file("/opt/nccl-tests/2.19.6/src/build/built_at").content_string
    # The idempotence run did not rebuild (it changed nothing); a run with other make arguments does.
    assert all(counts["changed"] == 0 for counts in provisioned["idempotence"].recap().values())
    run = cluster.playbook("provision.yml", "--tags", "nccl_tests", "-e", '{"nccl_tests_make_args": ["DEBUG=1"]}')
    assert run.rc == 0
    assert host.file("/opt/nccl-tests/2.19.6/src/build/built_at").content_string != built_at
    cluster.playbook("provision.yml", "--tags", "nccl_tests")  # back to the inventory's inputs


def test_verify_reports_the_stack_and_a_verdict_across_all_nodes(cluster, provisioned):
    assert provisioned["converge"].rc == 0
    with stand_in_gpus(cluster):
        run = cluster.playbook("verify.yml", *GPU_ARGS)
    assert run.rc == 0, run.out[-3000:]
    # Every node has a GPU: no Gloo measurement, and no node left out of NCCL's.
    assert "Gloo all_reduce across" not in run.out and "NCCL bandwidth was not measured" not in run.out
    assert "ok: [node" not in run.out.split("TASK [Start a Gloo", 1)[1].split("TASK [", 1)[0]
    table = run.out.split("GPU stack on 3 node(s)", 1)[1]
    for node in cluster.nodes:
        assert any(line.startswith(node) and "2.30.4-1+cuda12.9" in line and "12.8" in line and "2.13.0" in line
                   for line in table.splitlines())
    report = json.load(open(os.path.join(cluster.state, "logs", "verify", "all_reduce_perf.json")))
    assert report["hosts"] == sorted(cluster.nodes) and report["ranks"] == 3  # mpirun ran a rank on every node
    assert report["verdict"]["passed"] is True and report["verdict"]["peak_busbw_gbps"] == 41.21
    assert [row["size_bytes"] for row in report["rows"]] == [1048576, 16777216, 1073741824]
    with open(os.path.join(cluster.state, "logs", "verify", "busbw.png"), "rb") as handle:
        assert handle.read(4) == b"\x89PNG"


def test_verify_measures_nccl_where_the_gpus_are_and_gloo_across_all(cluster, provisioned):
    """node0 and node1 have a (stand-in) GPU, node2 none: all_reduce_perf runs on the two (its NCCL verdict judged:
    below the expected bandwidth here), node2 is said not to be measured by NCCL and why, and a Gloo all_reduce of
    the training Python measures all three nodes' network, with its own report and plot."""
    assert provisioned["converge"].rc == 0
    with stand_in_gpus(cluster, ["node0", "node1"]):
        run = cluster.playbook("verify.yml", *GPU_ARGS, "-e", "nccl_expected_busbw_gbps=50",
                               "-e", '{"verify_gloo_sizes": [65536, 4194304]}')
    assert run.rc != 0
    said = " ".join(run.out.split())
    assert "NCCL check failed: peak bus bandwidth 41.21 GB/s is below the expected 50.00 GB/s" in said, said[-3000:]
    assert ("NCCL bandwidth was not measured on node2: no NVIDIA GPU (nvidia-smi lists none, and the PCI bus has "
            "none)") in said
    report = json.load(open(os.path.join(cluster.state, "logs", "verify", "all_reduce_perf.json")))
    assert report["hosts"] == ["node0", "node1"] and report["ranks"] == 2
    assert "Gloo all_reduce across 3 node(s) (node0, node1, node2), one rank each: peak bus bandwidth" in said
    gloo = json.load(open(os.path.join(cluster.state, "logs", "verify", "gloo_all_reduce.json")))
    assert gloo["verdict"]["passed"] is True and gloo["errors"] == {}, gloo
    assert gloo["nccl_skipped"] == {"node2": "no NVIDIA GPU (nvidia-smi lists none, and the PCI bus has none)"}
    assert [row["size_bytes"] for row in gloo["rows"]] == [65536, 4194304]
    assert all(row["wrong"] == 0 and row["busbw_gbps"] > 0 for row in gloo["rows"]), gloo["rows"]
    # Each node's rank bound Gloo to the interface of its cluster address, as nccl_env wrote it.
    for node in cluster.nodes:
        iface = cluster.host(node).check_output("ip -o -4 addr show to %s | awk '{print $2}'", cluster.addresses[node])
        assert gloo["interfaces"][node] == iface
    with open(os.path.join(cluster.state, "logs", "verify", "gloo_busbw.png"), "rb") as handle:
        assert handle.read(4) == b"\x89PNG"


def test_verify_names_the_node_and_roles_when_nccl_tests_is_missing(cluster, provisioned):
    """Before mpirun: a node without all_reduce_perf (here: a prefix where nothing was built) is named, with the
    provision.yml tags that build it, instead of Open MPI's "unable to open" error."""
    assert provisioned["converge"].rc == 0
    with stand_in_gpus(cluster):
        run = cluster.playbook("verify.yml", *GPU_ARGS, "-e", "nccl_tests_prefix=/opt/not-built")
    text = " ".join(run.out.replace("''", "'").split())
    assert run.rc != 0
    for node in cluster.nodes:
        assert ("%s: /opt/not-built/current/src/build/all_reduce_perf missing; run ansible-playbook -i "
                "<inventory> playbooks/provision.yml --tags mpi,nccl_tests first" % node) in text, run.out[-3000:]
    assert "Run all_reduce_perf across all nodes" not in run.out


def test_verify_pairwise_runs_every_pair(cluster, provisioned):
    assert provisioned["converge"].rc == 0
    with stand_in_gpus(cluster):
        run = cluster.playbook("verify.yml", *GPU_ARGS, "-e", "pairwise=true")
    assert run.rc == 0, run.out[-3000:]
    report = json.load(open(os.path.join(cluster.state, "logs", "verify", "all_reduce_perf.json")))
    assert sorted(report["pairwise"]["pairs"]) == ["node0+node1", "node0+node2", "node1+node2"]
    assert report["pairwise"]["slow_pairs"] == []


def test_verify_fails_when_the_nodes_disagree(cluster, provisioned):
    """The GPU stacks must agree among the nodes with GPUs (here every node has a stand-in one)."""
    assert provisioned["converge"].rc == 0
    bump = cluster.playbook("provision.yml", "--limit", "node2", "--tags", "nccl", "-e", "nccl_version=2.26.5-1+cuda12.8")
    assert bump.rc == 0
    try:
        with stand_in_gpus(cluster):
            run = cluster.playbook("verify.yml", *GPU_ARGS, "--tags", "stack")
            gpus = cluster.playbook("verify.yml", *GPU_ARGS, "--tags", "stack", "-e", "gpufleet_gpus=8")
        assert run.rc != 0
        assert ("the nodes' NCCL differ: 2.26.5-1+cuda12.8 on node2; 2.30.4-1+cuda12.9 on node0, node1"
                in run.out.replace("\n        ", " ")), run.out[-3000:]
        assert "node0 has 1 GPUs, its inventory says 8 (gpufleet_gpus)" in gpus.out.replace("\n        ", " ")
    finally:
        cluster.playbook("provision.yml", "--limit", "node2", "--tags", "nccl")


def test_verify_names_a_node_whose_fabric_manager_is_needed_but_not_running(cluster, provisioned):
    assert provisioned["converge"].rc == 0
    run = cluster.playbook("verify.yml")
    assert run.rc != 0
    text = " ".join(run.out.replace("''", "'").split())  # the YAML callback folds lines and doubles quotes
    assert ("node2: the node has NVSwitches, so CUDA needs Fabric Manager running, but it is not running (systemd is "
            "not this node's init)") in text, text[-3000:]
    services = run.out.split("NVIDIA services", 1)[1].splitlines()
    assert any(line.split()[:3] == ["node2", "580.95.05-1", "no"] for line in services), services[:6]
    assert any(line.split()[:3] == ["node0", "not", "needed"] for line in services)


def test_verify_shows_the_gpu_health_table_and_fails_on_what_the_gate_refuses(cluster, provisioned):
    """node1 gets two stand-in GPUs (tests/cluster/gpu_standin.py), one with a pending row remap and one on a narrow
    PCIe link: verify.yml's GPU health table shows both, per GPU, and fails on the refusal, naming node, GPU and
    fact; the nodes without GPUs say so."""
    assert provisioned["converge"].rc == 0
    gpu_standin.install("node1", {"gpus": [{"remapped_rows.pending": "Yes"}, {"pcie.link.width.current": 8}]})
    try:
        run = cluster.playbook("verify.yml", *REAL_SYS, *gpu_standin.KERNEL_LOG_ARGS, "--tags", "stack")
    finally:
        gpu_standin.remove("node1")
    assert run.rc != 0
    text = " ".join(run.out.split())
    assert "node1 GPU 0 (0000:18:00.0): a row remap is pending; reset the GPU" in text, text[-3000:]
    table = run.out.split("GPU and network port health (what train.yml's gate would refuse or warn of)", 1)[1].splitlines()
    rows = [line.split(None, 6) for line in table[3:8] if line.strip()]
    assert ["node0", "-", "ok", "no", "GPU"] in rows, table[:8]
    assert any(row[:6] == ["node1", "GPU", "0", "(0000:18:00.0)", "refuse", "a"] for row in rows), table[:8]
    assert any(row[:6] == ["node1", "GPU", "1", "(0000:19:00.0)", "warn", "its"] for row in rows), table[:8]
