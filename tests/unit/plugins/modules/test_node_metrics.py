"""The node_metrics module through its real entry point: files written whole and readable by all, unchanged on a
re-run, check mode and diff, a node without a node exporter, a folder it may not write, bad names."""

import json
import os
import stat

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpufleet.cluster.plugins.modules import node_metrics

TEXT = "# HELP gpufleet_node_quarantine_after x\n# TYPE gpufleet_node_quarantine_after gauge\ngpufleet_node_quarantine_after 3\n"


def run_module(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            node_metrics.main()
    return json.loads(capsys.readouterr().out)


def test_writes_each_file_whole_then_is_unchanged(capsys, tmp_path):
    args = {"dir": str(tmp_path), "files": {"gpufleet_node_standing.prom": TEXT, "gpufleet_node_health.prom": ""}}
    first = run_module(capsys, args)
    path = tmp_path / "gpufleet_node_standing.prom"
    assert first["changed"] is True and first["written"] == [str(path)]
    assert path.read_text() == TEXT and stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(os.listdir(tmp_path)) == ["gpufleet_node_standing.prom"]  # the empty one left as it is, no temporary
    again = run_module(capsys, args)
    assert again["changed"] is False and again["written"] == [] and again["msg"] == "unchanged"


def test_check_mode_says_what_would_change_with_a_diff_and_writes_nothing(capsys, tmp_path):
    result = run_module(capsys, {"dir": str(tmp_path), "files": {"a.prom": TEXT},
                                 "_ansible_check_mode": True, "_ansible_diff": True})
    assert result["changed"] is True and TEXT in result["diff"]["after"] and result["diff"]["before"].endswith("\n")
    assert not os.listdir(tmp_path)


def test_a_node_without_a_node_exporter_gets_nothing_written_and_is_told_why(capsys, tmp_path):
    result = run_module(capsys, {"dir": str(tmp_path / "node-exporter"), "files": {"a.prom": TEXT}})
    assert result["changed"] is False and not result.get("failed")
    assert "node-exporter does not exist: no node exporter here to read a.prom (monitor.yml sets one up)" in result["msg"]
    assert not (tmp_path / "node-exporter").exists()


def test_a_file_it_cannot_write_is_a_warning_not_a_failure_and_leaves_nothing_behind(capsys, tmp_path):
    (tmp_path / "a.prom").mkdir()  # a folder where the file goes: the rename fails, for root too
    result = run_module(capsys, {"dir": str(tmp_path), "files": {"a.prom": TEXT}})
    assert not result.get("failed") and result["changed"] is False
    said = result["msg"]  # and a warning (how Ansible shows it depends on whether its controller is loaded)
    assert "a.prom not written: Is a directory (monitor.yml's node_exporter role lets node_exporter_metrics_users " \
           "write %s)" % tmp_path in said, said
    assert os.listdir(tmp_path) == ["a.prom"]


@pytest.mark.parametrize("name", ["a.txt", "../a.prom", "sub/a.prom"])
def test_a_name_the_collector_would_not_read_is_refused(capsys, tmp_path, name):
    result = run_module(capsys, {"dir": str(tmp_path), "files": {name: TEXT}})
    assert result["failed"] is True and "files: %s: give file names ending in .prom" % name in result["msg"]
    assert not os.listdir(tmp_path)
