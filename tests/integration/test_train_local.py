"""train.yml, stop.yml and status.yml for real on the local two-node inventory (two torchrun agents, loopback)."""

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO, SCRIPTS, proc_env_has

pytestmark = pytest.mark.integration


def test_train_succeeds_with_world_size_2_and_fetches_logs(local):
    run = local.playbook("train.yml", "-e", "script=examples/train.py")
    assert run.rc == 0
    logs = {host: (local.logs / "train" / ("%s.log" % host)).read_text() for host in ("node0", "node1")}
    assert "rank 0 of world size 2" in logs["node0"] and "(node_rank 0," in logs["node0"]
    assert "rank 1 of world size 2" in logs["node1"] and "(node_rank 1," in logs["node1"]
    accuracy = float(re.search(r"final test_accuracy ([0-9.]+) world_size 2", logs["node0"]).group(1))
    assert accuracy > 0.9
    assert re.search(r"^node0\s+0\s+succeeded\s+0\s", run.out, re.M)
    assert re.search(r"^node1\s+1\s+succeeded\s+0\s", run.out, re.M)
    # Global rank 0 saved a checkpoint in the job's code folder on node0.
    assert (local.job_dir("node0", "train") / "code" / "checkpoints" / "last.pt").is_file()


def test_a_rank_exiting_3_fails_the_play_fast_and_leaves_nothing(local):
    stamp = local.root / "failed_at"
    env = json.dumps({"gpufleet_env": {"GLOO_SOCKET_IFNAME": "lo", "FAIL_STAMP": str(stamp), "FAIL_CODE": "3",
                                       "FAIL_NODE_RANK": "1"}})
    run = local.playbook("train.yml", "-e", "script=%s/fail_on_rank.py" % SCRIPTS, "-e", env)
    ended = time.time()
    assert run.rc != 0
    assert "job fail_on_rank failed on node1 (node_rank 1): global rank 1 (local rank 0) exited with code 3" in run.out
    assert "stopped on the other nodes: node0" in run.out
    delay = ended - float(stamp.read_text())
    print("playbook ended %.1f s after the rank exited" % delay)
    assert delay < 15
    run_id = json.loads((local.job_dir("node0", "fail_on_rank") / "job.json").read_text())["run_id"]
    assert proc_env_has("GPUFLEET_RUN_ID=%s" % run_id) == []
    for host in ("node0", "node1"):
        assert "ready" in (local.logs / "fail_on_rank" / ("%s.log" % host)).read_text()
    state0 = json.loads((local.job_dir("node0", "fail_on_rank") / "state.json").read_text())
    assert state0["state"] == "stopped" and "node1 (node_rank 1) failed" in state0["stop_reason"]


BAD_INPUTS = [
    ("missing script", ["-e", "script=does/not/exist.py"], None, "script: ", "does not exist on the controller"),
    ("job with a slash", ["-e", "script=examples/train.py", "-e", "job=a/b"], None, "job: 'a/b' is not a valid"),
    ("job with a space", ["-e", "script=examples/train.py", "-e", "job='a b'"], None, "job: 'a b' is not a valid"),
    ("nproc_per_node 0", ["-e", "script=examples/train.py", "-e", "nproc_per_node=0"], None,
     "nproc_per_node: must be >= 1, got 0"),
    ("empty gpu_nodes", ["-e", "script=examples/train.py"], "gpu_nodes:\n  hosts: {}\n",
     "group 'gpu_nodes' is empty or missing"),
    ("unresolvable master address", ["-e", "script=examples/train.py"],
     "gpu_nodes:\n  hosts:\n    node0:\n      gpufleet_cluster_address: no-such-host.invalid\n"
     "    node1:\n      gpufleet_cluster_address: 127.0.0.2\n  vars:\n    ansible_connection: local\n",
     "node0: gpufleet_cluster_address='no-such-host.invalid' does not resolve"),
]


@pytest.mark.parametrize("case", BAD_INPUTS, ids=[case[0] for case in BAD_INPUTS])
def test_bad_input_fails_before_any_node_is_touched(local, case):
    _name, args, inventory, *needles = case
    inventory_path = None
    if inventory is not None:
        inventory_path = local.root / "hosts.yml"
        inventory_path.write_text(inventory)
    run = local.playbook("train.yml", *args, inventory=inventory_path)
    assert run.rc != 0
    for needle in needles:
        assert needle in run.out
    assert not local.nodes.exists() or not any(local.nodes.rglob("*")), "a node was touched"


def test_check_mode_shows_the_launch_and_changes_nothing(local):
    run = local.playbook("train.yml", "-e", "script=examples/train.py", "--check", "--diff")
    assert run.rc == 0
    assert "--node-rank=1" in run.out and "--nnodes=2" in run.out
    assert not local.nodes.exists() or not any(local.nodes.rglob("*.json"))


def test_detached_job_status_idempotent_relaunch_and_stop(local):
    args = ["-e", "script=%s/sleep_forever.py" % SCRIPTS, "-e", "job=sleeper", "-e", "wait=false"]
    first = local.playbook("train.yml", *args)
    assert first.rc == 0 and re.search(r"^node1\s+1\s+running", first.out, re.M)
    assert first.task_results("Launch the job") == {"node0": "changed", "node1": "changed"}
    old_run = json.loads((local.job_dir("node0", "sleeper") / "job.json").read_text())["run_id"]
    again = local.playbook("train.yml", *args)
    assert again.rc != 0  # the stale-job guard: the same name is still running
    assert ("job sleeper is still running on node0, node1; stop it with playbooks/stop.yml -e job=sleeper, "
            "or launch again with -e force=true" in " ".join(again.out.split()))
    assert json.loads((local.job_dir("node0", "sleeper") / "job.json").read_text())["run_id"] == old_run
    forced = local.playbook("train.yml", *args, "-e", "force=true")
    assert forced.rc == 0
    run_id = json.loads((local.job_dir("node0", "sleeper") / "job.json").read_text())["run_id"]
    assert run_id != old_run and proc_env_has("GPUFLEET_RUN_ID=%s" % old_run) == []
    assert (local.job_dir("node0", "sleeper") / ("job.%s.log" % old_run)).exists()  # the earlier log is kept
    deadline = time.monotonic() + 30  # the agents start their workers a moment after the launch returns
    while len(proc_env_has("GPUFLEET_RUN_ID=%s" % run_id)) < 4 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(proc_env_has("GPUFLEET_RUN_ID=%s" % run_id)) >= 4  # two agents, two workers

    status = local.playbook("status.yml")
    assert status.rc == 0
    assert re.search(r"^node0\s+sleeper\s+0\s+running", status.out, re.M)
    assert re.search(r"^node1\s+sleeper\s+1\s+running", status.out, re.M)

    # A process of someone else's with the very same command line must survive the stop.
    bystander = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        stop = local.playbook("stop.yml", "-e", "job=sleeper")
        assert stop.rc == 0
        assert proc_env_has("GPUFLEET_RUN_ID=%s" % run_id) == []
        assert bystander.poll() is None
    finally:
        os.killpg(bystander.pid, signal.SIGKILL)
        bystander.wait()
    assert "ready" in (local.logs / "sleeper" / "node0.log").read_text()
    after = local.playbook("status.yml", "-e", "job=sleeper")
    assert re.search(r"^node0\s+sleeper\s+0\s+stopped", after.out, re.M)


@pytest.mark.parametrize("playbook", ["stop.yml", "status.yml"])
def test_stop_and_status_refuse_a_bad_job_name_before_touching_a_node(local, playbook):
    run = local.playbook(playbook, "-e", "job='a b'")
    assert run.rc != 0
    assert "job: \"a b\" is not a valid job name" in run.out
    assert "TASK [gpufleet.cluster.job : Stop the job" not in run.out
    assert "TASK [gpufleet.cluster.job : Read the state of the job(s)" not in run.out


def test_limit_keeps_order_and_makes_the_remaining_host_the_master(local):
    run = local.playbook("train.yml", "-e", "script=examples/train.py", "-e", "script_args='--epochs 1'",
                         "--limit", "node1")
    assert run.rc == 0
    spec = json.loads((local.job_dir("node1", "train") / "job.json").read_text())
    assert (spec["node_rank"], spec["nnodes"], spec["master_addr"], spec["script_args"]) == (
        0, 1, "127.0.0.2", ["--epochs", "1"])
    assert not local.job_dir("node0", "train").exists()


def test_make_demo_in_a_fresh_copy_of_the_checkout(tmp_path):
    """`make demo` as the README gives it, in a copy of the tracked files, reusing this run's virtual environment."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True).stdout.split(b"\0")
    copy = tmp_path / "gpufleet"
    subprocess.run(["tar", "-C", REPO, "-cf", str(tmp_path / "src.tar"), "--null", "-T", "-"],
                   input=b"\0".join(f for f in files if f), check=True)
    copy.mkdir()
    subprocess.run(["tar", "-C", str(copy), "-xf", str(tmp_path / "src.tar")], check=True)
    venv = os.path.dirname(os.path.dirname(sys.executable))  # the one `make test` built; make checks its stamp
    env = dict(os.environ, HOME=str(tmp_path / "home"))  # fresh ~/.gpufleet too
    done = subprocess.run(["make", "demo", "VENV=%s" % venv], cwd=copy, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    print(done.stdout[-3000:], done.stderr[-3000:])
    assert done.returncode == 0
    node0 = (copy / "logs" / "train" / "node0.log").read_text()
    node1 = (copy / "logs" / "train" / "node1.log").read_text()
    assert "world size 2" in node0 and "world size 2" in node1
    assert float(re.search(r"final test_accuracy ([0-9.]+)", node0).group(1)) > 0.9


def test_train_from_the_built_and_installed_collection(tmp_path):
    """ansible-galaxy collection build + install, then `ansible-playbook gpufleet.cluster.train` outside the checkout."""
    galaxy = os.path.join(os.path.dirname(sys.executable), "ansible-galaxy")
    # Outside the checkout: there, ansible.cfg makes galaxy see this very collection as installed already.
    subprocess.run([galaxy, "collection", "build", "--output-path", str(tmp_path), REPO], check=True,
                   capture_output=True, cwd=tmp_path)
    tarball = next(tmp_path.glob("gpufleet-cluster-*.tar.gz"))
    listing = subprocess.run(["tar", "-tzf", str(tarball)], check=True, capture_output=True, text=True).stdout
    assert "plugins/modules/launch.py" in listing and "playbooks/train.yml" in listing
    assert ".venv/" not in listing and "collections/ansible_collections" not in listing
    subprocess.run([galaxy, "collection", "install", "-p", str(tmp_path / "collections"), str(tarball)], check=True,
                   capture_output=True, cwd=tmp_path)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "collections"), ANSIBLE_NOCOLOR="1")
    env.pop("ANSIBLE_CONFIG", None)
    done = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "gpufleet.cluster.train",
         "-i", os.path.join(REPO, "inventories", "local", "hosts.yml"),
         "-e", "script=%s" % os.path.join(REPO, "examples", "train.py"), "-e", "script_args='--epochs 3'",
         "-e", "gpufleet_jobs_dir=%s/{{ inventory_hostname }}/jobs" % tmp_path],
        cwd=work, env=env, capture_output=True, text=True, timeout=300, check=False)
    print(done.stdout[-4000:], done.stderr[-2000:])
    assert done.returncode == 0
    assert "world size 2" in (work / "logs" / "train" / "node1.log").read_text()


def test_secret_env_reaches_the_ranks_but_no_log_argument_list_or_readable_file(local):
    secret = "s3cr3t-Value-%d" % os.getpid()
    extra = json.dumps({"gpufleet_secret_env": {"API_TOKEN": secret},
                        "gpufleet_env": {"GLOO_SOCKET_IFNAME": "lo", "HOLD_S": "60",
                                         "EXPECTED_TOKEN_SHA256": hashlib.sha256(secret.encode()).hexdigest()}})
    run = local.playbook("train.yml", "-vvv", "-e", "script=%s/check_secret.py" % SCRIPTS, "-e", "job=secret",
                         "-e", "wait=false", "-e", extra)
    assert run.rc == 0
    assert secret not in run.out.replace(extra, "")  # the -e argument itself is the caller's, echoed by -vvv
    job0 = local.job_dir("node0", "secret")
    deadline = time.monotonic() + 60
    while "token ok" not in (job0 / "job.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "token ok on node_rank 0" in (job0 / "job.log").read_text()
    run_id = json.loads((job0 / "job.json").read_text())["run_id"]
    pids = proc_env_has("GPUFLEET_RUN_ID=%s" % run_id)
    assert pids
    for pid in pids:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            assert secret.encode() not in handle.read()
    for host in ("node0", "node1"):
        folder = local.job_dir(host, "secret")
        assert oct(os.stat(folder / "secret_env").st_mode & 0o777) == "0o600"
        for path in folder.rglob("*"):
            if path.is_file() and path.name != "secret_env":
                assert secret not in path.read_text(errors="replace"), path
    local.playbook("stop.yml", "-e", "job=secret")
