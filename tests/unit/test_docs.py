"""Every module of the collection documents itself: ansible-doc renders it, with examples and return values."""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULES = sorted(name[:-3] for name in os.listdir(os.path.join(REPO, "plugins", "modules")) if name.endswith(".py"))


@pytest.mark.parametrize("module", MODULES)
def test_ansible_doc_renders(module):
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-doc"), "--json",
                           "gpufleet.cluster.%s" % module], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)["gpufleet.cluster.%s" % module]
    assert doc["doc"]["short_description"] and doc["examples"].strip() and doc["return"]
    assert "gpufleet.cluster.%s:" % module in doc["examples"]  # examples use the FQCN


@pytest.mark.parametrize("kind,name", [("callback", "interrupt"), ("inventory", "hostfile")])
def test_ansible_doc_renders_the_other_plugins(kind, name):
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-doc"), "--json", "-t", kind,
                           "gpufleet.cluster.%s" % name], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["gpufleet.cluster.%s" % name]["doc"]["short_description"]
