"""The stop notice a rank reads before its SIGTERM (stop_notice.py): where, what, whole, and gone for a new attempt."""

import json
import os

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import stop_notice


def test_the_ranks_are_told_where_the_notice_will_be_and_the_grace(tmp_path):
    assert stop_notice.notice_env(str(tmp_path), 2.5) == {
        "GPUFLEET_STOP_FILE": str(tmp_path / "stop_notice.json"), "GPUFLEET_STOP_GRACE_S": "2.5"}
    assert stop_notice.notice_env(str(tmp_path), 30.0)["GPUFLEET_STOP_GRACE_S"] == "30"


def test_the_notice_says_why_which_attempt_and_the_earliest_sigkill(tmp_path):
    path = stop_notice.write_notice(str(tmp_path), "stopped with playbooks/stop.yml", 3, 30.0, now=1000.0)
    assert path == str(tmp_path / "stop_notice.json")
    assert json.loads(open(path).read()) == {"reason": "stopped with playbooks/stop.yml", "attempt": 3,
                                             "grace_s": 30.0, "deadline": 1030.0, "written_at": 1000.0}
    assert os.stat(path).st_mode & 0o777 == 0o644  # readable by a container's ranks of another user
    assert os.listdir(str(tmp_path)) == ["stop_notice.json"]  # written aside, renamed into place: nothing left over


def test_a_new_attempt_starts_without_the_last_attempts_notice(tmp_path):
    stop_notice.write_notice(str(tmp_path), "hung", 1, 5.0)
    stop_notice.clear_notice(str(tmp_path))
    assert not os.path.exists(stop_notice.notice_path(str(tmp_path)))
    stop_notice.clear_notice(str(tmp_path))  # none there: nothing to do, no error
