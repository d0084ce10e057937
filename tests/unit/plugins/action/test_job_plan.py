"""Where the training code comes from on the controller and where it runs on the nodes."""

import pytest

from ansible_collections.gpufleet.cluster.plugins.action.job_plan import (INLINE_SCRIPT_MAX_BYTES, master_probe, port_check,
                                                                  script_layout, supervision_plan)
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control.plan import PlanError


def test_single_text_script_travels_inside_the_launch(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    assert script_layout(str(script), "", False) == {
        "copy_src": None, "script_content": "print('hi')\n", "remote_script": "train.py", "remote_workdir": None}


def test_large_or_binary_script_is_copied(tmp_path):
    big = tmp_path / "big.py"
    big.write_text("#" * (INLINE_SCRIPT_MAX_BYTES + 1))
    assert script_layout(str(big), "", False)["copy_src"] == str(big)
    binary = tmp_path / "model.pyc"
    binary.write_bytes(b"\x00\xff\xfe")
    layout = script_layout(str(binary), "", False)
    assert layout["copy_src"] == str(binary) and layout["script_content"] is None


def test_script_dir_is_copied_and_script_is_relative_to_it(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "main.py").write_text("")
    layout = script_layout("sub/main.py", str(tmp_path / "pkg"), False)
    assert layout == {"copy_src": str(tmp_path / "pkg") + "/", "script_content": None, "remote_script": "sub/main.py",
                      "remote_workdir": None}


def test_script_outside_script_dir_is_refused(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "other.py").write_text("")
    with pytest.raises(PlanError, match="is not inside script_dir"):
        script_layout(str(tmp_path / "other.py"), str(tmp_path / "pkg"), False)


def test_script_on_nodes_is_used_as_it_is():
    assert script_layout("/shared/code/train.py", "", True) == {
        "copy_src": None, "script_content": None, "remote_script": "/shared/code/train.py",
        "remote_workdir": "/shared/code"}


@pytest.mark.parametrize("script, script_dir, on_nodes, needle", [
    ("", "", False, "script: is required"),
    (None, "", False, "script: is required"),
    ("/nonexistent/train.py", "", False, "script: /nonexistent/train.py does not exist on the controller"),
    ("train.py", "/nonexistent/dir", False, "script_dir: /nonexistent/dir does not exist"),
    ("relative.py", "", True, "must be an absolute path on the nodes"),
])
def test_bad_script_inputs(script, script_dir, on_nodes, needle):
    with pytest.raises(PlanError, match=needle.replace(".", r"\.")):
        script_layout(script, script_dir, on_nodes)


@pytest.mark.parametrize("master_port, max_restarts, scheduler, expected", [
    (None, 2, "ssh", {"pick_port": True, "extra_ports": 2, "check_port": None}),
    (29600, 0, "ssh", {"pick_port": False, "extra_ports": 0, "check_port": 29600}),
    (29600, 3, "ssh", {"pick_port": False, "extra_ports": 3, "check_port": 29600}),
    # Slurm: node 0 picks the ports when Slurm starts the job; the master's probe neither picks nor checks one.
    (None, 2, "slurm", {"pick_port": False, "extra_ports": 0, "check_port": None}),
    (29600, 2, "slurm", {"pick_port": False, "extra_ports": 0, "check_port": None}),
])
def test_what_the_masters_probe_does_about_the_ports(master_port, max_restarts, scheduler, expected):
    assert master_probe(master_port, max_restarts, scheduler) == expected


def test_port_check_modes_and_ttl():
    assert port_check(None, None) == {"mode": "remembered", "ttl_s": 3600}
    assert port_check("always", "0") == {"mode": "always", "ttl_s": 0}


@pytest.mark.parametrize("mode, ttl, needle", [
    ("sometimes", 3600, "port_check: 'sometimes' is not one of remembered, always"),
    ("", 3600, "port_check: '' is not one of remembered, always"),
    ("remembered", "an hour", "port_check_ttl_s: must be a whole number, got 'an hour'"),
    ("remembered", -1, "port_check_ttl_s"),
    ("remembered", 10 ** 7, "port_check_ttl_s"),
])
def test_a_port_check_value_it_does_not_know_is_refused_naming_it(mode, ttl, needle):
    with pytest.raises(PlanError) as raised:
        port_check(mode, ttl)
    assert needle in str(raised.value)


def test_restart_on_is_planned_as_words_every_cause_when_unset():
    assert supervision_plan({})["restart_on"] == ["node_lost", "hang", "hardware_fault", "rank_exit"]
    assert supervision_plan({"restart_on": "hang,137"})["restart_on"] == ["hang", "137"]  # -e restart_on=hang,137
    assert supervision_plan({"restart_on": ["node_lost", 75]})["restart_on"] == ["node_lost", "75"]


@pytest.mark.parametrize("restart_on, needle", [
    ("hang,segfault", "restart_on: 'segfault' is neither a cause (node_lost, hang, hardware_fault, rank_exit) nor an "
                      "exit code from 1 to 255"),
    ([300], "restart_on: 300 is neither a cause"),
    (["0"], "restart_on: '0' is neither a cause"),
    ([], "restart_on: must be a list of causes"),
])
def test_a_restart_cause_or_exit_code_it_does_not_know_is_refused_before_launch(restart_on, needle):
    with pytest.raises(PlanError) as raised:
        supervision_plan({"restart_on": restart_on})
    assert str(raised.value).startswith(needle), str(raised.value)


def test_min_nodes_is_planned_for_the_nodes_launcher_and_scheduler():
    assert supervision_plan({})["min_nodes"] == 0
    assert supervision_plan({"min_nodes": "2"}, 3, "torchrun", "ssh")["min_nodes"] == 2
    assert supervision_plan({"min_nodes": 3}, 3, "mpirun", "ssh")["min_nodes"] == 0
    with pytest.raises(PlanError, match="min_nodes: 2 is below the job's 3 nodes, but launcher=horovodrun cannot"):
        supervision_plan({"min_nodes": 2}, 3, "horovodrun", "ssh")
