"""What a new user meets first: nothing changes on a machine they did not name, and the collection installs with pip.

The refusal tests run provision.yml and verify.yml for real against the embedded demo inventory (two nodes on this
machine over ansible_connection=local) and check that the run ends in the inventory check, before any play that
reaches a node. The install test builds the wheel from this checkout, installs it into a new virtual environment,
and trains from an empty folder outside the checkout by the playbook's FQCN; it checks where the collection lands
and that the script and logs are taken relative to that folder, not the NVIDIA roles (which need servers).
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import BIN, REPO

pytestmark = pytest.mark.integration

GUARD = "nothing was changed. Pass -i <your inventory> to name your servers, or -e allow_local=true"


def assert_stopped_in_the_inventory_check(run):
    assert run.rc != 0, run.out
    assert "PLAY [Check the inventory]" in run.out
    # No play after the check started, so no node was reached, and nothing anywhere reported a change.
    assert len(re.findall(r"^PLAY \[", run.out, re.M)) == 1, run.out
    assert not re.search(r"^changed: ", run.out, re.M)
    assert re.search(r"^localhost +: ok=\d+ +changed=0 ", run.out, re.M), run.out


@pytest.mark.parametrize("playbook", ["provision.yml", "verify.yml"])
def test_a_playbook_that_changes_nodes_refuses_this_machine_without_allow_local(local, playbook):
    run = local.playbook(playbook)
    assert_stopped_in_the_inventory_check(run)
    assert ("%s would change node0, node1, which are this machine (ansible_connection=local in %s/inventories/local/"
            "hosts.yml, the embedded demo inventory); %s" % (playbook, REPO, GUARD)) in " ".join(run.out.split())


def test_allow_local_lets_provision_go_on(local):
    # Check mode and one role that only reads here: the run gets past the check and reaches both nodes.
    run = local.playbook("provision.yml", "-e", "allow_local=true", "--check", "--tags", "etc_hosts")
    assert run.rc == 0, run.out
    assert "PLAY [Provision gpu_nodes]" in run.out
    assert run.task_results("TASK [Reach every node]") == {"node0": "ok", "node1": "ok"}


def test_allow_local_lets_verify_go_on_and_pass_without_gpus(local):
    """This machine has no NVIDIA GPU: verify.yml says NCCL was not measured and why, measures the network with a
    Gloo all_reduce between the demo's two nodes (two ranks of the training Python, over loopback) and passes."""
    run = local.playbook("verify.yml", "-e", "allow_local=true", "-e", '{"verify_gloo_sizes": [4096, 1048576]}')
    assert "PLAY [The nodes' GPU stacks agree]" in run.out
    assert run.task_results("Read GPUs, driver, CUDA") == {"node0": "ok", "node1": "ok"}
    assert run.rc == 0, run.out[-4000:]
    said = " ".join(run.out.split())
    assert ("NCCL bandwidth was not measured on node0, node1: no NVIDIA GPU (nvidia-smi lists none, and the PCI bus "
            "has none)") in said, said[-3000:]
    assert "Gloo all_reduce across 2 node(s) (node0, node1), one rank each: peak bus bandwidth" in said
    assert "TASK [Run all_reduce_perf" not in run.out  # skipped (ansible.cfg does not show skipped tasks)
    report = json.load(open(local.logs / "verify" / "gloo_all_reduce.json"))
    assert report["hosts"] == ["node0", "node1"] and report["errors"] == {} and report["verdict"]["passed"] is True
    assert [row["size_bytes"] for row in report["rows"]] == [4096, 1048576]
    assert all(row["wrong"] == 0 and row["busbw_gbps"] > 0 for row in report["rows"]), report["rows"]
    # The network step alone reads each node's GPUs itself (the stack play did not run) and measures the same way.
    alone = local.playbook("verify.yml", "-e", "allow_local=true", "--tags", "nccl",
                           "-e", '{"verify_gloo_sizes": [4096]}')
    assert alone.rc == 0, alone.out[-4000:]
    assert "GPU stack on" not in alone.out
    assert alone.task_results("Read each node's GPUs where the stack play did not") == {"node0": "ok", "node1": "ok"}
    assert "Gloo all_reduce across 2 node(s) (node0, node1)" in " ".join(alone.out.split())


def test_verify_network_step_alone_refuses_gpus_the_driver_does_not_list(local, tmp_path):
    """Under --tags nccl the stack step's gate did not run: a node with an NVIDIA GPU on its PCI bus (a fake sysfs:
    an H100's vendor, device and 3D-controller class, as the kernel shows them) that nvidia-smi does not list is
    named, not measured as a GPU-less node."""
    device = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:18:00.0"
    device.mkdir(parents=True)
    for name, value in (("vendor", "0x10de"), ("device", "0x2330"), ("class", "0x030200")):
        (device / name).write_text(value + "\n")
    run = local.playbook("verify.yml", "-e", "allow_local=true", "--tags", "nccl",
                         "-e", "gpufleet_sys_root=%s" % (tmp_path / "sys"))
    assert run.rc != 0
    said = " ".join(run.out.split())
    for node in ("node0", "node1"):
        assert ("%s: 1 NVIDIA GPU(s) on its PCI bus and nvidia-smi lists none, so NCCL cannot be measured there; "
                "ansible-playbook -i <inventory> playbooks/verify.yml --tags stack says why" % node) in said, said[-3000:]
    assert "Gloo all_reduce across" not in said


def test_train_says_it_uses_the_embedded_demo_inventory(local):
    run = local.playbook("train.yml", "-e", "script=does/not/exist.py")
    assert run.rc != 0
    said = " ".join(run.out.split())
    assert ("Using the embedded demo inventory %s/inventories/local/hosts.yml: two nodes on this machine. Pass -i "
            "<your inventory> to train on your servers." % REPO) in said
    # It is said before the plan refuses the script.
    assert said.index("Using the embedded demo inventory") < said.index("does not exist on the controller")


def test_a_role_run_from_a_users_own_playbook_refuses_this_machine_without_allow_local(local, tmp_path):
    """The roles that change nodes carry the guard themselves (roles/local_guard), for playbooks gpufleet did not
    write: the role fails before any task of its own, naming the role and the host."""
    playbook = tmp_path / "my_site.yml"
    playbook.write_text("- hosts: gpu_nodes\n  gather_facts: false\n  roles:\n    - gpufleet.cluster.etc_hosts\n")
    run = local.playbook(str(playbook))
    assert run.rc != 0
    said = " ".join(run.out.split())
    assert ("gpufleet.cluster.etc_hosts would change node0, which is this machine (ansible_connection=local); "
            "nothing was changed. Pass -i <your inventory> to name your servers, or -e allow_local=true") in said, said
    assert "changed=0" in run.out and "changed: [" not in run.out
    assert "Validating arguments against arg spec 'main' - Map every node" not in run.out  # before the role's own
    allowed = local.playbook(str(playbook), "-e", "allow_local=true", "--check")
    assert "would change node0" not in allowed.out
    assert "Validating arguments against arg spec 'main' - Map every node" in allowed.out


@pytest.mark.parametrize("args, inventory, message", [
    (["-e", "allow_local=maybe"], None, "argument 'allow_local' is of type str and we were unable to convert to bool"),
    (["-i", "/no/such/inventory.yml"], None,
     "inventory: /no/such/inventory.yml does not exist; pass -i with the path of your inventory file"),
    ([], "workers:\n  hosts:\n    w0:\n      ansible_host: 192.0.2.10\n",
     "inventory: group 'gpu_nodes' is empty or missing in %(inventory)s; list the nodes there in rank order"),
])
def test_bad_inventory_inputs_are_refused_before_any_node(local, tmp_path, args, inventory, message):
    path = None
    if inventory is not None:
        path = tmp_path / "hosts.yml"
        path.write_text(inventory)
    run = local.playbook("provision.yml", *args, inventory=path)
    assert_stopped_in_the_inventory_check(run)
    assert message % {"inventory": path} in " ".join(run.out.split())


@pytest.mark.parametrize("role, variable, value, message", [
    ("etc_hosts", "etc_hosts_enabled", "maybe",
     "argument 'etc_hosts_enabled' is of type str and we were unable to convert to bool"),
    ("python_env", "python_env_packages", {"torch": "2.13.0"},
     "argument 'python_env_packages' is of type dict and we were unable to convert to list"),
])
def test_a_role_variable_of_the_wrong_type_is_refused_before_any_role_runs(local, role, variable, value, message):
    """provision.yml checks every role's argument spec once, in its pre_tasks (the roles are imported without
    validating again): a wrong type is refused naming the node, the role and the variable, before any role's task
    (the first and the last role of the play here). The demo inventory's nodes are this machine (allow_local=true),
    and the run is in check mode, so that it could change nothing even if the refusal were gone; it reads facts and
    the package list, and stops."""
    run = local.playbook("provision.yml", "--check", "-e", "allow_local=true", "-e", json.dumps({variable: value}))
    assert run.rc != 0, run.out
    said = " ".join(run.out.split())
    assert re.search(r"failed: \[node0\] \(item=%s\)" % role, run.out), run.out[-3000:]
    assert message in said, said[-3000:]
    assert "TASK [gpufleet.cluster." not in run.out, run.out  # no role's task, not even a preflight's
    assert not re.search(r"^changed: ", run.out, re.M)
    assert re.search(r"^node0 +: ok=\d+ +changed=0 ", run.out, re.M), run.out[-2000:]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A new virtual environment with the wheel built from this checkout installed, as a user's `pip install .`."""
    root = tmp_path_factory.mktemp("installed")
    source = root / "source"
    # A copy of the collection's content, so that no build output lands in the checkout.
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".cache", "logs", "build", "tests", "bench", "collections", "*.egg-info", "__pycache__"))
    wheels = root / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(wheels), str(source)], check=True)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    wheel = next(wheels.glob("gpufleet-*.whl"))
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return venv


def test_pip_install_puts_the_collection_where_ansible_finds_it(installed):
    site = subprocess.run([str(installed / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    root = os.path.join(site, "ansible_collections", "gpufleet", "cluster")
    for part in ("galaxy.yml", "LICENSE", "meta/runtime.yml", "playbooks/train.yml", "roles/job/tasks/train.yml",
                 "plugins/modules/launch.py", "plugins/module_utils/_runtime/supervisor.py"):
        assert os.path.isfile(os.path.join(root, part)), part
    assert not os.path.exists(os.path.join(root, "setup.py"))
    listed = subprocess.run([str(installed / "bin" / "ansible-galaxy"), "collection", "list", "gpufleet.cluster"],
                            capture_output=True, text=True, check=False, cwd="/", env=_clean_env(installed))
    assert re.search(r"^gpufleet\.cluster +0\.1\.0", listed.stdout, re.M), listed.stdout + listed.stderr


def _clean_env(venv):
    """The environment of a user's shell: no ANSIBLE_* of this test run, the new environment's tools first."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update({"PATH": str(venv / "bin") + os.pathsep + env.get("PATH", ""), "ANSIBLE_NOCOLOR": "1",
                "PYTHONUNBUFFERED": "1"})
    return env


def test_train_by_fqcn_from_a_folder_outside_the_checkout(installed, tmp_path):
    project = tmp_path / "my-project"
    project.mkdir()
    shutil.copy(os.path.join(REPO, "examples", "train.py"), project / "train.py")
    nodes = tmp_path / "nodes"
    # Two nodes on this machine, as the embedded demo has them; the training Python is the test's (it has torch).
    (project / "hosts.yml").write_text(yaml.safe_dump({"gpu_nodes": {
        "hosts": {"node0": {"gpufleet_cluster_address": "127.0.0.1"},
                  "node1": {"gpufleet_cluster_address": "127.0.0.2"}},
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                 "gpufleet_python": sys.executable,
                 "gpufleet_jobs_dir": "%s/{{ inventory_hostname }}/jobs" % nodes,
                 "gpufleet_env": {"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}}}}))
    done = subprocess.run([str(installed / "bin" / "ansible-playbook"), "gpufleet.cluster.train", "-i", "hosts.yml",
                           "-e", "script=train.py", "-e", "script_args='--epochs 3'"],
                          cwd=project, capture_output=True, text=True, check=False, timeout=300,
                          env=_clean_env(installed))
    out = done.stdout + done.stderr
    print(out)
    assert done.returncode == 0, out
    log = (project / "logs" / "train" / "node0.log").read_text()
    assert "rank 0 of world size 2" in log and "final test_accuracy" in log
    assert (project / "logs" / "train" / "node1.log").is_file()
    # Run from elsewhere there is no gpufleet ansible.cfg: train.yml says so before launch, with the line to add.
    said = " ".join(out.split())
    assert 'Add the line callbacks_enabled = gpufleet.cluster.interrupt under [defaults] in your ansible.cfg' in said
    assert said.index("callbacks_enabled = gpufleet.cluster.interrupt") < said.index("TASK [gpufleet.cluster.job : Launch")
    assert "Using the embedded demo inventory" not in said
    assert BIN not in done.args[0]
    # Without the checkout's display_skipped_hosts=false, the steps that do not apply (a container image, Slurm)
    # still show one skipped line per node each, not one per task of theirs.
    assert "TASK [gpufleet.cluster.job : Put the same container image on every node" in out
    assert "Copy the image archive" not in out and "Ask Slurm for its nodes" not in out


def test_the_checkout_shows_what_happened_and_no_skipped_tasks(local):
    run = local.playbook("train.yml", "-e", "script=examples/train.py", "-e", "job=quiet-demo",
                         "-e", "script_args='--epochs 2'")
    assert run.rc == 0, run.out[-3000:]
    assert "skipping:" not in run.out
    for task in ("Put the same container image on every node", "Check the job against Slurm's nodes",
                 "Submit the job to Slurm"):
        assert task not in run.out
    # The wait says what it is doing before its task's banner (printed with the task's result, at the end).
    said = run.out.split("TASK [gpufleet.cluster.job : Launch the job", 1)[1]
    assert said.index("waiting for the job on every node") < said.index("TASK [gpufleet.cluster.job : Wait for the end")
    assert "node0  0     succeeded" in run.out


def test_an_ini_list_setting_is_refused_before_any_node(local, tmp_path):
    # A new user's INI inventory: [group:vars] values are strings, so this "list" is one string.
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(
        "[gpu_nodes]\nnode0 gpufleet_cluster_address=127.0.0.1\nnode1 gpufleet_cluster_address=127.0.0.2\n\n"
        "[gpu_nodes:vars]\nansible_connection=local\nansible_python_interpreter=%s\n"
        "gpufleet_container_ulimits='[\"memlock=8192:8192\", \"nofile=20000:20000\"]'\n" % sys.executable)
    run = local.playbook("train.yml", "-e", "script=examples/train.py", "-e", "container_image=localhost/train:1",
                         "-e", "container_engine=podman", inventory=inventory)
    assert run.rc != 0
    said = " ".join(run.out.split())
    assert ("node0: gpufleet_container_ulimits='[\"memlock=8192:8192\", \"nofile=20000:20000\"]' is a string that "
            "looks like a list, not a list; an INI inventory keeps [group:vars] values as strings") in said.replace('\\"', '"')
    # The plan refused it: nothing reached a node (no probe ran, no job folder was written).
    assert "TASK [gpufleet.cluster.job : Probe the nodes" not in run.out
    assert not list(local.nodes.glob("*/jobs/*"))
