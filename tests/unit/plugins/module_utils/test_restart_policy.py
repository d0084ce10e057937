"""Restart by cause (module_utils/_runtime/restart_policy.py): restart_on's causes and exit codes, checked as the plan
and the launch module check them; where a rank failed, read from tracebacks as Python and torchrun write them (a
real capture of torchrun, and a traceback Python writes in this test)."""

import os
import signal
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import restart_policy

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures")


@pytest.mark.parametrize("given, causes", [
    (["hang", "node_lost"], ("hang", "node_lost")),
    ("hang, rank_exit,137", ("hang", "rank_exit", "137")),  # -e restart_on=hang,rank_exit,137
    ([75, "75", "hang"], ("75", "hang")),  # a YAML integer; said twice, kept once
    (["1", "255"], ("1", "255")),
    (list(restart_policy.CAUSES), restart_policy.DEFAULT_RESTART_ON),
])
def test_restart_on_names_causes_and_exit_codes(given, causes):
    assert restart_policy.parse_restart_on(given) == causes


@pytest.mark.parametrize("given, said", [
    (["hang", "oom"], "restart_on: 'oom' is neither a cause (node_lost, hang, hardware_fault, rank_exit) nor an "
                      "exit code from 1 to 255"),
    ([0], "restart_on: 0 is neither a cause"),
    ([256], "restart_on: 256 is neither a cause"),
    (["-1"], "restart_on: '-1' is neither a cause"),
    ([True], "restart_on: True is neither a cause"),
    ([], "restart_on: must be a list of causes (node_lost, hang, hardware_fault, rank_exit) or exit codes from 1 to "
         "255, got []"),
    ({"hang": 1}, "restart_on: must be a list of causes"),
])
def test_a_cause_or_exit_code_restart_on_does_not_know_is_refused_naming_it(given, said):
    with pytest.raises(ValueError) as raised:
        restart_policy.parse_restart_on(given)
    assert str(raised.value).startswith(said), str(raised.value)


def test_a_causes_restart_is_refused_when_restart_on_does_not_name_it():
    assert restart_policy.refused_by_policy(("hang", "node_lost"), "rank_exit", 1) == (
        "not restarting: a rank's failure (exit code 1) is not among the causes this job restarts on "
        "(restart_on: hang, node_lost)")
    assert restart_policy.refused_by_policy(("rank_exit",), "hang", None) == (
        "not restarting: a hang is not among the causes this job restarts on (restart_on: rank_exit)")
    assert restart_policy.refused_by_policy(("137",), "rank_exit", 137) is None  # the code named
    assert restart_policy.refused_by_policy(("137",), "rank_exit", 1) is not None  # another code
    assert restart_policy.refused_by_policy(("137",), "rank_exit", None) is not None  # no code known
    assert restart_policy.refused_by_policy(restart_policy.DEFAULT_RESTART_ON, "node_lost", None) is None


def test_a_ranks_exit_code_is_what_a_shell_says():
    assert restart_policy.exit_code_of(1 << 8) == 1
    assert restart_policy.exit_code_of(signal.SIGKILL) == 137


def test_where_a_torchrun_rank_failed_is_read_from_its_tagged_traceback():
    """The real capture: rank 1 raises in step() (fail.py:7), called from main() (fail.py:13); torchrun's own
    traceback (untagged, its ChildFailedError) comes after and is not the rank's."""
    with open(os.path.join(FIXTURES, "torchrun_rank_traceback.log")) as handle:
        log = handle.read()
    assert restart_policy.failed_at(log, 1, True) == (1, "fail.py:7")
    assert restart_policy.failed_at(log, None, True) == (1, "fail.py:7")  # the rank from the first traceback's tag
    assert restart_policy.failed_at(log, 0, True) == (0, None)  # rank 0 printed no traceback
    # Under a launcher that tags nothing, the untagged traceback: here torchrun's own, whose frames are all the
    # interpreter's or installed (the venv's bin/torchrun is not), so the innermost outside them.
    assert restart_policy.failed_at(log, None, False) == (None, "torchrun:8")


def test_a_ranks_traceback_torch_tags_itself_is_read_inside_the_launchers_tag():
    """The real capture from a node's log under gpufleet's torchrun: once the process group is up, torch tags the
    rank's uncaught exception itself ("[rank1]: Traceback ..."), inside torchrun's tag ("[rank1|0]: ")."""
    with open(os.path.join(FIXTURES, "torchrun_rank_traceback_pg.log")) as handle:
        log = handle.read()
    assert "[rank1|0]: [rank1]: Traceback (most recent call last):" in log
    assert restart_policy.failed_at(log, 1, True) == (1, "raise_at_same_line.py:11")
    assert restart_policy.failed_at(log, None, True) == (1, "raise_at_same_line.py:11")


def test_where_a_script_failed_is_its_own_innermost_frame_not_a_librarys(tmp_path):
    """A traceback Python writes now: the script calls into the standard library (json), which raises; the place
    is the script's line that called it. A chained traceback ("During handling...") is read from its last part."""
    script = tmp_path / "train.py"
    script.write_text("import json\n\n\ndef load():\n    try:\n        {}['x']\n    except KeyError:\n"
                      "        json.loads('{')\n\n\nload()\n")
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=False, timeout=60)
    assert ran.returncode == 1 and "During handling of the above exception" in ran.stderr, ran.stderr
    assert restart_policy.failed_at("epoch 1\n" + ran.stderr, None, False) == (None, "train.py:8")
    assert restart_policy.failed_at("epoch 1\nloss 0.1\n", None, False) == (None, None)


def test_only_the_attempts_part_of_the_log_is_read(tmp_path):
    log = tmp_path / "job.log"
    log.write_text("Traceback (most recent call last):\n  File \"old.py\", line 1, in <module>\nValueError\n")
    start = log.stat().st_size
    with open(log, "a") as handle:
        handle.write("attempt 2\n")
    assert restart_policy.read_tail(str(log), start) == "attempt 2\n"
    assert restart_policy.read_tail(str(tmp_path / "missing"), 0) == ""
