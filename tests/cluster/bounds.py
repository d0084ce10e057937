"""Bounds the fault-injection tests measure: recorded here, asserted in the test, printed at the session's end."""

MEASURED: list = []


def report(what: str, seconds: float, limit: float) -> None:
    print("BOUND %s: %.1f s (limit %.0f s)" % (what, seconds, limit))
    MEASURED.append((what, seconds, limit))
    assert seconds < limit, "%s took %.1f s, more than %.0f s" % (what, seconds, limit)
