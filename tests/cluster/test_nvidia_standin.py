"""The NVIDIA roles (driver, CUDA toolkit, NCCL) on the 3-node container cluster, against stand-in packages.

What this checks: the roles' repository and keyring setup (a signed apt repository laid
out like NVIDIA's, verified by apt through the key the role installs), version pinning,
holds, ordering (every input checked before any package is touched), the reboot
decision on GPU-less nodes, idempotence, and a version bump that moves exactly the
packages it should. What it does not check: NVIDIA's binaries. The packages carry
NVIDIA's real names and versions but no NVIDIA software (tests/cluster/standin_repo.py),
and the nodes have no GPU. No test here loads a real driver or runs a real NCCL collective.
"""

import json
import os
import re

import pytest

import gpu_standin
from harness import REPO

from ansible_collections.gpufleet.cluster.plugins.module_utils._node.nvidia_node import KERNEL_MODULE_PACKAGE_PREFIXES

pytestmark = pytest.mark.cluster


def packages(cluster, node):
    """name -> (version, selection) of every installed package on the node."""
    out = cluster.host(node).check_output("dpkg-query -W -f='${Package} ${Version} ${db:Status-Want}\\n'")
    return {name: (version, want) for name, version, want in (line.split() for line in out.splitlines())}


def test_gpu_less_nodes_skip_the_driver_and_the_rest_converges(cluster, provisioned):
    run = provisioned["converge"]
    assert run.rc == 0
    for node in ("node0", "node1"):  # node2 has a (fake) H100: see the next test
        assert "%s: no NVIDIA GPU on the PCI bus; the driver is not installed" % node in run.out
        installed = packages(cluster, node)
        assert not {"nvidia-open", "cuda-drivers", "nvidia-driver-pinning-580"} & set(installed)
        assert not {"nvidia-fabricmanager", "libnvidia-nscq"} & set(installed)
        assert installed["cuda-toolkit-12-8"][0] == "12.8.1-1"
        # The default: NVIDIA's 2.30.4 build for CUDA 12.9 beside the 12.8 toolkit (no 2.30.4 build for 12.8).
        assert installed["libnccl2"] == ("2.30.4-1+cuda12.9", "hold")
        assert installed["libnccl-dev"] == ("2.30.4-1+cuda12.9", "hold")
        host = cluster.host(node)
        assert host.file("/usr/local/cuda").linked_to == "/usr/local/cuda-12.8"
        # Through the alternatives system the toolkit packages use, set by hand, so that installing a newer
        # toolkit (a higher priority) does not move it.
        query = host.check_output("update-alternatives --query cuda").splitlines()
        assert "Value: /usr/local/cuda-12.8" in query and "Status: manual" in query
        assert host.file("/usr/local/cuda").linked_to == host.file("/etc/alternatives/cuda").linked_to
        assert "release 12.8" in host.check_output("bash -lc 'nvcc --version'")
        # NVIDIA's repository ranks above Debian's archive (600 > 500), selected by its Release label as NVIDIA's
        # own cuda-<distro>.pin selects it.
        assert "Pin: release l=NVIDIA CUDA\nPin-Priority: 600" in host.file(
            "/etc/apt/preferences.d/gpufleet-nvidia-cuda").content_string
        assert re.search(r"^ +600 \S*nvidia-repo/debian12/x86_64", host.check_output("apt-cache policy"), re.M)
        sources = host.file("/etc/apt/sources.list.d/nvidia-cuda.sources").content_string
        assert "URIs: file:///nvidia-repo/debian12/x86_64/" in sources
        assert "Signed-By: /etc/apt/keyrings/nvidia-cuda.asc" in sources
    # The NVIDIA roles took part in the idempotence and check-mode runs that changed nothing (NCCL at its first task,
    # skipped there by provision.yml's one read of each node).
    for name in ("idempotence", "check"):
        assert "gpufleet.cluster.nccl : Read and install NCCL" in provisioned[name].out


def merged_exec_start(unit: str, drop_ins: list[str]) -> list[str]:
    """The ExecStart lines systemd runs for a unit and its drop-ins (an empty ExecStart= resets the list)."""
    found: list[str] = []
    for text in [unit] + drop_ins:
        for line in text.splitlines():
            if line.startswith("ExecStart="):
                value = line.split("=", 1)[1].strip()
                found = found + [value] if value else []
    return found


def test_a_gpu_node_gets_headers_a_built_module_persistence_fabric_manager_and_no_peermem(cluster, provisioned):
    """node2 has a fake H100 and a fake NVSwitch (tests/cluster/testbed.py FAKE_SYS); node1 a fake InfiniBand HCA."""
    run = provisioned["converge"]
    assert run.rc == 0
    host = cluster.host("node2")
    kernel = host.check_output("uname -r")
    installed = packages(cluster, "node2")
    # The stand-in driver builds its "module" only where the running kernel's headers are installed, as DKMS does.
    assert installed["linux-headers-%s" % kernel][0] == "1.0-gpufleet"
    # The default branch, 580, on Debian: the pinning package first, then the unversioned names, which without the pin
    # would be 590 (the stand-in repository has both).
    assert installed["nvidia-driver-pinning-580"] == ("580-1", "hold")
    assert installed["nvidia-open"] == ("580.95.05-1", "hold")
    # Every package of the branch is held, not only the metapackage.
    assert installed["libnvidia-compute"] == installed["nvidia-utils"] == ("580.95.05-1", "hold")
    assert host.file("/lib/modules/%s/updates/dkms/nvidia.ko" % kernel).content_string.strip() == "580.95.05"
    # unattended-upgrades leaves the kernel and NVIDIA's packages (apt reads the drop-in: its syntax is apt's).
    blacklist = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    assert '"^linux-image-"' in blacklist and '"^nvidia-"' in blacklist and '"^libnvidia-"' in blacklist, blacklist
    # Fabric Manager and libnvidia-nscq at the driver's version (a newer one exists in the repository), held with it,
    # under the unversioned names NVIDIA uses from 580.
    assert installed["nvidia-fabricmanager"] == installed["libnvidia-nscq"] == ("580.95.05-1", "hold")
    # (the YAML callback folds the line and doubles the quote inside single quotes)
    assert "node2: systemd is not this node's init, so nvidia-fabricmanager is installed but not started" in \
        " ".join(run.out.replace("''", "'").split())
    # What the node will run for nvidia-persistenced: the packaged unit turns persistence mode off; the drop-in wins.
    unit = host.file("/lib/systemd/system/nvidia-persistenced.service").content_string
    drop_in = host.file("/etc/systemd/system/nvidia-persistenced.service.d/gpufleet.conf").content_string
    assert "--no-persistence-mode" in unit
    assert merged_exec_start(unit, [drop_in]) == ["/usr/bin/nvidia-persistenced --verbose"]
    # node1's InfiniBand HCA has the distribution's inbox RDMA stack (no MLNX_OFED or DOCA-OFED): nvidia-peermem would
    # not load there, so it is not set to load at boot, and the play says DMA-BUF is the path. No node gets it.
    assert "node1: GPUDirect RDMA through DMA-BUF (no MLNX_OFED or DOCA-OFED" in " ".join(run.out.split())
    for node in ("node0", "node1", "node2"):
        assert not cluster.host(node).file("/etc/modules-load.d/nvidia-peermem.conf").exists


def test_an_existing_cuda_keyring_source_is_set_aside_for_one_source_with_one_key(cluster, provisioned):
    """node0 had NVIDIA's repository configured as the cuda-keyring package does (conftest.KEYRING_SOURCE)."""
    assert provisioned["converge"].rc == 0
    host = cluster.host("node0")
    assert not host.file("/etc/apt/sources.list.d/cuda-debian12-x86_64.list").exists
    assert "cuda-archive-keyring" in host.file(
        "/etc/apt/sources.list.d/cuda-debian12-x86_64.list.disabled-by-gpufleet").content_string
    update = host.run("apt-get update")
    assert update.rc == 0 and "Conflicting values" not in update.stderr, update.stderr


def test_a_fabric_manager_version_other_than_the_drivers_fails_in_preflight(cluster, provisioned):
    assert provisioned["converge"].rc == 0
    before = {node: packages(cluster, node) for node in cluster.nodes}
    run = cluster.playbook("provision.yml", "-e", "nvidia_fabricmanager_version=580.105.08-1")
    assert run.rc != 0
    assert ("node2: nvidia_fabricmanager_version=580.105.08-1 differs from the installed driver's 580.95.05-1; Fabric "
            "Manager must be the driver's version 580.95.05" in run.out.replace("\n        ", " ")), run.out[-3000:]
    assert all(counts["changed"] == 0 for counts in run.recap().values())
    assert {node: packages(cluster, node) for node in cluster.nodes} == before


@pytest.mark.parametrize("extra, needle", [
    # 13.x runs on 580 and later (minor version compatibility), not on 570.
    ("cuda_toolkit_version=13.1 nvidia_driver_branch=570",
     "cuda_toolkit_version: CUDA 13.1 needs driver branch 580 or newer, but"),
    ("nvidia_driver_branch=latest", "nvidia_driver_branch: 'latest' is not a driver branch"),
    ("nccl_version=2.26.2-1+cuda11.8", "nccl_version: 2.26.2-1+cuda11.8 is built for CUDA 11.8"),
])
def test_bad_inputs_fail_in_preflight_before_any_package_is_touched(cluster, provisioned, extra, needle):
    assert provisioned["converge"].rc == 0
    before = {node: packages(cluster, node) for node in cluster.nodes}
    run = cluster.playbook("provision.yml", "-e", extra)
    assert run.rc != 0
    assert ("node0: " + needle) in run.out.replace("\n        ", " ")
    assert all(counts["changed"] == 0 for counts in run.recap().values())
    assert {node: packages(cluster, node) for node in cluster.nodes} == before


# Fake sysfs trees on node0 (the nodes' own /sys is read-only and has no GPU): nvidia_driver_sys_root points there.
FAKE_SYS = r"""
set -e
gpu() { d=$1/bus/pci/devices/0000:18:00.0; mkdir -p $d; echo 0x10de > $d/vendor; echo 0x030200 > $d/class; echo $2 > $d/device; }
gpu /fake-sys/volta 0x1db1
gpu /fake-sys/blackwell 0x2901
gpu /fake-sys/hopper 0x2330
gpu /fake-sys/secure-boot 0x2330
gpu /fake-sys/runfile 0x2330
mkdir -p /fake-sys/runfile/module/nvidia && echo 580.65.06 > /fake-sys/runfile/module/nvidia/version
mkdir -p /fake-sys/secure-boot/firmware/efi/efivars
printf '\006\000\000\000\001' > /fake-sys/secure-boot/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-e35c4b7b6a7e
"""


@pytest.mark.parametrize("extra, needle", [
    ({"nvidia_driver_sys_root": "/fake-sys/volta"},
     "nvidia_driver_flavor=open needs Turing or newer GPUs, but the GPU 0x1db1 (Volta GV100"),
    # 580 is the last branch for Volta (NVIDIA's deprecation schedule); Blackwell needs the open modules.
    ({"nvidia_driver_sys_root": "/fake-sys/volta", "nvidia_driver_flavor": "proprietary", "nvidia_driver_branch": 590},
     "nvidia_driver_branch=590 does not support the GPU 0x1db1 (Volta GV100"),
    ({"nvidia_driver_sys_root": "/fake-sys/blackwell", "nvidia_driver_flavor": "proprietary"},
     "nvidia_driver_flavor=proprietary cannot drive the GPU 0x2901 (Blackwell GB100"),
    ({"nvidia_driver_sys_root": "/fake-sys/secure-boot"}, "UEFI Secure Boot is on"),
    ({"nvidia_driver_sys_root": "/fake-sys/hopper", "nvidia_driver_allow_container": False},
     "this node is a container (/run/.containerenv exists); a driver installed here would build kernel modules"),
])
def test_node_guards_fail_in_preflight_naming_node_and_variable(cluster, provisioned, extra, needle):
    """Open modules on Volta, Secure Boot without the opt-out, a container with a GPU: refused before any change."""
    assert provisioned["converge"].rc == 0
    cluster.node_exec("node0", "sh", "-c", FAKE_SYS, check=True)
    before = {node: packages(cluster, node) for node in cluster.nodes}
    run = cluster.playbook("provision.yml", "-e", json.dumps(extra))
    assert run.rc != 0
    text = run.out.replace("\n        ", " ")
    assert ("node0: " + needle) in text, run.out[-3000:]
    variable = {"UEFI": "nvidia_driver_secure_boot_handled", "this": "nvidia_driver_allow_container"}.get(
        needle.split()[0], needle.split("=")[0])
    assert variable in text
    assert all(counts["changed"] == 0 for counts in run.recap().values())
    assert {node: packages(cluster, node) for node in cluster.nodes} == before


def test_a_hopper_gpu_with_the_open_modules_passes_the_node_guards(cluster, provisioned):
    """The other side of the guards above (the container guard is overridden for test nodes); one run, not one per
    refused case."""
    assert provisioned["converge"].rc == 0
    cluster.node_exec("node0", "sh", "-c", FAKE_SYS, check=True)
    passing = cluster.playbook("provision.yml", "--tags", "nvidia_driver", "--check", "-e",
                               json.dumps({"nvidia_driver_sys_root": "/fake-sys/hopper"})).out
    block = passing.split("Refuse the open kernel modules for GPUs older than Turing]", 1)[1].split("TASK [", 1)[0]
    assert "ok: [node0]" in block, passing[-3000:]


def test_a_driver_not_from_packages_is_refused_or_kept_as_it_is(cluster, provisioned):
    """A loaded driver that NVIDIA's .run installer put there (its /usr/bin/nvidia-uninstall): refused before any
    change, naming the node, the driver and the variable; with nvidia_driver_keep_unpackaged the role installs
    nothing. Stand-in: the loaded module is a fake sysfs entry and the uninstaller an empty file; what is checked
    is the decision and that no package moves, not NVIDIA's real runfile."""
    assert provisioned["converge"].rc == 0
    cluster.node_exec("node0", "sh", "-c", FAKE_SYS, check=True)
    before = {node: packages(cluster, node) for node in cluster.nodes}
    carriers = [name for name in before["node0"] if name.startswith(KERNEL_MODULE_PACKAGE_PREFIXES)]
    assert not carriers, "precondition: no package on node0 carries a driver module, found %s" % carriers
    cluster.node_exec("node0", "touch", "/usr/bin/nvidia-uninstall", check=True)
    try:
        sys_root = {"nvidia_driver_sys_root": "/fake-sys/runfile"}
        refused = cluster.playbook("provision.yml", "-e", json.dumps(sys_root))
        text = " ".join(refused.out.replace("''", "'").split())
        assert refused.rc != 0
        assert ("node0: the NVIDIA driver 580.65.06 on this node was not installed from packages (NVIDIA's .run "
                "installer left /usr/bin/nvidia-uninstall)") in text, refused.out[-3000:]
        assert "nvidia_driver_keep_unpackaged: true" in text
        assert all(counts["changed"] == 0 for counts in refused.recap().values())
        assert {node: packages(cluster, node) for node in cluster.nodes} == before
        # As a user types it: the string "true" (seen failing as a non-boolean conditional before | bool).
        kept = cluster.playbook("provision.yml", "--tags", "nvidia_driver", "--limit", "node0",
                                "-e", json.dumps(sys_root), "-e", "nvidia_driver_keep_unpackaged=true")
        assert kept.rc == 0, kept.out[-3000:]
        assert "node0: keeping the NVIDIA driver 580.65.06 (runfile); nothing is installed" in " ".join(kept.out.split())
        assert kept.recap()["node0"]["changed"] == 0
        assert packages(cluster, "node0") == before["node0"]
    finally:
        cluster.node_exec("node0", "rm", "-f", "/usr/bin/nvidia-uninstall", check=True)


REBOOT_STANDIN = """#!/bin/sh
# maintain.yml's reboot on a container, which cannot reboot: a new boot id, and what a reboot clears.
date +%s%N > /var/lib/gpufleet-test/boot-id
rm -f /var/run/reboot-required
echo rebooted >> /var/lib/gpufleet-test/reboots
"""
REBOOT_ARGS = ["-e", "maintain_reboot_command=/usr/local/sbin/gpufleet-test-reboot",
               "-e", "maintain_boot_time_command='cat /var/lib/gpufleet-test/boot-id'"]


def maintenance_records(cluster):
    path = os.path.join(cluster.state, "logs", "history.jsonl")
    with open(path) as handle:
        return [record for record in map(json.loads, handle) if record["kind"] == "maintenance"]


def test_maintain_moves_nccl_on_every_node_in_batches_spares_first_and_stops_before_the_next_after_a_failed_check(
        cluster, provisioned):
    """maintain.yml, one node at a time, moves NCCL to another pinned version on the spare node2 first, then node0
    (stopping the detached job on node0 and node1, logs kept) and node1 (rebooted: the stand-in says a reboot is
    required there), each out of service alone and back after the launch's gate; exactly the NCCL packages move.
    Then, moving NCCL back, node0's stand-in GPU reports uncorrectable ECC: node0 fails its check and stays out of
    service with the reason, node1 is not reached, and train.yml refuses node0 naming its maintenance."""
    assert provisioned["converge"].rc == 0
    inventory = cluster.with_spare("node2")
    before = packages(cluster, "node1")
    for node in cluster.nodes:
        cluster.node_exec(node, "sh", "-c", "mkdir -p /var/lib/gpufleet-test && echo 0 > /var/lib/gpufleet-test/boot-id"
                          " && printf '%s' \"$0\" > /usr/local/sbin/gpufleet-test-reboot && "
                          "chmod 755 /usr/local/sbin/gpufleet-test-reboot", REBOOT_STANDIN, check=True)
    cluster.node_exec("node1", "touch", "/var/run/reboot-required", check=True)
    job = ["-e", "job=maint", "-e", "script=%s/examples/train.py" % REPO, "-e", "nproc_per_node=1",
           "-e", "script_args='--epochs 400 --step-s 0.05'", "-e", "spare_group=none"]
    launched = cluster.playbook("train.yml", "-e", "wait=false", *job, inventory=inventory)
    assert launched.rc == 0, launched.out[-3000:]
    try:
        run = cluster.playbook("maintain.yml", "--tags", "nccl", "-e", "nccl_version=2.26.5-1+cuda12.8",
                               "-e", "maintain_stop_jobs=true", *REBOOT_ARGS, *gpu_standin.KERNEL_LOG_ARGS,
                               inventory=inventory)
        said = " ".join(run.out.split())
        assert run.rc == 0, run.out[-5000:]
        assert ("batch 1 of 3: node2 node2 (spare): no job: taken out of service at once" in said
                and "batch 2 of 3: node0 node0: 1 job(s) maint (running): stopped (logs kept), then changed" in said
                and "batch 3 of 3: node1" in said), said[-5000:]
        for node in cluster.nodes:
            assert packages(cluster, node)["libnccl2"] == ("2.26.5-1+cuda12.8", "hold"), node
        after = packages(cluster, "node1")
        assert {name for name in set(before) | set(after) if before.get(name) != after.get(name)} == {
            "libnccl2", "libnccl-dev"}
        # One node out of service at a time, spares first; each back after its check.
        steps = [(r["node"], r["result"]) for r in maintenance_records(cluster)]
        assert steps == [("node2", "out"), ("node2", "back"), ("node0", "out"), ("node0", "back"), ("node1", "out"),
                         ("node1", "back")], steps
        # Rebooted only where the change needed it; the job stopped on node0 by its token, its log kept.
        assert [cluster.view.node_file(node, "/var/lib/gpufleet-test/reboots") for node in cluster.nodes] == [
            None, "rebooted\n", None]
        stopped = cluster.view.job_state("node0", "maint")
        assert stopped["state"] == "stopped" and "maintain.yml" in stopped["stop_reason"], stopped
        assert "epoch 1/400" in (cluster.view.node_file("node0", "/root/.gpufleet/jobs/maint/job.log") or "")
        assert re.search(r"^node1\s+back in service\s", run.out, re.M), run.out[-3000:]

        gpu_standin.install("node0", {"gpus": [{"ecc.errors.uncorrected.volatile.total": 2}]})
        failed = cluster.playbook("maintain.yml", "--tags", "nccl", *gpu_standin.KERNEL_LOG_ARGS, inventory=inventory)
        said = " ".join(failed.out.split())
        assert failed.rc != 0, failed.out[-3000:]
        assert "node0 stays out of service: node0 GPU 0 (0000:18:00.0): 2 uncorrectable ECC errors" in said, \
            said[-5000:]
        assert re.search(r"^node1\s+not reached\s", failed.out, re.M), failed.out[-3000:]
        assert [packages(cluster, node)["libnccl2"][0] for node in cluster.nodes] == [
            "2.30.4-1+cuda12.9", "2.26.5-1+cuda12.8", "2.30.4-1+cuda12.9"]
        assert [(r["node"], r["result"]) for r in maintenance_records(cluster)][6:] == [
            ("node2", "out"), ("node2", "back"), ("node0", "out"), ("node0", "failed its check")]
        refused = cluster.playbook("train.yml", *job, inventory=inventory)
        said = " ".join(refused.out.split())
        assert refused.rc != 0 and "node0 is in maintenance since " in said, said[-3000:]
        assert "failed its check after maintenance (provision.yml --tags nccl)" in said, said[-3000:]
    finally:
        gpu_standin.remove("node0")
        cluster.playbook("stop.yml", "-e", "job=maint", inventory=inventory)
        for node in cluster.nodes:
            cluster.node_exec(node, "rm", "-rf", "/root/.gpufleet/jobs/maint", "/var/lib/gpufleet-test",
                              "/usr/local/sbin/gpufleet-test-reboot", "/var/run/reboot-required")
    back = cluster.playbook("provision.yml", "--tags", "nccl")  # the inventory's version again
    assert back.rc == 0 and packages(cluster, "node1")["libnccl2"] == ("2.30.4-1+cuda12.9", "hold")


PREFERENCES = "/etc/apt/preferences.d/gpufleet-nvidia-cuda"


def test_a_hold_released_and_the_repository_pin_edited_by_hand_are_found_and_put_back(cluster, provisioned):
    """The NVIDIA roles read before they change: NCCL's read finds libnccl2 no longer held on node1, NVIDIA
    repository's read finds its apt preferences edited there. --check --diff reports both (the edit as a diff) and
    changes nothing; the run puts both back on node1 alone, with one apt-mark run."""
    assert provisioned["converge"].rc == 0
    node1 = cluster.host("node1")
    pin = node1.file(PREFERENCES).content_string
    cluster.node_exec("node1", "sh", "-c", "apt-mark unhold libnccl2 && echo 'Pin-Priority: 100' >> %s" % PREFERENCES,
                      check=True)
    try:
        checked = cluster.playbook("provision.yml", "--tags", "nccl", "--check", "--diff")
        assert checked.rc == 0 and checked.recap()["node1"]["changed"] == 2, (checked.recap(), checked.out[-3000:])
        said = " ".join(checked.out.split())
        assert "node1: package libnccl2 is not held" in said and "libnccl2 would be held" in said, said[-3000:]
        assert "node1: %s differs from what the role writes" % PREFERENCES in said, said[-3000:]
        assert "-Pin-Priority: 100" in checked.out  # the diff of the file that the run puts back
        assert packages(cluster, "node1")["libnccl2"][1] == "install"  # check mode changed nothing
        run = cluster.playbook("provision.yml", "--tags", "nccl")
        recap = run.recap()
        assert run.rc == 0 and recap["node1"]["changed"] == 2, (recap, run.out[-3000:])
        assert recap["node0"]["changed"] == recap["node2"]["changed"] == 0, recap
        assert packages(cluster, "node1")["libnccl2"] == ("2.30.4-1+cuda12.9", "hold")
        assert node1.file(PREFERENCES).content_string == pin
    finally:
        cluster.node_exec("node1", "sh", "-c", 'apt-mark hold libnccl2 && printf "%%s" "$1" > %s' % PREFERENCES, "sh",
                          pin, check=True)


def test_forced_driver_is_pinned_held_and_left_alone_the_second_time(cluster, provisioned):
    assert provisioned["converge"].rc == 0
    first = cluster.playbook("provision.yml", "-e", "nvidia_driver_force=true", "--tags", "nvidia_driver")
    assert first.rc == 0 and first.recap()["node0"]["changed"] > 0
    for node in cluster.nodes:
        assert packages(cluster, node)["nvidia-open"] == ("580.95.05-1", "hold")
        assert "blacklist nouveau" in cluster.host(node).file("/etc/modprobe.d/blacklist-nouveau.conf").content_string
        assert "%s: no NVIDIA GPU on this node" % node in first.out  # the reboot decision: no reboot
    second = cluster.playbook("provision.yml", "-e", "nvidia_driver_force=true", "--tags", "nvidia_driver")
    assert second.rc == 0 and all(counts["changed"] == 0 for counts in second.recap().values())


def test_a_branch_change_moves_every_held_package_of_the_branch(cluster, provisioned):
    """580 (Debian: pinning package, unversioned names) to 570 (branch names) and back: every held package of the
    old branch goes, the pinning package with it, and the new branch's packages are all held. On node2 (NVSwitch)
    Fabric Manager follows: at 570 nvidia-fabricmanager-570 at 570.124.06-1 beside the driver's 570.124.06-0ubuntu1
    (NVIDIA's apt revisions differ; the role matches the upstream version)."""
    assert provisioned["converge"].rc == 0
    branch_580 = {"nvidia-driver-pinning-580", "nvidia-open", "libnvidia-compute", "nvidia-utils"}
    branch_570 = {"nvidia-open-570", "libnvidia-compute-570", "nvidia-utils-570"}
    fabric_580 = {"nvidia-fabricmanager", "libnvidia-nscq"}
    fabric_570 = {"nvidia-fabricmanager-570", "libnvidia-nscq-570"}
    nodes = ("--limit", "node0,node2", "--tags", "nvidia_driver,nvidia_fabricmanager", "-e", "nvidia_driver_force=true")
    first = cluster.playbook("provision.yml", *nodes)
    assert first.rc == 0, first.out[-3000:]
    try:
        run = cluster.playbook("provision.yml", *nodes, "-e", "nvidia_driver_branch=570")
        assert run.rc == 0, run.out[-3000:]
        for node in ("node0", "node2"):
            installed = packages(cluster, node)
            assert {name: installed.get(name) for name in branch_570} == {
                name: ("570.124.06-0ubuntu1", "hold") for name in branch_570}
            assert not branch_580 & set(installed), "the held 580 packages stayed"
            assert not fabric_580 & set(installed)
        assert {name: packages(cluster, "node2").get(name) for name in fabric_570} == {
            name: ("570.124.06-1", "hold") for name in fabric_570}
        assert not fabric_570 & set(packages(cluster, "node0"))  # no NVSwitch there
    finally:
        back = cluster.playbook("provision.yml", *nodes)
    assert back.rc == 0, back.out[-3000:]
    for node in ("node0", "node2"):
        installed = packages(cluster, node)
        assert {name: installed.get(name)[1] for name in branch_580} == {name: "hold" for name in branch_580}
        assert installed["nvidia-open"][0] == installed["libnvidia-compute"][0] == "580.95.05-1"
        assert not (branch_570 | fabric_570) & set(installed)
    assert {name: packages(cluster, "node2").get(name) for name in fabric_580} == {
        name: ("580.95.05-1", "hold") for name in fabric_580}

# An HGX B200 as the host sees it (stand-in): a B200 (10de:2901) on the PCI bus, no NVSwitch there as an NVIDIA bridge,
# and the NVLink5 switch management port as an InfiniBand device whose VPD carries SW_MNG, which is how NVIDIA's driver
# container tells an NVLink5 system (gpu-driver-container, _assert_nvlink5_system). The stand-in modprobe records the
# load in the fake tree's /module, as the kernel would in /sys/module (a container cannot load modules).
FAKE_B200 = r"""
set -e
root=/fake-sys/b200
d=$root/bus/pci/devices/0000:18:00.0; mkdir -p $d; echo 0x10de > $d/vendor; echo 0x030200 > $d/class; echo 0x2901 > $d/device
mkdir -p $root/class/infiniband/mlx5_4/device
printf '\202\010NVSwitch\220\006SW_MNG\170\000' > $root/class/infiniband/mlx5_4/device/vpd
rm -rf $root/module
printf '#!/bin/sh\nmkdir -p %s/module/$1\necho "$@" >> /run/gpufleet-standin-modprobe\n' $root > /usr/local/sbin/modprobe
chmod 755 /usr/local/sbin/modprobe
"""


def test_an_hgx_b200_gets_fabric_manager_the_subnet_manager_and_ib_umad_loaded_now(cluster, provisioned):
    """What it checks: detection by the SW_MNG mark (no PCI NVSwitch), the packages (Fabric Manager, libnvidia-nscq,
    libnvsdm, nvlsm, Debian's infiniband-diags), ib_umad at boot and now, idempotence and check mode. What it does
    not: NVIDIA's binaries, a real ib_umad, nvlsm actually managing a fabric."""
    assert provisioned["converge"].rc == 0
    cluster.node_exec("node0", "sh", "-c", FAKE_B200, check=True)
    args = ("--limit", "node0", "--tags", "nvidia_driver,nvidia_fabricmanager",
            "-e", json.dumps({"nvidia_driver_sys_root": "/fake-sys/b200", "nvidia_fabricmanager_sys_root": "/fake-sys/b200"}))
    try:
        run = cluster.playbook("provision.yml", *args)
        assert run.rc == 0, run.out[-3000:]
        installed = packages(cluster, "node0")
        assert installed["nvidia-fabricmanager"] == installed["libnvidia-nscq"] == ("580.95.05-1", "hold")
        # DCGM and NVML reach fourth-generation NVSwitches through libnvsdm: at the driver's version, held.
        assert installed["libnvsdm"] == ("580.95.05-1", "hold")
        assert "nvlsm" in installed and "infiniband-diags" in installed
        host = cluster.host("node0")
        assert host.file("/etc/modules-load.d/ib_umad.conf").content_string.splitlines()[-1] == "ib_umad"
        assert host.file("/run/gpufleet-standin-modprobe").content_string.split() == ["ib_umad"]
        again = cluster.playbook("provision.yml", *args)
        assert again.rc == 0 and again.recap()["node0"]["changed"] == 0, again.out[-3000:]
        check = cluster.playbook("provision.yml", *args, "--check", "--diff")
        assert check.rc == 0 and check.recap()["node0"]["changed"] == 0, check.out[-3000:]
        assert host.file("/run/gpufleet-standin-modprobe").content_string.split() == ["ib_umad"]  # loaded once
    finally:
        cluster.node_exec("node0", "rm", "-f", "/usr/local/sbin/modprobe", "/run/gpufleet-standin-modprobe")
        cluster.node_exec("node0", "sh", "-c", "apt-mark unhold nvidia-fabricmanager libnvidia-nscq libnvsdm >/dev/null; "
                          "apt-get purge -y nvidia-fabricmanager libnvidia-nscq libnvsdm nvlsm infiniband-diags "
                          ">/dev/null; "
                          "rm -f /etc/modules-load.d/ib_umad.conf")


# node1 with a loaded driver (the open modules: no P in the module's taint flags) and, for the second run, MLNX_OFED
# (a stand-in ofed_info answering as MLNX_OFED's does) installed after the driver: the stand-in modprobe records
# every call and refuses nvidia-peermem as the kernel does (Invalid argument, its DKMS build made against the inbox
# ib_core) until the stand-in dkms has rebuilt the driver's module; it records loads in the fake tree's /module.
FAKE_DRIVER_LOADED = r"""
set -e
mkdir -p /fake-sys/module/nvidia && echo O > /fake-sys/module/nvidia/taint
cat > /usr/local/sbin/modprobe <<'END'
#!/bin/sh
echo "$@" >> /run/gpufleet-standin-modprobe
if [ "$1" = nvidia-peermem ] && [ ! -e /run/gpufleet-standin-dkms-rebuilt ]; then
    echo "modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument" >&2
    exit 1
fi
mkdir -p /fake-sys/module/$(echo $1 | tr - _)
END
cat > /usr/local/sbin/dkms <<'END'
#!/bin/sh
case "$1" in
    status) echo "nvidia/580.95.05, $(uname -r), x86_64: installed" ;;
    install) echo "$@" > /run/gpufleet-standin-dkms-rebuilt ;;
esac
END
chmod 755 /usr/local/sbin/modprobe /usr/local/sbin/dkms
"""
FAKE_OFED = "printf '#!/bin/sh\\necho MLNX_OFED_LINUX-24.10-1.1.4.0:\\n' > /usr/local/bin/ofed_info; chmod 755 /usr/local/bin/ofed_info"


def services_row(cluster, node):
    """verify.yml's NVIDIA services table, the node's row as {column title: cell}, cut where the table's dashes are."""
    run = cluster.playbook("verify.yml", "--limit", node)
    services = run.out.split("NVIDIA services", 1)[-1].splitlines() if "NVIDIA services" in run.out else []
    assert len(services) > 3, run.out[-3000:]
    spans = [match.span() for match in re.finditer(r"-+", services[2])]
    found = [line for line in services[3:] if line.split()[:1] == [node]]
    assert found, run.out[-3000:]
    return {services[1][start:end + 2].strip(): found[0][start:end + 2].strip() for start, end in spans}


def test_gpudirect_rdma_takes_dma_buf_on_the_inbox_stack_and_nvidia_peermem_with_ofed(cluster, provisioned):
    """What it checks: the decision (no MLNX_OFED/DOCA-OFED: no peermem, the play passes, verify says DMA-BUF; with
    OFED installed after the driver: peermem at boot, the driver's DKMS module rebuilt once when peermem does not
    load, then loaded, verify says peermem), idempotence. What it does not: a real HCA, a real nvidia-peermem, DKMS
    or ib_core, real DMA-BUF registration (the stand-ins record the calls)."""
    assert provisioned["converge"].rc == 0
    cluster.node_exec("node1", "sh", "-c", FAKE_DRIVER_LOADED, check=True)
    args = ("--limit", "node1", "--tags", "nvidia_peermem")
    host = cluster.host("node1")
    try:
        inbox = cluster.playbook("provision.yml", *args)
        assert inbox.rc == 0, inbox.out[-3000:]
        assert "node1: GPUDirect RDMA through DMA-BUF" in " ".join(inbox.out.split())
        assert not host.file("/etc/modules-load.d/nvidia-peermem.conf").exists
        assert not host.file("/run/gpufleet-standin-modprobe").exists
        assert services_row(cluster, "node1")["GPUDirect RDMA"] == "DMA-BUF"
        cluster.node_exec("node1", "sh", "-c", FAKE_OFED, check=True)
        ofed = cluster.playbook("provision.yml", *args)
        assert ofed.rc == 0, ofed.out[-3000:]
        assert "node1: GPUDirect RDMA through nvidia-peermem (MLNX_OFED_LINUX-24.10-1.1.4.0)" in " ".join(ofed.out.split())
        assert host.file("/etc/modules-load.d/nvidia-peermem.conf").content_string.splitlines()[-1] == "nvidia-peermem"
        # The first load failed (OFED came after the driver), the driver's DKMS module was rebuilt, the second loaded.
        assert host.file("/run/gpufleet-standin-modprobe").content_string.split() == ["nvidia-peermem"] * 2
        kernel = host.check_output("uname -r")
        assert host.file("/run/gpufleet-standin-dkms-rebuilt").content_string.split() == [
            "install", "--force", "nvidia/580.95.05", "-k", kernel]
        assert "node1: nvidia-peermem did not load" not in " ".join(ofed.out.split())  # the message, not the task
        again = cluster.playbook("provision.yml", *args)
        assert again.rc == 0 and again.recap()["node1"]["changed"] == 0, again.out[-3000:]
        assert services_row(cluster, "node1")["GPUDirect RDMA"] == "peermem"
    finally:
        cluster.node_exec("node1", "rm", "-rf", "/usr/local/sbin/modprobe", "/usr/local/sbin/dkms",
                          "/usr/local/bin/ofed_info", "/run/gpufleet-standin-modprobe",
                          "/run/gpufleet-standin-dkms-rebuilt", "/fake-sys/module", check=False)
        cluster.playbook("provision.yml", *args)  # back to the inbox stack: gpufleet's boot-time load removed
