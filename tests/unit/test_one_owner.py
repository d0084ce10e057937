"""One home per fact (issue 49): the commands that read a node's packages and services are spelled in one file,
and so are torchrun's options, and the roles decide in one rule when the driver role's read of a node stands for
their own, so that a second reader or a second spelling cannot come back unseen."""

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGINS = os.path.join(ROOT, "plugins")

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


# A role's own test of the driver role's read: whether it was made, or on which sysfs.
DRIVER_READ_TEST = re.compile(r"__nvidia_driver_facts(\.\w+)? is (not )?defined|nvidia_driver_sys_root \| default\(''\)")


def driver_read_rules(roles: str) -> tuple[list[str], list[str]]:
    """The roles' `_<role>_driver_read` variables that do not call the one rule, and the lines that test the driver
    role's read by hand (the driver role's own tasks aside)."""
    rules, by_hand = [], []
    for folder, _dirs, files in os.walk(roles):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".yml") or os.path.relpath(path, roles).startswith("nvidia_driver" + os.sep):
                continue
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
            for match in re.finditer(r"^(_\w+_driver_read):(.*(?:\n\s+.*)*)", text, re.M):
                if "gpufleet.cluster.driver_read(" not in match.group(2):
                    rules.append("%s %s" % (os.path.relpath(path, roles), match.group(1)))
            by_hand += ["%s: %s" % (os.path.relpath(path, roles), line.strip())
                        for line in text.splitlines() if DRIVER_READ_TEST.search(line)]
    return sorted(rules), sorted(by_hand)


def test_every_role_asks_the_one_rule_whether_the_driver_roles_read_stands_for_its_own():
    rules, by_hand = driver_read_rules(os.path.join(ROOT, "roles"))
    assert rules == [] and by_hand == []


def test_the_scan_sees_a_role_that_decides_it_by_hand(tmp_path):
    (tmp_path / "imex" / "vars").mkdir(parents=True)
    (tmp_path / "imex" / "vars" / "main.yml").write_text(
        "_imex_driver_read: >-\n  {{ __nvidia_driver_facts is defined\n     and (nvidia_driver_sys_root | default('')) == x }}\n"
        "_dcgm_driver_read: \"{{ __nvidia_driver_facts | default(none) | gpufleet.cluster.driver_read(x) }}\"\n")
    rules, by_hand = driver_read_rules(str(tmp_path))
    assert rules == [os.path.join("imex", "vars", "main.yml") + " _imex_driver_read"]
    assert len(by_hand) == 2
