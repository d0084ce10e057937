"""The hostfile inventory plugin through ansible-inventory, as a user runs it."""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
BIN = os.path.dirname(sys.executable)


def inventory(tmp_path, source, files, env=None):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "nodes.hostfile.yml").write_text(source)
    done = subprocess.run([os.path.join(BIN, "ansible-inventory"), "-i", str(tmp_path / "nodes.hostfile.yml"),
                           "--list"], cwd=REPO, capture_output=True, text=True, check=False,
                          env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), **(env or {})))
    return done


def plain(value):
    """Values read from a host list are marked unsafe (never templated); ansible-inventory shows them wrapped."""
    if isinstance(value, dict) and set(value) == {"__ansible_unsafe"}:
        return value["__ansible_unsafe"]
    return {k: plain(v) for k, v in value.items()} if isinstance(value, dict) else value


def hosts(listing):
    data = plain(json.loads(listing.stdout))
    names = data["gpu_nodes"]["hosts"]
    # Without top-level facts (ansible.cfg's inject_facts_as_vars = False), ansible-inventory shows every host an
    # empty ansible_local of Ansible's own; the plugin's variables are the rest.
    return [(name, {key: value for key, value in data["_meta"]["hostvars"][name].items()
                    if not (key == "ansible_local" and value == {})}) for name in names]


def test_pssh_host_file_becomes_gpu_nodes_in_order(tmp_path):
    done = inventory(tmp_path, "plugin: gpufleet.cluster.hostfile\npath: hosts.txt\ngpus: 8\n"
                               "vars:\n  gpufleet_python: /opt/venv/bin/python\n",
                     {"hosts.txt": "ml@192.0.2.12\nml@192.0.2.10:2222\n192.0.2.11\n"})
    assert done.returncode == 0, done.stderr
    found = hosts(done)
    assert [name for name, _v in found] == ["192.0.2.12", "192.0.2.10", "192.0.2.11"]
    assert found[1][1]["ansible_user"] == "ml" and found[1][1]["ansible_port"] == 2222
    assert all(v["gpufleet_gpus"] == 8 and v["gpufleet_python"] == "/opt/venv/bin/python" for _n, v in found)


def test_mpi_hostfile_and_mlp_variables_give_the_same_group(tmp_path):
    mpi = inventory(tmp_path, "plugin: gpufleet.cluster.hostfile\npath: hostfile\n",
                    {"hostfile": "192.0.2.10 slots=4\n192.0.2.11 slots=4\n"})
    mlp = inventory(tmp_path, "plugin: gpufleet.cluster.hostfile\nformat: mlp\n", {},
                    env={"MLP_WORKER_NUM": "2", "MLP_WORKER_GPU": "4", "MLP_WORKER_ALL_HOSTS": "192.0.2.10,192.0.2.11"})
    assert mpi.returncode == 0 and mlp.returncode == 0, mpi.stderr + mlp.stderr
    assert hosts(mpi) == hosts(mlp) == [("192.0.2.10", {"ansible_host": "192.0.2.10", "gpufleet_gpus": 4}),
                                        ("192.0.2.11", {"ansible_host": "192.0.2.11", "gpufleet_gpus": 4})]


def test_a_malformed_line_fails_naming_file_and_line(tmp_path):
    done = inventory(tmp_path, "plugin: gpufleet.cluster.hostfile\npath: hostfile\n",
                     {"hostfile": "192.0.2.10 slots=4\n192.0.2.11 slots=0\n"})
    # ansible-inventory reports an unparsable source as a warning and an empty inventory; the reason is kept.
    assert "%s:2: slots=0 must be a whole number of at least 1" % (tmp_path / "hostfile") in done.stderr
    assert "gpu_nodes" not in json.loads(done.stdout or "{}")


def test_the_examples_in_the_repository_parse():
    for source, count in (("lab.hostfile.yml", 3), ("mpi.hostfile.yml", 2)):
        done = subprocess.run([os.path.join(BIN, "ansible-inventory"), "-i",
                               os.path.join(REPO, "examples", "hostfile", source), "--list"], cwd=REPO,
                              capture_output=True, text=True, check=False,
                              env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg")))
        assert done.returncode == 0 and len(hosts(done)) == count, done.stderr
