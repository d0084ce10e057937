"""Make gpufleet.cluster importable from this checkout, and this environment's tools callable.

pytest-testinfra's Ansible backend and the tests call ansible-playbook, ansible-inventory and friends by name:
they must be the ones installed beside the Python that runs pytest, however pytest was started.
"""

import os
import sys

BIN = os.path.dirname(sys.executable)
if BIN not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = BIN + os.pathsep + os.environ.get("PATH", "")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(REPO, "collections")
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
# The helpers more than one kind of test uses (browser.py: integration and cluster tests), after each folder's own.
TESTS = os.path.dirname(os.path.abspath(__file__))
if TESTS not in sys.path:
    sys.path.append(TESTS)

# A change of a job's state outside JobState's transitions raises in every supervisor and module the tests start
# (plugins/module_utils/_runtime/state_file.py); users' nodes record it in the job's events instead.
os.environ.setdefault("GPUFLEET_STRICT_STATES", "1")
