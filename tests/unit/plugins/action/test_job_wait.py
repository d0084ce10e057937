"""job_wait's pause between two polls ends as soon as Ctrl-C is pressed on the controller."""

import threading
import time

from ansible_collections.gpufleet.cluster.plugins.action import job_wait


def test_the_pause_between_polls_ends_at_ctrl_c(tmp_path, monkeypatch):
    flag = tmp_path / "interrupted"
    monkeypatch.setenv(job_wait.INTERRUPT_VAR, str(flag))
    threading.Timer(0.3, flag.touch).start()
    started = time.monotonic()
    job_wait.sleep_unless_interrupted(30)
    assert time.monotonic() - started < 10  # woken by the flag, not after the 30 s


def test_the_pause_is_whole_without_ctrl_c(tmp_path, monkeypatch):
    monkeypatch.setenv(job_wait.INTERRUPT_VAR, str(tmp_path / "never"))
    started = time.monotonic()
    job_wait.sleep_unless_interrupted(0.3)
    assert time.monotonic() - started >= 0.3
