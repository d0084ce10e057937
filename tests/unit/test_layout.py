"""The test tree itself: pytest imports test modules by their file name, so two with one name hide each other."""

import collections
import os
import subprocess

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_test_module_has_a_name_of_its_own():
    seen = collections.defaultdict(list)
    for folder, _dirs, files in os.walk(TESTS):
        for name in files:
            if name.startswith("test_") and name.endswith(".py"):
                seen[name].append(os.path.relpath(os.path.join(folder, name), TESTS))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}



BUILD_OUTPUT = (".egg-info/", "build/", "dist/", "__pycache__/", ".pytest_cache/", ".cache/", ".venv/", "logs/")


def test_git_tracks_no_build_output():
    """Build output (egg-info, build/, caches) is made by every install and run; it never belongs in git."""
    listed = subprocess.run(["git", "ls-files"], cwd=os.path.dirname(TESTS), capture_output=True, text=True,
                            check=True)
    tracked = listed.stdout.splitlines()
    assert "Makefile" in tracked
    assert [path for path in tracked
            if any(path.startswith(part) or "/" + part in path for part in BUILD_OUTPUT) or path.endswith(".pyc")] == []
