"""Servers as users have them before gpufleet (shared/TESTBED.md, last section): three nodes of this module's own
that gpufleet never provisioned (no etc_hosts, no nccl_env: their hostnames resolve to the Debian installer's
127.0.1.1) get only a Python with torch (provision.yml --tags python_env), and check mode, train.yml and verify.yml
must work there. Its nodes are its own (conftest.py's own_nodes_state), so it runs in the cluster stage's
own-nodes stream (scripts/cluster-streams.sh)."""

import json
import os
import re
import shlex
import subprocess
import time

import pytest
import yaml

import testbed
from harness import BIN, REPO, Cluster
from jobfaults import FAULTY, PTRACE_REFUSED, STALLED, WAITING, rank_sections

pytestmark = pytest.mark.cluster

# Nodes of their own for the training on unprovisioned servers: node3, node4, node5.
RAW = [3, 4, 5]


@pytest.fixture(scope="module")
def raw_cluster(own_nodes_state):
    """Three more nodes, never provisioned by gpufleet except for a Python with torch (python_env alone, with its
    default packages: torch and nothing else, as a user who sets nothing gets)."""
    info = testbed.start_nodes(own_nodes_state, RAW, name="raw.yml")
    try:
        raw = Cluster(info, own_nodes_state)
        # As a new user's first command on bare Debian nodes (README, quickstart step 3), before anything installed
        # python3-apt: read by test_check_mode_on_bare_debian_nodes_says_python3_apt_is_needed.
        raw.bare_check = raw.playbook("provision.yml", "--check", "--diff")
        # Then as the README says: python3-apt first, and --check again, before anything else was installed.
        apt = subprocess.run([os.path.join(BIN, "ansible"), "-i", raw.inventory, "gpu_nodes", "-b", "-m",
                              "ansible.builtin.apt", "-a", "name=python3-apt"], cwd=raw.state, capture_output=True,
                             text=True, check=False, env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg")))
        assert apt.returncode == 0, apt.stdout[-3000:] + apt.stderr[-3000:]
        raw.bare_check_with_apt = raw.playbook("provision.yml", "--check", "--diff")
        run = raw.playbook("provision.yml", "--tags", "python_env", "-e", '{"python_env_extra_packages": []}')
        assert run.rc == 0, run.out[-3000:]
        packages = raw.host(raw.nodes[0]).check_output("/opt/gpufleet/venv/bin/python -m pip list --format=freeze")
        installed = [line.split("+")[0] for line in packages.split()]  # torch==2.13.0+cpu: the wheel's local tag
        assert "torch==2.13.0" in installed and "numpy" not in packages and "deepspeed" not in packages, packages
        yield raw
    finally:
        testbed.remove_nodes(RAW)


def test_check_mode_on_bare_debian_nodes_says_python3_apt_is_needed(raw_cluster):
    """Ansible's apt module cannot compare package states without python3-apt in check mode: provision.yml --check
    says so for every node before anything is compared, instead of failing at the first apt handler."""
    run = raw_cluster.bare_check
    assert run.rc != 0
    said = " ".join(run.out.split())
    for node in raw_cluster.nodes:
        assert ("%s: provision.yml --check needs python3-apt on the node (Ansible's apt module reads package states "
                "through it in check mode) and the node has none; nothing was changed." % node) in said, said[-3000:]
    assert "python3-apt must be installed to use check mode" not in said  # the apt module's own error, later
    assert "changed: [" not in run.out and "--- before" not in run.out


def test_check_mode_on_bare_nodes_with_python3_apt_runs_through_and_says_what_it_cannot_compare(raw_cluster):
    """NVIDIA's repository is not on bare nodes yet, so apt cannot compare its packages in check mode: each NVIDIA
    role says so and ends its check there instead of failing with "No package matching"; python_env likewise
    without python3-venv and python3-packaging, nccl_tests has no folder to unpack into; nothing is changed."""
    run = raw_cluster.bare_check_with_apt
    assert run.rc == 0, run.out[-4000:]
    said = " ".join(run.out.split())
    for node in raw_cluster.nodes:
        for role in ("cuda_toolkit", "nccl"):
            # (the callback doubles the apostrophe of "role's" in its quoted YAML)
            assert ("%s: the repository is not set up on the node yet (a real run adds it first), so check mode cannot "
                    "compare the %s role" % (node, role)) in said, said[-4000:]
        assert ("%s: python3-venv, python3-packaging would be installed first (a real run does), so check mode cannot "
                "compare the environment" % node) in said
    assert "No package matching" not in said and "fatal:" not in run.out
    for node in raw_cluster.nodes:
        host = raw_cluster.host(node)
        assert not host.file("/etc/apt/sources.list.d/nvidia-cuda.sources").exists
        assert not host.file("/etc/gpufleet").exists


def test_train_on_servers_gpufleet_did_not_provision(raw_cluster):
    raw = raw_cluster
    for node in raw.nodes:
        host = raw.host(node)
        # As the servers come: the hostname resolves to loopback, and no gpufleet network settings exist.
        assert host.run("getent ahostsv4 $(hostname)").stdout.split()[0] == "127.0.1.1"
        assert not host.file("/etc/gpufleet/nccl.env").exists
    run = raw.playbook("train.yml", "-e", "script=%s/examples/train.py" % REPO, "-e", "nproc_per_node=2")
    assert run.rc == 0, run.out[-4000:]
    logs = {node: open("%s/logs/train/%s.log" % (raw.state, node)).read() for node in raw.nodes}
    for rank in range(6):
        assert any("rank %d of world size 6" % rank in log for log in logs.values())
    for node in raw.nodes:
        # The launch named the interface of each node's cluster address for Gloo and NCCL (for NCCL exactly: "=").
        launch = raw.host(node).file("/root/.gpufleet/jobs/train/launch.sh").content_string
        iface = raw.host(node).check_output("ip -o -4 addr show to %s | awk '{print $2}'", raw.addresses[node])
        assert 'GLOO_SOCKET_IFNAME="${GLOO_SOCKET_IFNAME:-%s}"' % iface in launch, launch
        assert 'NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-=%s}"' % iface in launch


def test_a_script_raising_at_the_same_line_twice_is_not_restarted_a_third_time(raw_cluster):
    """Restart by cause (restart_policy.py) across real machines: global rank 1, on the second node, raises at
    raise_at_same_line.py:11 in every attempt; with max_restarts=3 and min_progress_s=0 (the time guard off), attempt
    2 fails at the same place and no third is launched; the summary and every node's state say why."""
    raw = raw_cluster
    run = raw.playbook("train.yml", "-e", "script=%s/tests/integration/scripts/raise_at_same_line.py" % REPO,
                       "-e", "job=same-line", "-e", "max_restarts=3", "-e", "min_progress_s=0")
    assert run.rc != 0
    said = ("not restarting: rank 1 (%s) failed twice in a row in raise_at_same_line.py:11 with exit code 1: the "
            "script's own failure, which a restart would meet again" % raw.nodes[1])
    assert said in " ".join(run.out.split()), run.out[-3000:]
    for node in raw.nodes:
        state = json.loads(raw.host(node).file("/root/.gpufleet/jobs/same-line/state.json").content_string)
        assert [a["attempt"] for a in state["attempts"]] == [1, 2] and state["no_restart"] == said, state


def test_a_peer_s_failure_and_stop_yml_each_leave_a_save_the_next_attempt_resumes_from(raw_cluster):
    """The stop notice (GPUFLEET_STOP_FILE, before SIGTERM; stop_notice.py) across real machines, with
    tests/integration/scripts/save_on_stop.py (one rank per node): the second node's rank fails at step 10 of attempt
    1; the other ranks read why, save, and attempt 2 starts at their saved steps; stop.yml stops attempt 2, every
    rank saves, and a launch of the same job resumes from those saves and ends well."""
    raw = raw_cluster
    script = "script=%s/tests/integration/scripts/save_on_stop.py" % REPO
    env = dict(testbed.NODE_ENV, FAIL_NODE_RANK="1", FAIL_STEP="10")
    args = ["-e", script, "-e", "job=saver", "-e", "stop_grace_s=20"]
    first = raw.playbook("train.yml", *args, "-e", "max_restarts=1", "-e", "wait=false",
                         "-e", json.dumps({"gpufleet_env": env}))
    assert first.rc == 0, first.out[-3000:]

    def log(node):
        return raw.host(node).file("/root/.gpufleet/jobs/saver/job.log").content_string

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all("rank %d attempt 2 starts" % rank in log(node)
                                                  for rank, node in enumerate(raw.nodes)):
        time.sleep(1)
    for rank in (0, 2):
        text = log(raw.nodes[rank])
        saved = re.search(r"rank %d saved step (\d+) \(notice before SIGTERM: (?:\[True\]|no SIGTERM yet)\): (.*)"
                          % rank, text)
        assert saved and raw.nodes[1] in saved.group(2), text[-3000:]  # why: the peer whose failure stopped it
        assert "rank %d attempt 2 starts at step %s (grace 20 s)" % (rank, saved.group(1)) in text, text[-3000:]
    stop = raw.playbook("stop.yml", "-e", "job=saver")
    assert stop.rc == 0, stop.out[-3000:]
    steps = {}
    for rank, node in enumerate(raw.nodes):
        found = re.findall(r"rank %d saved step (\d+) \(notice before SIGTERM: (?:\[True\]|no SIGTERM yet)\): "
                           r"stopped with playbooks/stop.yml" % rank, log(node))
        assert found, log(node)[-3000:]
        steps[rank] = int(found[-1])
    again = raw.playbook("train.yml", *args, "-e", json.dumps({"gpufleet_env": dict(env, RUN_STEPS="3")}))
    assert again.rc == 0, again.out[-3000:]
    for rank, node in enumerate(raw.nodes):
        assert "rank %d attempt 1 starts at step %d" % (rank, steps[rank]) in log(node), log(node)[-2000:]
        assert "rank %d done at step %d" % (rank, steps[rank] + 3) in log(node), log(node)[-2000:]


def test_a_hang_of_a_job_run_as_a_non_root_user_where_py_spy_is_refused_names_the_stuck_rank_and_its_frame(raw_cluster):
    """The job run as a user who is not root (trainer, the inventory's ansible_user: the supervisor and the ranks are
    trainer's, its job folder in trainer's home), on nodes whose py-spy refuses as py-spy does for such a user under
    Ubuntu's kernel.yama.ptrace_scope=1 (its own words, tests/fixtures/py_spy/ptrace_refused.txt; the test machines'
    kernel has no Yama, so the real refusal cannot be had here). Rank 4 (the third node's first) stalls; the hang
    watchdog's message names rank 4, its node and its frame, read by the ranks' own faulthandler (stack_hook.py), and
    every rank's stack is fetched."""
    raw = raw_cluster
    job, py_spy = "hang-as-user", "/opt/gpufleet/venv/bin/py-spy"
    refusing = "#!/bin/sh\necho %s >&2\nexit 1\n" % shlex.quote(PTRACE_REFUSED)
    for node in raw.nodes:
        raw.node_exec(node, "sh", "-c", "useradd -m -s /bin/sh trainer && install -d -m 700 -o trainer -g trainer "
                      "/home/trainer/.ssh && install -m 600 -o trainer -g trainer /root/.ssh/authorized_keys "
                      "/home/trainer/.ssh/ && mv %s %s.away && printf '%%s' \"$0\" > %s && chmod 755 %s"
                      % ((py_spy,) * 4), refusing, check=True)
    with open(raw.inventory) as handle:
        inventory = yaml.safe_load(handle)
    inventory["gpu_nodes"]["vars"]["ansible_user"] = "trainer"
    as_user = os.path.join(raw.state, "trainer-hosts.yml")
    with open(as_user, "w") as handle:
        yaml.safe_dump(inventory, handle)
    try:
        run = raw.playbook("train.yml", "-e", "script=%s" % FAULTY, "-e", "job=%s" % job, "-e", "nproc_per_node=2",
                           "-e", "hang_timeout=8", "-e", "script_args='--steps 400 --step-s 0.1 --stall-rank 4 "
                           "--stall-step 6'", inventory=as_user)
    finally:
        for node in raw.nodes:
            raw.node_exec(node, "mv", py_spy + ".away", py_spy, check=True)
    assert run.rc != 0, run.out[-3000:]
    said = " ".join(run.out.split())
    assert ("ranks 0\u20133, 5 in %s, rank 4 in %s: rank 4 on %s is the likely cause" % (WAITING, STALLED, raw.nodes[2])
            in said), said[-3000:]
    logs = os.path.join(raw.state, "logs", job)
    for index, node in enumerate(raw.nodes):
        sections = rank_sections(os.path.join(logs, "%s.stacks.txt" % node))
        assert sorted(sections) == [2 * index, 2 * index + 1], sections
        for body in sections.values():
            assert "read by the rank's own faulthandler (Python frames only); py-spy: " + PTRACE_REFUSED in body, body
        # The job was trainer's: its folder is in trainer's home, none in root's.
        host = raw.host(node)
        assert host.file("/home/trainer/.gpufleet/jobs/%s/state.json" % job).user == "trainer"
        assert not host.file("/root/.gpufleet/jobs/%s" % job).exists
    assert "    load_next_batch (" in rank_sections(os.path.join(logs, "%s.stacks.txt" % raw.nodes[2]))[4]
    for node in raw.nodes:
        # Nothing of trainer's is left running but the SSH session Ansible keeps open (ControlPersist); the user goes
        # (-f: past that session), as the nodes came.
        left = raw.node_exec(node, "ps", "-u", "trainer", "-o", "args=").stdout.decode().splitlines()
        assert all(line.startswith("sshd: trainer") for line in left), (node, left)
        raw.node_exec(node, "userdel", "-f", "-r", "trainer", check=True)


def test_gpu_less_servers_get_no_nvidia_repository_unless_opted_in(raw_cluster):
    raw = raw_cluster
    only_nvidia = ("--skip-tags", "etc_hosts,ssh_mesh,nccl_env,mpi,python_env")
    run = raw.playbook("provision.yml", *only_nvidia, "-e", "gpufleet_nvidia_on_gpu_less_nodes=false")
    assert run.rc == 0, run.out[-3000:]
    for node in raw.nodes:
        # One message per node (the driver role's, naming both variables), and nothing of NVIDIA's on the node.
        assert run.out.count("%s: no NVIDIA GPU on the PCI bus" % node) == 1, run.out[-3000:]
        assert "gpufleet_nvidia_on_gpu_less_nodes: true for a build host" in run.out
        host = raw.host(node)
        assert not host.file("/etc/apt/sources.list.d/nvidia-cuda.sources").exists
        assert not host.package("cuda-toolkit-12-8").is_installed and not host.package("libnccl2").is_installed
    # Opted in, with a repository the nodes cannot reach (a closed port on their own loopback): the failure names
    # the URL and the variable that points at a mirror.
    unreachable = raw.playbook("provision.yml", *only_nvidia, "-e", "gpufleet_nvidia_mirror=http://127.0.0.1:9")
    assert unreachable.rc != 0
    text = unreachable.out.replace("\n        ", " ")
    assert "cannot download NVIDIA's repository key http://127.0.0.1:9/debian12/x86_64/3bf863cc.pub" in text, text[-3000:]
    assert "set gpufleet_nvidia_mirror to a mirror of https://developer.download.nvidia.com/compute/cuda/repos" in text


def test_verify_passes_on_gpu_less_nodes_with_a_gloo_measurement(raw_cluster):
    """The three GPU-less nodes as the test above left them: provision.yml said "no NVIDIA GPU on the PCI bus" and
    installed no CUDA, NCCL or nccl-tests (its etc_hosts, ssh_mesh, nccl_env and mpi roles were left out there, so
    each hostname still resolves to 127.0.1.1 and nothing sets GLOO_SOCKET_IFNAME). verify.yml checks what applies,
    says that NCCL's bandwidth was not measured and why, measures the network with a Gloo all_reduce across the
    three nodes, and passes; it no longer asks for nccl-tests, which provision.yml would not install here."""
    raw = raw_cluster
    run = raw.playbook("verify.yml", "-e", '{"verify_gloo_sizes": [65536, 4194304]}')
    assert run.rc == 0, run.out[-4000:]
    said = " ".join(run.out.split())
    assert ("NCCL bandwidth was not measured on node3, node4, node5: no NVIDIA GPU (nvidia-smi lists none, and the "
            "PCI bus has none)") in said, said[-3000:]
    assert "Gloo all_reduce across 3 node(s) (node3, node4, node5), one rank each: peak bus bandwidth" in said
    assert "all_reduce_perf missing" not in said and "--tags mpi,nccl_tests" not in said
    gloo = json.load(open(os.path.join(raw.state, "logs", "verify", "gloo_all_reduce.json")))
    assert gloo["verdict"]["passed"] is True and gloo["hosts"] == ["node3", "node4", "node5"], gloo
    assert all(row["wrong"] == 0 and row["busbw_gbps"] > 0 for row in gloo["rows"]) and len(gloo["rows"]) == 2, gloo
    for node in raw.nodes:
        # Gloo went over each node's cluster interface, not the loopback address its hostname resolves to.
        iface = raw.host(node).check_output("ip -o -4 addr show to %s | awk '{print $2}'", raw.addresses[node])
        assert gloo["interfaces"][node] == iface
