"""Waiting for a condition in the tests that run real supervisors (test_jobs.py, test_supervisor.py)."""

import time


def wait_for(predicate, timeout=15.0, step=0.05):
    """The predicate's first true value, or an AssertionError after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("condition not met within %.0f s" % timeout)
