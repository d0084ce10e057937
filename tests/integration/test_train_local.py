"""train.yml, stop.yml and status.yml for real on the local two-node inventory (two torchrun agents, loopback)."""

import hashlib
import html
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

import browser
from conftest import REPO, SCRIPTS, local_env, proc_env_has

pytestmark = pytest.mark.integration
STANDIN = os.path.join(REPO, "tests", "cluster", "scripts", "nvidia_smi_standin.py")


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
    # Each node's local rank 0 saved a checkpoint in its job folder (GPUFLEET_CHECKPOINT_DIR).
    for node in ("node0", "node1"):
        assert (local.job_dir(node, "train") / "checkpoints" / "last.pt").is_file()


def test_the_wait_reads_each_node_with_one_shell_command_per_poll(local):
    """Each poll while the job runs is the shell command of plugin_utils/_control/job_poll.py; the job_status module runs
    once per node, for the final read (with -v, job_wait returns the counts)."""
    run = local.playbook("train.yml", "-e", "script=%s/sleep_then_exit.py" % SCRIPTS, "-e", "script_args='6'", "-v")
    assert run.rc == 0, run.out[-3000:]
    counts = re.findall(r"^\s+polls:\s*\n\s+job_status: (\d+)\s*\n\s+shell: (\d+)", run.out, re.M)
    assert len(counts) == 2, run.out[-4000:]
    for job_status, shell in counts:
        assert int(job_status) == 1 and int(shell) >= 2, counts
    assert "was not understood" not in run.out


def test_a_rank_exiting_3_fails_the_play_fast_and_leaves_nothing(local):
    stamp = local.root / "failed_at"
    env = json.dumps({"gpufleet_env": local_env(FAIL_STAMP=str(stamp), FAIL_CODE="3", FAIL_NODE_RANK="1")})
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
    # The job's page, opened in a real browser with the network cut: the failing node, rank and reason on the first
    # screen (the failure box's red border is in the screenshot of its first 1280x800), no script run, nothing missing.
    page = local.logs / "fail_on_rank" / "report.html"
    assert "The job's story as one page: %s" % page in run.out
    parsed = browser.dom(str(page))
    assert "job fail_on_rank failed on node1 (node_rank 1): global rank 1 (local rank 0) exited with code 3" in parsed
    assert "<script" not in parsed
    shot, logged = browser.screenshot(str(page), "report-failed-job.png")
    assert browser.has_colour(shot, FAILURE_RED), shot
    assert "CONSOLE" not in logged and "Uncaught" not in logged, logged[-3000:]


FAILURE_RED = (0xB4, 0x23, 0x18)  # the failure box's border (report_page.STYLE)


LOCAL_VARS = "  vars:\n    ansible_connection: local\n"
TRAIN = ["-e", "script=examples/train.py"]


def _fake_one_gpu(local, env):
    """nvidia-smi on PATH that lists one healthy GPU, as on a node with one: the test cluster's stand-in
    (tests/cluster/scripts/nvidia_smi_standin.py), run by this Python, answering from a state file."""
    fake = local.root / "bin"
    fake.mkdir()
    with open(STANDIN) as handle:
        (fake / "nvidia-smi").write_text("#!%s\n%s" % (sys.executable, handle.read().split("\n", 1)[1]))
    (fake / "nvidia-smi").chmod(0o755)
    (local.root / "gpus.json").write_text('{"gpus": [{}]}')
    env["GPUFLEET_STANDIN_GPUS"] = str(local.root / "gpus.json")
    env["PATH"] = "%s:%s:%s" % (fake, os.path.dirname(sys.executable), os.environ["PATH"])


def _listen(local, env):
    """Something else already listening on the master's port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    local.keep = sock
    env["__port"] = str(sock.getsockname()[1])


# (name, playbook, arguments, inventory or None, setup or None, what the message must say)
BAD_INPUTS = [
    ("missing script", "train.yml", ["-e", "script=does/not/exist.py"], None, None,
     "script: %(repo)s/does/not/exist.py does not exist on the controller"),
    ("job with a slash", "train.yml", TRAIN + ["-e", "job=a/b"], None, None, "job: 'a/b' is not a valid job name"),
    ("job with a space", "train.yml", TRAIN + ["-e", "job='a b'"], None, None, "job: 'a b' is not a valid job name"),
    ("nproc_per_node 0", "train.yml", TRAIN + ["-e", "nproc_per_node=0"], None, None,
     "nproc_per_node: must be >= 1, got 0"),
    ("empty gpu_nodes", "train.yml", TRAIN, "gpu_nodes:\n  hosts: {}\n", None,
     "inventory: group 'gpu_nodes' is empty or missing"),
    ("unknown host group", "train.yml", TRAIN + ["-e", "group=trainers"], None, None,
     "inventory: group 'trainers' is empty or missing"),
    ("two nodes with the same address", "train.yml", TRAIN,
     "gpu_nodes:\n  hosts:\n    node0:\n      ansible_host: 127.0.0.1\n    node1:\n      ansible_host: 127.0.0.1\n"
     + LOCAL_VARS, None, "node1: cluster address 127.0.0.1 (from ansible_host='127.0.0.1') is also the address of node0"),
    ("unresolvable master address", "train.yml", TRAIN,
     "gpu_nodes:\n  hosts:\n    node0:\n      gpufleet_cluster_address: no-such-host.invalid\n"
     "    node1:\n      gpufleet_cluster_address: 127.0.0.2\n" + LOCAL_VARS, None,
     "node0: gpufleet_cluster_address='no-such-host.invalid' does not resolve to an IP address"),
    ("nproc_per_node above the GPU count", "train.yml", TRAIN + ["-e", "nproc_per_node=2"], None, _fake_one_gpu,
     "node0: nproc_per_node=2 is more than the 1 GPUs nvidia-smi lists on the node"),
    ("master port in use", "train.yml", TRAIN + ["-e", "master_port=%(port)s"], None, _listen,
     "node0: master_port=%(port)s is already in use on the master node; omit master_port to have a free port "
     "chosen, or name another"),
    ("env name not an identifier", "train.yml", TRAIN + ["-e", '{"gpufleet_env": {"1BAD": "x"}}'], None, None,
     "gpufleet_env: '1BAD' is not a valid environment variable name"),
    ("secret env name not an identifier", "train.yml", TRAIN + ["-e", '{"gpufleet_secret_env": {"A-B": "x"}}'], None,
     None, "gpufleet_secret_env: 'A-B' is not a valid environment variable name"),
    ("max_restarts not a number", "train.yml", TRAIN + ["-e", "max_restarts=twice"], None, None,
     "max_restarts: must be a whole number, got 'twice'"),
    ("restart cause unknown", "train.yml", TRAIN + ["-e", "restart_on=hang,oom"], None, None,
     "restart_on: 'oom' is neither a cause (node_lost, hang, hardware_fault, rank_exit) nor an exit code from 1 to 255"),
    ("restart exit code out of range", "train.yml", TRAIN + ["-e", "restart_on=rank_exit,256"], None, None,
     "restart_on: '256' is neither a cause"),
    ("min_nodes above the node count", "train.yml", TRAIN + ["-e", "min_nodes=3"], None, None,
     "min_nodes: must be between 1 and 2, got 3"),
    ("min_nodes below 1", "train.yml", TRAIN + ["-e", "min_nodes=0"], None, None,
     "min_nodes: must be between 1 and 2, got 0"),
    ("min_nodes below the nodes with a launcher that cannot shrink", "train.yml",
     TRAIN + ["-e", "min_nodes=1", "-e", "launcher=mpirun"], None, None,
     "min_nodes: 1 is below the job's 2 nodes, but launcher=mpirun cannot go on with fewer nodes (its world is fixed "
     "at the launch); min_nodes works with torchrun and none, or leave it unset"),
    ("stop grace not seconds", "train.yml", TRAIN + ["-e", "stop_grace_s=5m"], None, None,
     "stop_grace_s: must be a number of seconds from 0 to 3600, got '5m'"),
    ("hang_timeout 0", "train.yml", TRAIN + ["-e", "hang_timeout=0"], None, None,
     "hang_timeout: must be between 1 and 604800, got 0 (seconds without output on every node; leave it unset"),
    ("health_diag not a DCGM level", "train.yml", TRAIN + ["-e", "health_diag=5"], None, None,
     "health_diag: '5' is not a DCGM diagnostic level (0 or false for none, 1 to 4 for dcgmi diag -r 1 to 4"),
    ("kernel log neither a file nor a character device", "train.yml",
     TRAIN + ["-e", "gpufleet_kernel_log=%(root)s", "-e", "nproc_per_node=1"], None, _fake_one_gpu,
     "gpufleet_kernel_log: %(root)s is neither a file nor a character device"),
    ("script_args not a string", "train.yml", TRAIN + ["-e", '{"script_args": ["--epochs", 5]}'], None, None,
     "script_args: must be a string such as"),
    ("unknown launcher", "train.yml", TRAIN + ["-e", "launcher=slurm"], None, None,
     "launcher: 'slurm' is not one of torchrun, deepspeed, mpirun, horovodrun, none"),
    ("launcher not installed on the nodes", "train.yml", TRAIN + ["-e", "launcher=deepspeed"], None, None,
     "node0: launcher=deepspeed needs DeepSpeed in gpufleet_python"),
    ("python missing on the nodes", "train.yml", TRAIN + ["-e", "gpufleet_python=/no/such/python"], None, None,
     "node0: gpufleet_python=/no/such/python was not found or does not run on the node"),
    ("wheelhouse missing on the nodes", "../tests/integration/playbooks/python_env_alone.yml",
     ["-e", "allow_local=true", "-e", "python_env_wheelhouse=/no/such/wheelhouse", "-e", "python_env_path=%(root)s/venv"],
     None, None,
     "node0: python_env_wheelhouse=/no/such/wheelhouse is not a folder on the node"),
]


@pytest.mark.parametrize("case", BAD_INPUTS, ids=[case[0] for case in BAD_INPUTS])
def test_bad_input_fails_before_any_node_is_touched(local, case):
    _name, playbook, args, inventory, setup, needle = case
    env = {}
    if setup:
        setup(local, env)
    values = {"repo": REPO, "port": env.pop("__port", ""), "root": str(local.root)}
    inventory_path = None
    if inventory is not None:
        inventory_path = local.root / "hosts.yml"
        inventory_path.write_text(inventory)
    run = local.playbook(playbook, *[arg % values if "%(" in arg else arg for arg in args], inventory=inventory_path,
                         extra_env=env)
    assert run.rc != 0
    assert needle % values in " ".join(run.out.split()), needle % values
    assert not local.nodes.exists() or not any(local.nodes.rglob("*")), "a node was touched"
    assert not os.path.exists(local.root / "venv"), "a node was touched"


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


def _python_without_torch(local):
    """A Python that cannot import torch (the interpreter without site-packages), as on nodes of a platform image."""
    python = local.root / "python-without-torch"
    python.write_text("#!/bin/sh\nexec %s -S \"$@\"\n" % sys.executable)
    python.chmod(0o755)
    return str(python)


def test_launcher_none_runs_on_a_python_without_torch(local):
    """launcher=none starts no torch.distributed: its script may run where torch is not installed."""
    python = _python_without_torch(local)
    script = local.root / "platform_entry.py"
    script.write_text("import os\nprint('platform entry, node', os.environ['MLP_ROLE_INDEX'], 'done')\n")
    run = local.playbook("train.yml", "-e", "script=%s" % script, "-e", "launcher=none",
                         "-e", "gpufleet_python=%s" % python)
    assert run.rc == 0, run.out[-3000:]
    for index, host in enumerate(("node0", "node1")):
        assert "platform entry, node %d done" % index in (local.logs / "platform_entry" / ("%s.log" % host)).read_text()
    refused = local.playbook("train.yml", "-e", "script=%s" % script, "-e", "gpufleet_python=%s" % python,
                             "-e", "job=with-torchrun")
    assert refused.rc != 0
    assert "node0: gpufleet_python=%s (%s) cannot import torch" % (python, python) in " ".join(refused.out.split())
    assert not local.job_dir("node0", "with-torchrun").exists(), "a node was touched"


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
    # The summary ends with the script's own last word (rank 0's last lines), not only gpufleet's.
    summary = done.stdout[done.stdout.rindex("job train\n"):done.stdout.rindex("PLAY RECAP")]
    said = summary[summary.index("The master rank's last lines (%s):" % (copy / "logs" / "train" / "ranks" / "rank0.log")):]
    said = said.split("\nTASK [")[0]  # the callback prints the report task's own header after what it displayed
    assert re.search(r"\n  final test_accuracy [0-9.]+ world_size 2\n\s*$", said), summary
    # The same story as one page beside the logs (report_page.py), its path said, linking what is there.
    page = copy / "logs" / "train" / "report.html"
    assert "The job's story as one page: %s" % page in summary, summary
    text = page.read_text()
    assert "<h1>job train: <span class=\"ok\">succeeded</span></h1>" in text and "<script" not in text
    assert 'href="ranks/rank0.log"' in text and (page.parent / "ranks" / "rank0.log").exists()
    assert "final test_accuracy" in text


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
                        "gpufleet_env": local_env(HOLD_S="60",
                                                  EXPECTED_TOKEN_SHA256=hashlib.sha256(secret.encode()).hexdigest())})
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


def test_a_rank_raising_at_the_same_line_twice_is_not_restarted_a_third_time(local):
    """Restart by cause (restart_policy.py): real torchrun on two nodes, global rank 1 raises at
    raise_at_same_line.py:11 in each attempt; max_restarts=3 and min_progress_s=0 (the time guard off), so only the
    same place stops the restarts. The summary and the page say why."""
    env = json.dumps({"gpufleet_env": local_env()})
    for node in ("node0", "node1"):  # each "node" its own textfile folder, as each server has
        (local.root / "metrics" / node).mkdir(parents=True)
    run = local.playbook("train.yml", "-e", "script=%s/raise_at_same_line.py" % SCRIPTS, "-e", "max_restarts=3",
                         "-e", "min_progress_s=0", "-e", env,
                         "-e", "gpufleet_metrics_dir=%s/metrics/{{ inventory_hostname }}" % local.root)
    assert run.rc != 0
    # Each supervisor left its part's last state as Prometheus metrics for the node exporter (job_metrics.py): node1's
    # rank failed, node0's part was stopped for it.
    for node, ended in (("node0", "stopped"), ("node1", "failed")):
        metrics = (local.root / "metrics" / node / "gpufleet_job_root_raise_at_same_line.prom").read_text()
        for line in ('gpufleet_job_state{gpufleet_job="raise_at_same_line",user="root",state="%s"} 1' % ended,
                     'gpufleet_job_attempt{gpufleet_job="raise_at_same_line",user="root"} 2',
                     'gpufleet_job_restarts{gpufleet_job="raise_at_same_line",user="root"} 1'):
            assert line in metrics.splitlines(), metrics
    said = ("not restarting: rank 1 (node1) failed twice in a row in raise_at_same_line.py:11 with exit code 1: the "
            "script's own failure, which a restart would meet again")
    assert said in " ".join(run.out.split()), run.out[-3000:]
    for node in ("node0", "node1"):
        state = json.loads((local.job_dir(node, "raise_at_same_line") / "state.json").read_text())
        assert [a["attempt"] for a in state["attempts"]] == [1, 2] and state["no_restart"] == said, state
    state1 = json.loads((local.job_dir("node1", "raise_at_same_line") / "state.json").read_text())
    assert [(a["failed_rank"], a["failed_at"]) for a in state1["attempts"]] == [(1, "raise_at_same_line.py:11")] * 2
    assert [a["rank_exit"] for a in state1["attempts"]] == [1, 1], state1  # the rank's own, read before torchrun's
    page = (local.logs / "raise_at_same_line" / "report.html").read_text()
    assert html.escape(said) in " ".join(page.split())
    # Each rank's output kept once (output_once.py): torchrun's per-rank tee files are gone after each attempt, the
    # lines in the node's log.
    log1 = (local.job_dir("node1", "raise_at_same_line") / "job.log").read_text()
    assert log1.count("[gpufleet] removed the ranks' own copies of their output (2 files, ") == 2, log1[-3000:]
    assert re.search(r"^\[rank1\|0\]: .*RuntimeError: loss is NaN at step 2$", log1, re.M), log1[-3000:]
    left = [str(path) for node in ("node0", "node1") for path in (
        local.job_dir(node, "raise_at_same_line") / "torchelastic").rglob("*.log")]
    assert left == [], left


def test_a_peer_s_failure_and_stop_yml_each_leave_a_save_the_next_attempt_resumes_from(local):
    """The stop notice (GPUFLEET_STOP_FILE, before SIGTERM; stop_notice.py) on two torchrun nodes: node1's rank fails
    in attempt 1, node0's rank hears why, saves, and attempt 2 resumes from its save; then stop.yml stops attempt 2,
    both ranks save, and a launch of the same job resumes from those saves and ends well. What attempt 1 left in
    place of a flight recorder dump is kept aside and fetched."""
    ckpt = local.root / "ckpt"
    ckpt.mkdir()
    env = local_env(CKPT_DIR=str(ckpt), FAIL_NODE_RANK="1", FAIL_STEP="10")
    args = ["-e", "script=%s/save_on_stop.py" % SCRIPTS, "-e", "job=saver", "-e", "stop_grace_s=20"]
    first = local.playbook("train.yml", *args, "-e", "max_restarts=1", "-e", "wait=false",
                           "-e", json.dumps({"gpufleet_env": env}))
    assert first.rc == 0, first.out[-3000:]
    log0 = local.job_dir("node0", "saver") / "job.log"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not ("rank 0 attempt 2 starts" in log0.read_text()
                                               and "rank 1 attempt 2 starts" in
                                               (local.job_dir("node1", "saver") / "job.log").read_text()):
        time.sleep(0.5)
    text = log0.read_text()
    saved = re.search(r"rank 0 saved step (\d+) \(notice before SIGTERM: (?:\[True\]|no SIGTERM yet)\): (.*)", text)
    assert saved, text[-3000:]
    assert "node1" in saved.group(2), saved.group(0)  # the peer whose failure stopped it
    assert int(saved.group(1)) >= 9
    assert "rank 0 attempt 2 starts at step %s (grace 20 s)" % saved.group(1) in text, text[-3000:]

    stop = local.playbook("stop.yml", "-e", "job=saver")
    assert stop.rc == 0, stop.out[-3000:]
    steps = {}
    for node, rank in (("node0", 0), ("node1", 1)):
        text = (local.job_dir(node, "saver") / "job.log").read_text()
        found = re.findall(r"rank %d saved step (\d+) \(notice before SIGTERM: (?:\[True\]|no SIGTERM yet)\): "
                           r"stopped with playbooks/stop.yml" % rank, text)
        assert found, text[-3000:]
        steps[rank] = int(found[-1])
        assert json.loads((ckpt / ("rank%d.json" % rank)).read_text()) == {"step": steps[rank]}
    # What attempt 1 left where the flight recorder dumps go (node1's failing rank) was kept aside from attempt 2
    # on the node (attempt_files.py) and fetched by stop.yml beside the logs.
    kept = local.logs / "saver" / "attempt1" / "flight_recorder" / "rank_1"
    assert kept.read_text() == "placeholder of attempt 1, not a dump\n"
    assert "Kept from the attempts before a restart: %s/ (1 flight recorder dump)" % kept.parent.parent in stop.out

    again = local.playbook("train.yml", *args, "-e", json.dumps({"gpufleet_env": dict(env, RUN_STEPS="3")}))
    assert again.rc == 0, again.out[-3000:]
    for node, rank in (("node0", 0), ("node1", 1)):
        text = (local.logs / "saver" / ("%s.log" % node)).read_text()
        assert "rank %d attempt 1 starts at step %d" % (rank, steps[rank]) in text, text[-2000:]
        assert "rank %d done at step %d" % (rank, steps[rank] + 3) in text, text[-2000:]


def test_the_example_saves_when_stopped_and_resumes_from_that_step(local):
    """examples/train.py (DDP, Gloo) reads the stop notice: stop.yml mid-epoch leaves a checkpoint of the step it
    was in, and --resume goes on from that step to the end."""
    args = ["-e", "script=examples/train.py", "-e", "job=example", "-e", "stop_grace_s=30",
            "-e", json.dumps({"gpufleet_env": local_env()})]
    first = local.playbook("train.yml", *args, "-e", "wait=false",
                           "-e", "script_args='--epochs 40 --step-s 0.1 --checkpoint-every 0'")
    assert first.rc == 0, first.out[-3000:]
    log0 = local.job_dir("node0", "example") / "job.log"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "epoch 1/40" not in log0.read_text():
        time.sleep(0.5)
    assert "epoch 1/40" in log0.read_text(), log0.read_text()[-3000:]
    stop = local.playbook("stop.yml", "-e", "job=example")
    assert stop.rc == 0, stop.out[-3000:]
    saved = re.search(r"rank 0 saved step (\d+) before the stop: stopped with playbooks/stop.yml", log0.read_text())
    assert saved, log0.read_text()[-3000:]
    assert "epoch 40/40" not in log0.read_text()  # stopped mid-run
    again = local.playbook("train.yml", *args, "-e", "script_args='--epochs 40 --resume'")
    assert again.rc == 0, again.out[-3000:]
    text = (local.logs / "example" / "node0.log").read_text()
    assert re.search(r"rank 0 resumes from step %s \(epoch \d+\)" % saved.group(1), text), text[-3000:]
    assert "final test_accuracy" in text and "epoch 40/40" in text
