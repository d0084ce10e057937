"""Each rank's output kept once (output_once.py): what the node's log holds is punched out of the launchers' per-rank
files while the attempt runs, on this machine's real file system (fallocate), and the files are removed when it has
ended; an earlier run's files and torchrun's error.json are left as they are."""

import errno
import os

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import output_once
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.output_once import PASS_S, OutputOnce, punch


def allocated(path):
    return os.stat(path).st_blocks * 512


def tee_file(job_dir, run, local_rank, name="stdout.log", size=64 * 4096):
    folder = job_dir / "torchelastic" / run / "attempt_0" / str(local_rank)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(b"x" * (size - 1) + b"\n")
    return str(path)


def test_a_punched_file_keeps_its_size_and_tail_and_frees_its_start(tmp_path):
    path = tmp_path / "stdout.log"
    path.write_bytes(b"a" * 40000 + b"tail\n")
    with open(path, "rb") as reader:  # a reader in the middle, as torchrun's tail thread is
        reader.seek(30000)
        failed = punch(str(path), 30000)
        if failed == errno.EOPNOTSUPP:
            pytest.fail("this machine's file system for tmp_path (%s) cannot punch holes" % tmp_path)
        assert failed == 0
        assert reader.read() == b"a" * 10000 + b"tail\n"
    data = path.read_bytes()
    assert len(data) == 40005 and data[:28672] == b"\0" * 28672 and data[28672:] == b"a" * (40000 - 28672) + b"tail\n"
    assert allocated(str(path)) <= 40005 - 28672 + 4096, allocated(str(path))
    assert punch(str(path), 4095) == 0 and punch(str(tmp_path / "absent"), 8192) == errno.ENOENT


def test_torchrun_files_are_freed_up_to_the_last_pass_and_removed_when_the_attempt_ends(tmp_path):
    now = [0.0]
    earlier = tee_file(tmp_path, "none_old", 0)
    once = OutputOnce(str(tmp_path), clock=lambda: now[0])
    stdout = tee_file(tmp_path, "none_new", 0)
    error = tmp_path / "torchelastic" / "none_new" / "attempt_0" / "0" / "error.json"
    error.write_text("{}")
    assert once.tick(dict) == ""  # not a minute yet: nothing read
    now[0] += PASS_S
    assert once.tick(dict) == "" and allocated(stdout) >= 64 * 4096  # first pass: sizes noted, nothing freed
    with open(stdout, "ab") as writer:
        writer.write(b"y" * 8192)
    now[0] += PASS_S
    assert once.tick(dict) == ""
    assert allocated(stdout) <= 8192 + 4096 and os.path.getsize(stdout) == 64 * 4096 + 8192
    assert allocated(earlier) >= 64 * 4096  # an earlier run's: untouched
    said = once.attempt_ended({})
    assert said.startswith("removed the ranks' own copies of their output (1 files, ")
    assert not os.path.exists(stdout) and os.path.exists(earlier) and error.exists()


def test_deepspeed_files_are_freed_up_to_what_was_copied(tmp_path):
    now = [0.0]
    once = OutputOnce(str(tmp_path), clock=lambda: now[0])
    now[0] += PASS_S
    rank_file = tmp_path / "0_rank3.log"
    rank_file.write_bytes(b"z" * 20000)
    assert once.tick(lambda: {str(rank_file): 12288}) == ""
    assert rank_file.read_bytes() == b"\0" * 12288 + b"z" * 7712
    assert once.attempt_ended({str(rank_file): 20000}).startswith("removed the ranks' own copies of their output (1 ")
    assert not rank_file.exists()


def test_a_file_system_that_cannot_punch_is_said_once_and_files_are_kept_until_the_end(tmp_path, monkeypatch):
    monkeypatch.setattr(output_once, "punch", lambda path, upto: errno.EOPNOTSUPP)
    now = [0.0]
    once = OutputOnce(str(tmp_path), clock=lambda: now[0])
    now[0] += PASS_S
    said = once.tick(lambda: {str(tmp_path / "0_rank0.log"): 8192})
    assert said.startswith("the ranks' own files (%s) keep a copy of their output until the attempt ends: this file "
                           "system cannot free a file's start (" % tmp_path), said
    now[0] += PASS_S
    assert once.tick(lambda: {str(tmp_path / "0_rank0.log"): 8192}) == ""
