"""The test tree itself: pytest imports test modules by their file name, so two with one name hide each other."""

import collections
import os

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_test_module_has_a_name_of_its_own():
    seen = collections.defaultdict(list)
    for folder, _dirs, files in os.walk(TESTS):
        for name in files:
            if name.startswith("test_") and name.endswith(".py"):
                seen[name].append(os.path.relpath(os.path.join(folder, name), TESTS))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
