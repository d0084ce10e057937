"""The launch module through its real entry point: check mode, diff, idempotence and bad input."""

import json
import os

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import job_read, jobs
from ansible_collections.gpufleet.cluster.plugins.modules import launch


def run_module(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            launch.main()
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def args(tmp_path):
    fake = tmp_path / "fake-python"
    fake.write_text('#!/bin/bash\nsleep 300\n')
    fake.chmod(0o755)
    (tmp_path / "train.py").write_text("print('never run by the fake')\n")
    base = {"job": "unit", "jobs_dir": str(tmp_path / "jobs"), "node_rank": 0, "nnodes": 2, "nproc_per_node": 2,
            "master_addr": "127.0.0.1", "master_port": 29999, "python": str(fake), "script": "train.py",
            "workdir": str(tmp_path), "script_args": ["--name", "a b"], "env": {"K": "v w"}}
    yield base
    jobs.stop(job_read.job_dir(base["jobs_dir"], "unit"), "test teardown", check_mode=False)


def test_check_mode_renders_a_diff_and_starts_nothing(capsys, args):
    result = run_module(capsys, dict(args, _ansible_check_mode=True, _ansible_diff=True))
    assert result["changed"] is True and result["pid"] is None
    assert "--node-rank=0" in result["diff"]["after"] and "'a b'" in result["diff"]["after"]
    assert not os.path.exists(args["jobs_dir"])


def test_launch_then_same_launch_is_unchanged(capsys, args):
    first = run_module(capsys, args)
    assert first["changed"] is True and first["state"] == "running" and first["pid"]
    assert first["world_size"] == 4 and first["node_rank"] == 0
    assert first["cmd"][-3:] == ["train.py", "--name", "a b"]
    second = run_module(capsys, args)
    assert second["changed"] is False and second["pid"] == first["pid"]
    check = run_module(capsys, dict(args, _ansible_check_mode=True))
    assert check["changed"] is False


def test_other_settings_while_running_fail(capsys, args):
    run_module(capsys, args)
    result = run_module(capsys, dict(args, master_port=29998))
    assert result["failed"] is True and "master_port differ" in result["msg"]


@pytest.mark.parametrize("change, needle", [
    ({"job": "a/b"}, "job: 'a/b' is not a valid job name"),
    ({"job": "a b"}, "job: 'a b' is not a valid job name"),
    ({"nproc_per_node": 0}, "nproc_per_node: must be at least 1"),
    ({"node_rank": 2}, "node_rank: 2 is outside"),
    ({"master_port": 70000}, "master_port: 70000 is not a TCP port"),
    ({"env": {"BAD-NAME": "x"}}, "env: 'BAD-NAME' not a valid"),
])
def test_bad_input_fails_before_anything_is_written(capsys, args, change, needle):
    result = run_module(capsys, dict(args, **change))
    assert result["failed"] is True and needle in result["msg"]
    assert not os.path.exists(args["jobs_dir"])


def test_secret_env_is_in_an_owner_only_file_and_never_in_output_or_spec(capsys, args):
    secret = "hunter2-%d" % os.getpid()
    result = run_module(capsys, dict(args, secret_env={"API_TOKEN": secret}, _ansible_diff=True))
    assert result["changed"] is True
    assert secret not in json.dumps(result)  # no_log masks it, and nothing returns it
    path = job_read.job_dir(args["jobs_dir"], "unit")
    secret_file = os.path.join(path, "secret_env")
    assert oct(os.stat(secret_file).st_mode & 0o777) == "0o600"
    assert "export API_TOKEN=%s" % secret in open(secret_file).read()
    assert ". %s" % secret_file in open(os.path.join(path, "launch.sh")).read()
    for name in ("launch.sh", "env", "job.json"):
        assert secret not in open(os.path.join(path, name)).read()
    # Another secret is another launch: refused while this one runs, without showing either value.
    other = run_module(capsys, dict(args, secret_env={"API_TOKEN": secret + "x"}))
    assert other["failed"] is True and "secret_env_sha256 differ" in other["msg"] and secret not in other["msg"]


def test_bad_secret_env_names_fail(capsys, args):
    result = run_module(capsys, dict(args, secret_env={"BAD-NAME": "x"}))
    assert result["failed"] is True and "secret_env: 'BAD-NAME' not a valid environment variable name" in result["msg"]
