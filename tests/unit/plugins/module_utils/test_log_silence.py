"""The hang watchdog's measure of a node's log (log_silence.py): an attempt's start counts only past the startup
allowance until the attempt's first output, which under a launcher that tags its ranks' lines is a rank's first line,
not the launcher's own banner."""

import os

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import log_silence
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.log_silence import LogSilence

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "torchrun_start.log")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(log_silence.time, "monotonic", fake.monotonic)
    return fake


def _lines():
    with open(FIXTURE) as handle:
        lines = handle.read().splitlines(keepends=True)
    first_rank = next(i for i, line in enumerate(lines) if line.startswith("[rank"))
    return lines[:first_rank], lines[first_rank:]


def _started(tmp_path, launcher, startup_s=120.0):
    log = tmp_path / "job.log"
    log.write_text("[gpufleet] attempt 1 of 3, master port 29844\n")
    silence = LogSilence(str(log), startup_s, launcher)
    silence.begin_attempt()
    return log, silence


def _write(log, text):
    with open(log, "a") as handle:
        handle.write(text)


def test_torchrun_s_banner_does_not_end_the_startup_allowance_its_ranks_first_line_does(tmp_path, clock):
    banner, ranks = _lines()
    assert any("OMP_NUM_THREADS" in line for line in banner)  # the real banner, before any rank's line
    log, silence = _started(tmp_path, "torchrun")
    clock.now += 1
    _write(log, "".join(banner))
    silence.follow()
    clock.now += 30  # importing torch and the rendezvous, silent: within the 120 s allowance
    silence.follow()
    assert silence.seconds() == pytest.approx(31 - 120)
    _write(log, ranks[0])
    silence.follow()
    clock.now += 8
    silence.follow()
    assert silence.seconds() == pytest.approx(8)  # counted from the rank's line now


def test_a_rank_line_written_in_two_pieces_is_found_once_whole(tmp_path, clock):
    _banner, ranks = _lines()
    log, silence = _started(tmp_path, "torchrun")
    _write(log, ranks[0][:5])  # "[rank" so far
    silence.follow()
    clock.now += 3
    assert silence.seconds() == pytest.approx(3 - 120)
    _write(log, ranks[0][5:])
    silence.follow()
    clock.now += 2
    assert silence.seconds() == pytest.approx(2)


@pytest.mark.parametrize("launcher, line", [
    ("mpirun", "[1,3]<stdout>: step 1/40\n"),  # Open MPI's --tag-output
    ("none", "*****************************************\n"),  # untagged: any line is the script's own
])
def test_the_first_output_under_open_mpi_s_tags_and_under_a_launcher_that_tags_nothing(tmp_path, clock, launcher,
                                                                                         line):
    log, silence = _started(tmp_path, launcher)
    _write(log, line)
    silence.follow()
    clock.now += 4
    assert silence.seconds() == pytest.approx(4)


def test_the_next_attempt_has_its_allowance_again(tmp_path, clock):
    banner, ranks = _lines()
    log, silence = _started(tmp_path, "torchrun")
    _write(log, "".join(ranks))
    silence.follow()
    clock.now += 50
    silence.begin_attempt()
    _write(log, "".join(banner))
    silence.follow()
    clock.now += 10
    assert silence.seconds() == pytest.approx(10 - 120)
