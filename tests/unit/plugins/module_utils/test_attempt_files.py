"""What an attempt leaves and where it is kept (plugins/module_utils/_runtime/attempt_files.py). The supervisor's
use of it on real restarts: test_supervisor.py
test_a_job_restarted_twice_after_hangs_keeps_three_sets_of_stacks_and_dumps."""

import os

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import attempt_files


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def leave_attempt(job_dir, attempt, ranks=(0, 1)):
    """What an attempt's hang leaves: its stacks, one flight recorder dump per rank, and a file of the job's own."""
    write(os.path.join(job_dir, "stacks.txt"), "stacks of attempt %d\n" % attempt)
    for rank in ranks:
        write(os.path.join(job_dir, "flight_recorder", "rank_%d" % rank), "dump of attempt %d" % attempt)
    write(os.path.join(job_dir, "flight_recorder", "notes.txt"), "the job's own, attempt %d" % attempt)


def test_each_attempt_s_stacks_and_dumps_are_moved_aside_and_listed_oldest_first(tmp_path):
    job_dir = str(tmp_path)
    for attempt in (1, 2):
        leave_attempt(job_dir, attempt)
        assert attempt_files.keep_attempt(job_dir, attempt) == [
            "stacks.txt", os.path.join("flight_recorder", "rank_0"), os.path.join("flight_recorder", "rank_1")]
    leave_attempt(job_dir, 3, ranks=(1,))  # the last attempt's stay in place
    for attempt in (1, 2):
        kept = os.path.join(job_dir, "attempts", str(attempt))
        assert read(os.path.join(kept, "stacks.txt")) == "stacks of attempt %d\n" % attempt
        assert read(os.path.join(kept, "flight_recorder", "rank_1")) == "dump of attempt %d" % attempt
    assert read(os.path.join(job_dir, "stacks.txt")) == "stacks of attempt 3\n"
    assert attempt_files.flight_recorder_dumps(job_dir) == ["rank_1"]
    # A file of the job's own in flight_recorder/ is not the recorder's: it stays.
    assert read(os.path.join(job_dir, "flight_recorder", "notes.txt")) == "the job's own, attempt 3"
    assert not os.path.exists(os.path.join(job_dir, "attempts", "1", "flight_recorder", "notes.txt"))
    assert attempt_files.kept_attempts(job_dir) == [
        {"attempt": number, "dir": os.path.join(job_dir, "attempts", str(number)),
         "files": ["stacks.txt", os.path.join("flight_recorder", "rank_0"), os.path.join("flight_recorder", "rank_1")]}
        for number in (1, 2)]


def test_nothing_already_kept_is_written_over_and_an_empty_attempt_keeps_nothing(tmp_path):
    job_dir = str(tmp_path)
    assert attempt_files.keep_attempt(job_dir, 1) == [] and attempt_files.kept_attempts(job_dir) == []
    leave_attempt(job_dir, 1, ranks=(0,))
    attempt_files.keep_attempt(job_dir, 1)
    write(os.path.join(job_dir, "stacks.txt"), "later\n")
    assert attempt_files.keep_attempt(job_dir, 1) == []
    assert read(os.path.join(job_dir, "attempts", "1", "stacks.txt")) == "stacks of attempt 1\n"
    assert read(os.path.join(job_dir, "stacks.txt")) == "later\n"
    # Folders under attempts/ that are not an attempt's number are not read as one.
    os.makedirs(os.path.join(job_dir, "attempts", "²"))
    os.makedirs(os.path.join(job_dir, "attempts", "extra"))
    assert [kept["attempt"] for kept in attempt_files.kept_attempts(job_dir)] == [1]


def test_set_aside_moves_the_stacks_record_to_the_attempt_that_took_them_and_says_what_it_kept(tmp_path):
    job_dir = str(tmp_path)
    state = {"stacks": {"file": "stacks.txt", "error": None, "ranks": []}, "attempts": [{"attempt": 1}]}
    assert attempt_files.set_aside(job_dir, 1, dict(state)) is None  # the first attempt has none before it
    leave_attempt(job_dir, 1)
    said = attempt_files.set_aside(job_dir, 2, state)
    assert said == "attempt 1's stacks.txt and 2 flight recorder dumps kept in attempts/1/"
    assert "stacks" not in state  # the run's "stacks" are the current attempt's
    assert state["attempts"] == [{"attempt": 1, "stacks": {"file": "attempts/1/stacks.txt", "error": None, "ranks": []}}]
    write(os.path.join(job_dir, "flight_recorder", "rank_3"), "dump")
    assert attempt_files.set_aside(job_dir, 3, {"attempts": [{}]}) == "attempt 2's 1 flight recorder dump kept in attempts/2/"


def test_what_cannot_be_moved_aside_is_said_and_the_next_attempt_goes_on(tmp_path):
    job_dir = str(tmp_path)
    leave_attempt(job_dir, 1)
    write(os.path.join(job_dir, "attempts"), "a file where the folder would be")
    said = attempt_files.set_aside(job_dir, 2, {"attempts": [{}]})
    assert said.startswith("attempt 1's stacks and flight recorder dumps not kept aside: "), said
    assert read(os.path.join(job_dir, "stacks.txt")) == "stacks of attempt 1\n"


def test_a_new_run_keeps_the_previous_run_s_stacks_dumps_and_attempts_under_its_run_id(tmp_path):
    job_dir = str(tmp_path)
    leave_attempt(job_dir, 1)
    attempt_files.keep_attempt(job_dir, 1)
    leave_attempt(job_dir, 2)
    attempt_files.keep_run(job_dir, "r1")
    assert read(os.path.join(job_dir, "stacks.r1.txt")) == "stacks of attempt 2\n"
    assert read(os.path.join(job_dir, "flight_recorder.r1", "rank_0")) == "dump of attempt 2"
    assert read(os.path.join(job_dir, "attempts.r1", "1", "stacks.txt")) == "stacks of attempt 1\n"
    assert attempt_files.kept_attempts(job_dir) == [] and attempt_files.flight_recorder_dumps(job_dir) == []
    assert not os.path.exists(os.path.join(job_dir, "stacks.txt"))
    attempt_files.keep_run(job_dir, "r2")  # nothing left of a run: nothing renamed
    assert sorted(os.listdir(job_dir)) == ["attempts.r1", "flight_recorder.r1", "stacks.r1.txt"]
