"""One home per fact (issue 49): the commands that read a node's packages and services are spelled in one file,
and so are torchrun's options, so that a second reader or a second spelling cannot come back unseen."""

import os
import re

import pytest

PLUGINS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "plugins")

OWNERS = {
    # what is spelled: the one file (under plugins/) that spells it
    r'"dpkg-query"': "module_utils/_node/packages.py",
    r'"rpm"': "module_utils/_node/packages.py",
    r'"systemctl"': "module_utils/_node/node_state.py",
    r"--nproc-per-node=": "module_utils/_job/launchers.py",
    r"--rdzv-backend=": "module_utils/_job/launchers.py",
}


def spelled_in(pattern: str) -> list[str]:
    found = []
    for folder, _dirs, files in os.walk(PLUGINS):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as handle:
                    if re.search(pattern, handle.read()):
                        found.append(os.path.relpath(path, PLUGINS))
    return sorted(found)


@pytest.mark.parametrize("pattern", sorted(OWNERS))
def test_each_command_is_spelled_by_its_one_owner(pattern):
    assert spelled_in(pattern) == [OWNERS[pattern]]


def test_the_scan_sees_a_second_spelling(tmp_path, monkeypatch):
    (tmp_path / "twin.py").write_text('RUN = ["systemctl", "is-active", "x"]\n')
    (tmp_path / "owner.py").write_text('RUN = ["systemctl", "show"]\n')
    monkeypatch.setitem(globals(), "PLUGINS", str(tmp_path))
    assert spelled_in(r'"systemctl"') == ["owner.py", "twin.py"]
