"""gpufleet.cluster.preload: after it ran, the collection's filter files (and Ansible's own filters and tests) are
loaded in the process, so that a forked worker finds them there. Checked in a new Python process with Ansible's
collection finder installed, as ansible-playbook has it; what a worker then saves is measured by
bench/provision_cost.py, not here."""

import gc
import json
import os
import subprocess
import sys
import weakref

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
COLLECTIONS = os.path.join(REPO, "collections")
FILTERS = os.path.join(COLLECTIONS, "ansible_collections", "gpufleet", "cluster", "plugins", "filter")

SCRIPT = r"""
import json, sys
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
_AnsibleCollectionFinder(paths=[sys.argv[1]])._install()
from ansible_collections.gpufleet.cluster.plugins.callback import preload
before = sorted(name for name in sys.modules if ".plugins.filter." in name)
failed = preload.preload()
after = sorted(name for name in sys.modules if "plugins.filter." in name or "plugins.test." in name)
print(json.dumps({"before": before, "failed": failed, "after": after,
                  "bad": preload.preload(((preload.filter_loader, "gpufleet.cluster.no_such_filter"),))}))
"""


def _run() -> dict:
    done = subprocess.run([sys.executable, "-c", SCRIPT, COLLECTIONS], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_filter_file_of_the_collection_and_ansibles_own_are_loaded():
    seen = _run()
    assert seen["before"] == [] and seen["failed"] == []
    ours = sorted(name[:-3] for name in os.listdir(FILTERS) if name.endswith(".py") and name != "__init__.py")
    for name in ours:
        assert "ansible_collections.gpufleet.cluster.plugins.filter.%s" % name in seen["after"], (name, seen["after"])
    assert "ansible_collections.gpufleet.cluster.plugins.test.job_name" in seen["after"]
    assert any(name.startswith("ansible.plugins.filter.core") for name in seen["after"])  # ansible.builtin's filters
    assert any(name.startswith("ansible.plugins.test.core") for name in seen["after"])  # and tests


def test_a_plugin_that_cannot_be_found_is_reported_not_raised():
    assert _run()["bad"] == ["gpufleet.cluster.no_such_filter"]


class _Cycle:
    """An object in a reference cycle: freed by the garbage collector only, never by reference counting."""

    def __init__(self) -> None:
        self.me = self


def test_each_task_start_freezes_what_exists_and_every_hundredth_collects_it_first():
    """The workers forked for a task find the objects that existed at its start frozen (gc.get_freeze_count); cyclic
    garbage frozen since is freed at the next hundredth task, not kept for the whole playbook."""
    from ansible_collections.gpufleet.cluster.plugins.callback import preload  # pylint: disable=import-outside-toplevel
    callback = preload.CallbackModule()
    gc.unfreeze()
    try:
        garbage = _Cycle()
        dead = weakref.ref(garbage)
        callback.v2_playbook_on_task_start(None, False)  # the first task: collect, then freeze
        assert gc.get_freeze_count() > 0
        del garbage
        gc.collect()
        assert dead() is not None, "a frozen object is not collected"
        for _ in range(preload.UNFREEZE_EVERY - 1):
            callback.v2_playbook_on_handler_task_start(None)
            assert dead() is not None
        callback.v2_playbook_on_task_start(None, False)  # the hundred-and-first: unfreeze, collect, freeze
        assert dead() is None and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
