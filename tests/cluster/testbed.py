#!/usr/bin/env python3
"""A real multi-node cluster on this machine: Debian 12 containers with their own address, sshd and /etc/hosts.

Used by the pytest fixture (tests/cluster/conftest.py) and by molecule's create and
destroy playbooks (molecule/default/), and from the command line:

    python tests/cluster/testbed.py up --nodes 3 --state STATE_DIR   # prints the inventory path
    python tests/cluster/testbed.py down --state STATE_DIR

What it does (see shared/TESTBED.md for why each setting is needed here):
- podman with a project-local containers.conf (runc, ulimits), through CONTAINERS_CONF;
- a node image built locally with debootstrap and `podman import`, cached by a hash of its recipe;
- a podman network of the project's own with an explicit subnet, one fixed address per node;
- an SSH key for the controller, the nodes' host keys in a known_hosts file of the test's own
  (host key checking stays on), and an inventory of the nodes in group gpu_nodes;
- a wheelhouse (torch and the example's packages) downloaded on the controller and mounted read-only
  at /wheelhouse in every node, as on an air-gapped cluster.
Every address it touches is one of its own containers.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import standin_repo

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CACHE = os.path.join(REPO, ".cache", "testbed")
CONTAINERS_CONF = os.path.join(HERE, "containers.conf")
NETWORK = "gpufleet-test"
SUBNET = "10.213.77.0/24"
ADDRESS = "10.213.77.%d"
FIRST_HOST = 10
PREFIX = "gpufleet-test-"
PACKAGES = "openssh-server,python3,python3-venv,sudo,iproute2,procps,ca-certificates"
SUITE = "bookworm"
WHEELS = ["torch==2.13.0", "numpy==2.4.6", "py-spy==0.4.1"]
# DeepSpeed for the deepspeed launcher's test: built here from its source (pure Python, no ops: DS_BUILD_OPS=0),
# with its dependencies pinned. The nodes install it with the rest from the wheelhouse.
DEEPSPEED = "deepspeed==0.19.8"
DEEPSPEED_DEPS = ["einops==0.8.2", "hjson==3.1.0", "msgpack==1.2.4", "ninja==1.13.2", "psutil==7.2.2",
                  "py-cpuinfo==9.0.0", "pydantic==2.14.3", "pydantic-core==2.50.4", "annotated-types==0.8.0",
                  "typing-inspection==0.4.5", "tqdm==4.70.1", "packaging==26.3"]
# Every rank's environment on the test nodes (the inventories' gpufleet_env; a test that passes its own starts from
# this). The nodes share this machine's cores: one intra-op thread per rank, as the local inventory has it and as
# torchrun sets itself for several ranks on one node (not for one rank a node). With a thread per core each, the
# ranks of three nodes spun against each other: a rank of examples/train.py took 7.2 CPU s against 4.2 with one
# (same loss and accuracy).
NODE_ENV = {"OMP_NUM_THREADS": "1"}
# What the test inventory adds to python_env's default (torch==2.13.0).
NODE_EXTRA_PACKAGES = ["numpy==2.4.6", DEEPSPEED]
SYSTEM_PACKAGES = ["podman", "runc", "debootstrap", "uidmap", "slirp4netns", "openssh-client", "catatonit", "gnupg",
                   "iptables"]

# Runs as each container's command, under a real init (catatonit, podman --init) that reaps orphans as a
# server's init does: sshd as a daemon with a pid file (so a test can stop sshd alone), on the port in
# GPUFLEET_TEST_SSH_PORT, then wait forever. The first start seeds the controller's key and a Debian installer's
# /etc/hosts line (127.0.1.1 <hostname>). On a node whose /etc/hosts the runtime manages (a bind mount, not
# --no-hosts) the line is added to the runtime's file in place, which keeps the bind mount.
NODE_SEED = r"""
set -e
mkdir -p /run/sshd /root/.ssh
chmod 700 /root/.ssh
if [ ! -e /var/lib/gpufleet-test-seeded ]; then
    cat /seed/controller.pub >> /root/.ssh/authorized_keys
    chmod 600 /root/.ssh/authorized_keys
    if grep -q ' /etc/hosts ' /proc/self/mountinfo; then
        printf '127.0.1.1\t%s\n' "$(hostname)" >> /etc/hosts
    else
        printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n\n::1\tlocalhost ip6-localhost ip6-loopback\n' "$(hostname)" > /etc/hosts
        hostname > /etc/hostname
    fi
    touch /var/lib/gpufleet-test-seeded
fi
"""
NODE_INIT = NODE_SEED + r"""ssh-keygen -A
/usr/sbin/sshd -e -p "${GPUFLEET_TEST_SSH_PORT:-22}"
exec sleep infinity
"""
# Nodes whose init is systemd (shared/TESTBED.md, "systemd as a node's init"), for the roles that enable and start
# services (Fabric Manager, nvidia-persistenced): started on demand, with sshd as systemd's ssh.service on port 22.
SYSTEMD_NODES = (6, 7, 8, 9)
# Slurm's nodes (tests/cluster/test_slurm.py), systemd nodes too; 7 and 8 call themselves something other than their
# inventory name, as servers named by their vendor or DHCP do (Slurm's NodeHostname).
SLURM_NODES = (7, 8, 9)
HOSTNAMES = {7: "head-a07", 8: "gpu-b08"}
SYSTEMD_PACKAGES = ",systemd,systemd-sysv,dbus"
# Nodes as users have them (shared/TESTBED.md): node1 keeps the runtime's bind-mounted /etc/hosts (it is never
# stopped or disconnected by the fault tests, which would make podman rewrite that file), and node2's sshd
# listens on 2222, as Docker-based nodes' often do. Every node starts with the 127.0.1.1 line.
RUNTIME_HOSTS_NODES = (1,)
SSH_PORTS = {2: 2222}
# Hardware the nodes do not have, as fake sysfs trees under /fake-sys (gpufleet_sys_root in the inventory; the
# nodes' own /sys is read-only): node1 an InfiniBand HCA (GPUDirect RDMA), node2 an H100 and an NVSwitch (the driver and
# Fabric Manager). No module is loaded and no service started from them: they make the roles decide.
FAKE_SYS_ROOT = "/fake-sys"
_FAKE_PCI = ('d={root}/bus/pci/devices/{address}; mkdir -p $d; echo 0x10de > $d/vendor; echo {klass} > $d/class; '
             'echo {device} > $d/device\n')
# The HCA's port files in the kernel's formats (tests/fixtures/sysfs_infiniband/README.md names them).
_FAKE_HCA = ("p={root}/class/infiniband/mlx5_0/ports/1; mkdir -p $p/counters {root}/class/infiniband/mlx5_0/device/net/ib0"
             "; echo '4: ACTIVE' > $p/state; echo '5: LinkUp' > $p/phys_state; echo '200 Gb/sec (4X HDR)' > $p/rate"
             "; echo InfiniBand > $p/link_layer; for c in port_xmit_data port_rcv_data symbol_error link_error_recovery"
             " link_downed port_rcv_errors local_link_integrity_errors excessive_buffer_overrun_errors; do"
             " echo 0 > $p/counters/$c; done\n")
FAKE_SYS = {
    1: _FAKE_HCA.format(root=FAKE_SYS_ROOT),
    2: (_FAKE_PCI.format(root=FAKE_SYS_ROOT, address="0000:18:00.0", klass="0x030200", device="0x2330")
        + _FAKE_PCI.format(root=FAKE_SYS_ROOT, address="0000:05:00.0", klass="0x068000", device="0x22a3")),
}
FAKE_SYS[6] = FAKE_SYS[2]


def log(message: str) -> None:
    sys.stderr.write("testbed: %s\n" % message)
    sys.stderr.flush()


def podman(*args: str, check: bool = True, capture: bool = True, input_bytes: bytes | None = None
           ) -> subprocess.CompletedProcess:
    env = dict(os.environ, CONTAINERS_CONF=CONTAINERS_CONF)
    return subprocess.run(["podman", *args], env=env, check=check, input=input_bytes,
                          stdout=subprocess.PIPE if capture else None, stderr=subprocess.PIPE if capture else None)


def ensure_system_packages() -> None:
    if all(shutil.which(tool) for tool in ("podman", "debootstrap", "runc", "ssh-keyscan", "catatonit", "gpg")):
        return
    subprocess.run([os.path.join(REPO, "scripts", "install-system-packages.sh"), *SYSTEM_PACKAGES], check=True)


def image_name(systemd: bool = False) -> str:
    packages = PACKAGES + (SYSTEMD_PACKAGES if systemd else "")
    recipe = "\n".join([SUITE, packages, NODE_INIT])
    return "localhost/gpufleet-node%s:%s-%s" % ("-systemd" if systemd else "", SUITE,
                                                hashlib.sha256(recipe.encode()).hexdigest()[:12])


def ensure_image(systemd: bool = False) -> str:
    name = image_name(systemd)
    if podman("image", "exists", name, check=False).returncode == 0:
        return name
    log("building %s with debootstrap (about a minute)" % name)
    os.makedirs(CACHE, exist_ok=True)
    rootfs = tempfile.mkdtemp(prefix="rootfs-", dir=CACHE)
    try:
        packages = PACKAGES + (SYSTEMD_PACKAGES if systemd else "")
        subprocess.run(["debootstrap", "--variant=minbase", "--include=" + packages, SUITE, rootfs],
                       check=True, stdout=subprocess.DEVNULL)
        tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
        env = dict(os.environ, CONTAINERS_CONF=CONTAINERS_CONF)
        subprocess.run(["podman", "import", "--change", "CMD=/bin/bash", "-", name], stdin=tar.stdout, env=env,
                       check=True, stdout=subprocess.DEVNULL)
        if tar.wait() != 0:
            raise RuntimeError("tar of the root file system failed")
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    return name


def ensure_wheelhouse() -> str:
    """torch, DeepSpeed and the example's packages for the nodes' Python 3.11, made once on the controller."""
    wanted = WHEELS + [DEEPSPEED] + DEEPSPEED_DEPS
    key = hashlib.sha256(" ".join(wanted).encode()).hexdigest()[:12]
    path = os.path.join(CACHE, "wheelhouse-" + key)
    if os.path.exists(os.path.join(path, ".complete")):
        return path
    os.makedirs(path, exist_ok=True)
    log("building %s (no ops) into the wheelhouse" % DEEPSPEED)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-build-isolation", "--no-deps",
                    "-w", path, DEEPSPEED], check=True, env=dict(os.environ, DS_BUILD_OPS="0"))
    log("downloading the wheelhouse: %s" % " ".join(wanted))
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
                    "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
                    "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
                    "--platform", "any", "--find-links", path, "-d", path, *wanted], check=True)
    open(os.path.join(path, ".complete"), "w").close()
    return path


# The training image of the container tests: the node image with torch and numpy from the wheelhouse in a
# virtual environment first on PATH (the CPU build, nothing more), saved as an archive as an air-gapped cluster
# would receive it. The image itself is removed once saved: the tests start with the archive only.
TRAIN_IMAGE_WHEELS = ["torch==2.13.0", "numpy==2.4.6"]
TRAIN_IMAGE_VENV = "/opt/train"


def train_image_name() -> str:
    recipe = "\n".join([image_name(), " ".join(TRAIN_IMAGE_WHEELS), TRAIN_IMAGE_VENV])
    return "localhost/gpufleet-train:" + hashlib.sha256(recipe.encode()).hexdigest()[:12]


def ensure_train_image_archive() -> str:
    """The training image's archive (podman save), made once; returns its path."""
    name = train_image_name()
    path = os.path.join(CACHE, "%s.tar" % name.rsplit("/", 1)[1].replace(":", "-"))
    if os.path.exists(path):
        return path
    log("building %s: the node image with %s (about a minute)" % (name, " ".join(TRAIN_IMAGE_WHEELS)))
    base, wheelhouse = ensure_image(), ensure_wheelhouse()
    builder = "gpufleet-train-build"
    podman("rm", "--force", builder, check=False)
    install = ("python3 -m venv {venv} && {venv}/bin/pip install --quiet --no-index --no-cache-dir --find-links "
               "/wheelhouse {wheels} && rm -rf /root/.cache").format(venv=TRAIN_IMAGE_VENV,
                                                                      wheels=" ".join(TRAIN_IMAGE_WHEELS))
    try:
        podman("run", "--name", builder, "--network", "none", "--volume", "%s:/wheelhouse:ro" % wheelhouse,
               base, "/bin/sh", "-c", install)
        podman("commit", "--quiet", "--change", "ENV PATH=%s/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
               "/sbin:/bin" % TRAIN_IMAGE_VENV, "--change", "CMD=/bin/bash", builder, name)
    finally:
        podman("rm", "--force", builder, check=False)
    partial = path + ".partial"
    podman("save", "--quiet", "--output", partial, name)
    os.replace(partial, path)
    podman("rmi", name, check=False)
    return path


def ensure_network() -> None:
    """The project's network, made when missing; the cluster stage's two streams (scripts/cluster-streams.sh) may
    both find it missing at once, and the one that creates it second finds it made."""
    if podman("network", "exists", NETWORK, check=False).returncode == 0:
        return
    created = podman("network", "create", "--subnet", SUBNET, NETWORK, check=False)
    if created.returncode != 0 and podman("network", "exists", NETWORK, check=False).returncode != 0:
        raise RuntimeError("podman network create %s failed: %s" % (NETWORK, created.stderr.decode(errors="replace")))


def controller_key(state: str) -> str:
    key = os.path.join(state, "id_ed25519")
    if not os.path.exists(key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpufleet-test-controller", "-f", key],
                       check=True)
    return key


def node_name(index: int) -> str:
    return "node%d" % index


def container_name(index: int) -> str:
    return PREFIX + node_name(index)


def ssh_port(index: int) -> int:
    return SSH_PORTS.get(index, 22)


def start_node(index: int, image: str, seed: str, wheelhouse: str, nvidia_repo: str, plain: bool = False,
               volumes: tuple[str, ...] = ()) -> None:
    """Start one node. plain: no systemd init and no fake hardware (the benchmark's uniform nodes; the quirks of
    nodes as users have them, a runtime-managed /etc/hosts and sshd on 2222, stay)."""
    name = container_name(index)
    podman("rm", "--force", "--time", "0", name, check=False)
    hosts = [] if index in RUNTIME_HOSTS_NODES else ["--no-hosts"]
    systemd = index in SYSTEMD_NODES and not plain
    if systemd:
        init = ["--systemd=always", ensure_image(systemd=True), "/sbin/init"]
    else:
        init = ["--init", "--init-path", shutil.which("catatonit") or "/usr/bin/catatonit", image,
                "/bin/sh", "-c", NODE_INIT]
    podman("run", "--detach", "--name", name, "--hostname", HOSTNAMES.get(index, node_name(index)),
           "--network", NETWORK,
           "--ip", ADDRESS % (FIRST_HOST + index), *hosts, "--env", "GPUFLEET_TEST_SSH_PORT=%d" % ssh_port(index),
           "--volume", "%s:/seed:ro" % seed,
           "--volume", "%s:/wheelhouse:ro" % wheelhouse, "--volume", "%s:/nvidia-repo:ro" % nvidia_repo,
           *[arg for volume in volumes for arg in ("--volume", volume)],
           "--label", "gpufleet-test=1", *init)
    if systemd:
        wait_for_systemd(name)
        podman("exec", name, "/bin/sh", "-c", NODE_SEED)
    if index in FAKE_SYS and not plain:
        podman("exec", name, "/bin/sh", "-c", "set -e\n" + FAKE_SYS[index])


def wait_for_systemd(name: str, timeout: float = 90.0) -> None:
    """Until systemd says the node is up (running, or degraded: a unit that cannot start in a container)."""
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        done = podman("exec", name, "systemctl", "is-system-running", check=False)
        state = (done.stdout or b"").decode().strip()
        if state in ("running", "degraded"):
            return
        time.sleep(0.5)
    failed = podman("exec", name, "systemctl", "--failed", "--no-legend", check=False)
    raise RuntimeError("systemd on %s is %r after %.0f s; failed units: %s"
                       % (name, state, timeout, (failed.stdout or b"").decode().strip() or "none"))


def scan_host_key(address: str, port: int = 22, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = subprocess.run(["ssh-keyscan", "-T", "2", "-p", str(port), "-t", "ed25519", address],
                              capture_output=True, text=True, check=False)
        if done.stdout.strip():
            return done.stdout.strip()
        time.sleep(0.5)
    raise RuntimeError("sshd on %s did not answer within %.0f s" % (address, timeout))


def write_inventory(state: str, indices: list[int], key: str, known_hosts: str, nccl_tests_archive: str,
                    name: str = "hosts.yml", plain: bool = False) -> str:
    lines = ["---", "# Written by tests/cluster/testbed.py: the test cluster's nodes, in rank order.", "gpu_nodes:",
             "  hosts:"]
    for index in indices:
        lines += ["    %s:" % node_name(index), "      ansible_host: %s" % (ADDRESS % (FIRST_HOST + index))]
        if ssh_port(index) != 22:
            lines += ["      ansible_port: %d" % ssh_port(index)]
        if index in FAKE_SYS and not plain:
            lines += ["      gpufleet_sys_root: %s" % FAKE_SYS_ROOT]
    lines += [
        "  vars:",
        "    ansible_user: root",
        "    ansible_python_interpreter: /usr/bin/python3",
        "    ansible_ssh_private_key_file: %s" % key,
        "    # The nodes' real host keys, scanned at start; host key checking stays on.",
        "    ansible_ssh_common_args: -o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes" % known_hosts,
        "    gpufleet_python: /opt/gpufleet/venv/bin/python",
        "    # The nodes share this machine's cores (testbed.NODE_ENV says why).",
        "    gpufleet_env: %s" % json.dumps(NODE_ENV),
        "    python_env_wheelhouse: /wheelhouse",
        "    python_env_extra_packages: [%s]" % ", ".join(NODE_EXTRA_PACKAGES),
        "    # NVIDIA's repositories cannot be reached here: the nodes get a local repository of stand-in packages",
        "    # with NVIDIA's names and versions (tests/cluster/standin_repo.py). The nodes have no GPU.",
        "    gpufleet_nvidia_mirror: file:///nvidia-repo",
        "    gpufleet_nvidia_container_toolkit_mirror: file:///nvidia-repo/%s" % standin_repo.TOOLKIT_DIR,
        "    nvidia_driver_rebuild_initramfs: false",
        "    # The nodes are containers: the driver role's container guard is overridden for the stand-in packages.",
        "    nvidia_driver_allow_container: true",
        "    # The nodes have no GPU: CUDA, NCCL and nccl-tests are installed anyway, as on a build host.",
        "    gpufleet_nvidia_on_gpu_less_nodes: true",
        "    # A stand-in nccl-tests source (no CUDA here): its make records the build's inputs, its all_reduce_perf",
        "    # prints nccl-tests' layout with fixed figures.",
        "    nccl_tests_archive: %s" % nccl_tests_archive,
    ]
    path = os.path.join(state, name)
    with open(path, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    return path


def prepare() -> None:
    """Everything the nodes are made from (system packages, image, wheelhouse, stand-in repository), made once.

    Holds a lock while it works: `make test` runs it in the background during lint and the unit tests, and the
    cluster stage's own call waits for that one, then finds everything made."""
    os.makedirs(CACHE, exist_ok=True)
    with open(os.path.join(CACHE, "prepare.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ensure_system_packages()
        ensure_image()
        ensure_image(systemd=True)
        ensure_wheelhouse()
        standin_repo.build(os.path.join(CACHE, "nvidia-standin"))
        standin_repo.build_nccl_tests_archive(CACHE)
        ensure_train_image_archive()


def up(state: str, count: int, image: str | None = None, plain: bool = False, volumes: tuple[str, ...] = ()) -> dict:
    """A fresh cluster of nodes 0..count-1 (whatever an earlier run left of them is removed first; the nodes of
    other indices are left alone: they are the nodes a module starts for itself, see conftest.py's own_nodes_state)."""
    ensure_system_packages()
    os.makedirs(state, exist_ok=True)
    remove_nodes(list(range(count)))  # whatever an interrupted run left behind
    return start_nodes(state, list(range(count)), image=image, plain=plain, volumes=volumes)


def start_nodes(state: str, indices: list[int], name: str = "hosts.yml", image: str | None = None,
                plain: bool = False, volumes: tuple[str, ...] = ()) -> dict:
    """Start the nodes of these indices on the project's network and write their inventory (state/name)."""
    image = image or ensure_image()
    wheelhouse = ensure_wheelhouse()
    nvidia_repo = os.path.join(CACHE, "nvidia-standin")
    standin_repo.build(nvidia_repo)
    ensure_network()
    key = controller_key(state)
    seed = os.path.join(state, "seed")
    os.makedirs(seed, exist_ok=True)
    shutil.copy(key + ".pub", os.path.join(seed, "controller.pub"))
    for index in indices:
        start_node(index, image, seed, wheelhouse, nvidia_repo, plain=plain, volumes=volumes)
    known_hosts = os.path.join(state, "known_hosts-" + name)
    with open(known_hosts, "w") as handle:
        for index in indices:
            handle.write(scan_host_key(ADDRESS % (FIRST_HOST + index), ssh_port(index)) + "\n")
    nccl_tests_archive = standin_repo.build_nccl_tests_archive(CACHE)
    inventory = write_inventory(state, indices, key, known_hosts, nccl_tests_archive, name, plain=plain)
    info = {"inventory": inventory, "nodes": [node_name(i) for i in indices],
            "containers": [container_name(i) for i in indices],
            "addresses": [ADDRESS % (FIRST_HOST + i) for i in indices], "key": key, "known_hosts": known_hosts,
            "wheelhouse": wheelhouse, "nvidia_repo": nvidia_repo}
    record = "testbed.json" if name == "hosts.yml" else os.path.splitext(name)[0] + ".json"
    with open(os.path.join(state, record), "w") as handle:
        json.dump(info, handle, indent=2)
    log("%d nodes up: %s" % (len(indices), ", ".join(info["addresses"])))
    return info


# What a provisioned node must not keep when it becomes an image that many nodes start from: its SSH host keys
# and root's key pair (each node makes its own), the controller's seeded key and the seed marker, the job folders.
FORGET_NODE = ("rm -rf /etc/ssh/ssh_host_* /root/.ssh /var/lib/gpufleet-test-seeded /root/.gpufleet "
               "/var/cache/apt/archives/*.deb")


def commit_node(index: int, image: str) -> str:
    """Save a node (provisioned) as an image that nodes can start from, without what makes it that node."""
    node_exec(index, "/bin/sh", "-c", FORGET_NODE)
    podman("commit", "--quiet", "--change", "CMD=/bin/bash", container_name(index), image)
    return image


def remove_nodes(indices: list[int]) -> None:
    for index in indices:
        podman("rm", "--force", "--time", "0", container_name(index), check=False)


def down(state: str | None = None) -> None:
    """Remove every test container (by the project's own label) and the network; keep the image and wheel caches."""
    names = podman("ps", "--all", "--filter", "label=gpufleet-test=1", "--format", "{{.Names}}", check=False)
    for name in (names.stdout or b"").decode().split():
        podman("rm", "--force", "--time", "0", name, check=False)
    podman("network", "rm", "--force", NETWORK, check=False)
    if state and os.path.isdir(state):
        shutil.rmtree(state, ignore_errors=True)


def stop_sshd(index: int) -> None:
    """Stop the node's sshd (the listener; sessions already open end with their connections)."""
    node_exec(index, "sh", "-c", "kill $(cat /run/sshd.pid)")


def start_sshd(index: int) -> None:
    node_exec(index, "/usr/sbin/sshd", "-e", "-p", str(ssh_port(index)))
    scan_host_key(ADDRESS % (FIRST_HOST + index), ssh_port(index))


def node_exec(index: int, *command: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run a command in a node (through podman, not SSH: for tests that break or inspect a node)."""
    return podman("exec", container_name(index), *command, check=check)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    start = sub.add_parser("up")
    start.add_argument("--nodes", type=int, default=3)
    start.add_argument("--state", required=True)
    stop = sub.add_parser("down")
    stop.add_argument("--state")
    ready = sub.add_parser("prepare", help="make the image, the wheelhouse and the stand-in repository, once")
    ready.add_argument("--wait-background", action="store_true",
                       help="(what it does anyway) wait for a prepare already running, e.g. make test's")
    args = parser.parse_args()
    if args.action == "prepare":
        prepare()
    elif args.action == "up":
        print(up(os.path.abspath(args.state), args.nodes)["inventory"])
    else:
        down(args.state)


if __name__ == "__main__":
    main()
