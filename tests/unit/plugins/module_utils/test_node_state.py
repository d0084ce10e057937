"""Reading what a role manages on a node, and the sentences that say how it differs (module_utils/_node/node_state.py and
the node_state module's drift_of), on real files in a temporary folder and recorded command output."""

import os

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._node import node_state, packages
from ansible_collections.gpufleet.cluster.plugins.modules.node_state import drift_of

# dpkg-query -W -f '${Package}\t${db:Status-Abbrev}\t${Version}\n' as Debian 12 printed it: installed ("ii "), held
# ("hi "), removed with its configuration left ("rc "), a multi-arch name.
DPKG_OUT = ("bash\tii \t5.2.15-2+b8\n"
            "libnccl2\thi \t2.21.5-1+cuda12.4\n"
            "openmpi-bin\trc \t4.1.4-3+b1\n"
            "libc6:amd64\tii \t2.36-9+deb12u14\n")
# rpm -q --qf '%{NAME}\t%{VERSION}-%{RELEASE}\n' for two packages, one missing.
RPM_OUT = "libnccl\t2.21.5-1+cuda12.4\npackage nvidia-fabric-manager is not installed\n"
# /etc/dnf/plugins/versionlock.list as `dnf versionlock add` writes it (dnf-plugins-core, versionlock.py: a comment
# "Added lock on <ctime>", then NAME-EPOCH:VERSION-RELEASE.* per package).
VERSIONLOCK = ("\n# Added lock on Mon Nov 23 10:02:12 2026\nlibnccl-0:2.21.5-1+cuda12.4.*\n"
               "nvidia-driver-3:570.86.15-1.el9.*\n")
# systemctl show --property=Id,UnitFileState,ActiveState -- ssh.service nosuch.service
SYSTEMCTL_OUT = ("Id=ssh.service\nUnitFileState=enabled\nActiveState=active\n\n"
                 "Id=nosuch.service\nUnitFileState=\nActiveState=inactive\n")


def test_dpkg_output_gives_installed_packages_their_version_and_hold():
    found = packages.parse_dpkg(DPKG_OUT)
    assert found == {"bash": {"version": "5.2.15-2+b8", "held": False},
                     "libnccl2": {"version": "2.21.5-1+cuda12.4", "held": True},
                     "libc6": {"version": "2.36-9+deb12u14", "held": False}}


def test_rpm_output_and_the_versionlock_list_give_versions_and_holds():
    found = packages.parse_rpm(RPM_OUT, VERSIONLOCK)
    assert found == {"libnccl": {"version": "2.21.5-1+cuda12.4", "held": True, "stale_lock": False}}
    # A lock of another version than the installed one (left from before an upgrade) holds nothing: not held, and
    # said to be stale so that the hold releases it before locking the installed version.
    upgraded = packages.parse_rpm("libnccl\t2.26.2-1+cuda12.8\nnvidia-driver\t570.86.15-1.el9\n", VERSIONLOCK)
    assert upgraded == {"libnccl": {"version": "2.26.2-1+cuda12.8", "held": False, "stale_lock": True},
                        "nvidia-driver": {"version": "570.86.15-1.el9", "held": True, "stale_lock": False}}
    assert packages.lock_name("nvidia-driver-3:570.86.15-1.el9.*") == "nvidia-driver"
    assert packages.lock_name("cuda-toolkit-12-8-12.8.1-1") == "cuda-toolkit-12-8"
    assert packages.lock_name("libnccl-devel-0:2.26.2-1+cuda12.8.*") == "libnccl-devel"
    assert packages.lock_name("kmod-nvidia-open-dkms-3:575.51-1.fc41.*") == "kmod-nvidia-open-dkms"
    assert packages.lock_name("libnccl-2.26.2-1+cuda12.8.*") == "libnccl"  # no epoch: version and release last


def test_an_exclusion_in_the_lock_list_holds_nothing():
    """`dnf versionlock exclude` writes `!NAME-...`: that version is kept out, no version is held."""
    listing = "Last metadata expiration check: 0:01:02 ago.\n!nvidia-driver-3:570.86.15-1.el9.*\n"
    assert packages.lock_entries(listing) == []
    assert packages.parse_rpm("nvidia-driver\t570.86.15-1.el9\n", listing) == {
        "nvidia-driver": {"version": "570.86.15-1.el9", "held": False, "stale_lock": False}}


def test_each_package_difference_is_a_sentence_naming_the_package():
    found = packages.parse_dpkg(DPKG_OUT)
    drift = packages.package_drift(["bash", "openmpi-bin", "libnccl2=2.21.5", "libc6=2.37"], ["bash"],
                                     ["libnccl2", "bash", "libnccl-dev"], found)
    assert drift == ["package openmpi-bin is not installed", "package libc6 is 2.36-9+deb12u14, not 2.37",
                     "package bash is installed", "package bash is not held",
                     "package libnccl-dev is not installed (to hold)"]
    assert packages.package_drift(["bash", "libnccl2=2.21.5-1"], [], ["libnccl2"], found) == []


def test_a_file_differs_by_kind_content_mode_owner_and_group(tmp_path):
    path = tmp_path / "nccl.env"
    path.write_text("NCCL_SOCKET_IFNAME=eth0\n")
    path.chmod(0o600)
    found = node_state.read_file(str(path))
    user = found["owner"]
    assert found["kind"] == "file" and found["mode"] == "0600"
    assert node_state.file_drift({"path": str(path), "content": "NCCL_SOCKET_IFNAME=eth0\n", "mode": "0600",
                                  "owner": user}, found) == []
    assert node_state.file_drift({"path": str(path), "sha1": node_state.sha1_of("NCCL_SOCKET_IFNAME=eth0\n")},
                                 found) == []
    assert node_state.file_drift({"path": str(path), "content": "NCCL_SOCKET_IFNAME=eth1\n", "mode": "644"},
                                 found) == ["%s differs from what the role writes" % path,
                                            "%s has mode 0600, not 0644" % path]
    assert node_state.file_drift({"path": str(path), "state": "absent"}, found) == ["%s is there" % path]
    assert node_state.file_drift({"path": str(path), "state": "directory"}, found) == [
        "%s is a file, not a directory" % path]
    missing = node_state.read_file(str(tmp_path / "none"))
    assert node_state.file_drift({"path": "/x", "content": ""}, missing) == ["/x is missing, not a file"]
    assert node_state.file_drift({"path": "/x", "state": "absent"}, missing) == []
    assert node_state.file_drift({"path": str(tmp_path), "state": "directory", "mode": "0755"},
                                 node_state.read_file(str(tmp_path))) in ([], ["%s has mode %s, not 0755" % (
                                     tmp_path, node_state.read_file(str(tmp_path))["mode"])])


def test_a_link_is_not_taken_for_the_file_it_points_to(tmp_path):
    (tmp_path / "real").write_text("x")
    os.symlink(str(tmp_path / "real"), str(tmp_path / "link"))
    assert node_state.file_drift({"path": str(tmp_path / "link"), "content": "x"},
                                 node_state.read_file(str(tmp_path / "link"))) == [
        "%s is a link, not a file" % (tmp_path / "link")]


def test_a_link_differs_by_what_it_points_at_or_by_not_being_a_link(tmp_path):
    """state: link compares the link's own text (os.readlink), as ansible.builtin.file writes it; a dangling link
    that says the right path is right."""
    os.symlink("/usr/local/cuda-13.0", str(tmp_path / "cuda"))
    found = node_state.read_file(str(tmp_path / "cuda"))
    assert found["kind"] == "link" and found["src"] == "/usr/local/cuda-13.0"
    want = {"path": str(tmp_path / "cuda"), "state": "link", "src": "/usr/local/cuda-13.0"}
    assert node_state.file_drift(want, found) == []
    assert node_state.file_drift(dict(want, src="/usr/local/cuda-12.8"), found) == [
        "%s points at /usr/local/cuda-13.0, not /usr/local/cuda-12.8" % (tmp_path / "cuda")]
    assert node_state.file_drift({"path": str(tmp_path / "cuda"), "state": "link"}, found) == []
    (tmp_path / "file").write_text("x")
    assert node_state.file_drift(dict(want, path=str(tmp_path / "file")), node_state.read_file(str(tmp_path / "file"))) \
        == ["%s is a file, not a link" % (tmp_path / "file")]
    assert node_state.file_drift(dict(want, path="/x"), node_state.read_file(str(tmp_path / "none"))) == [
        "/x is missing, not a link"]


HOSTS = """127.0.0.1\tlocalhost
# BEGIN gpufleet etc_hosts: the cluster's nodes
192.0.2.11\tnode0
192.0.2.12\tnode1
# END gpufleet etc_hosts: the cluster's nodes
::1 localhost
"""


@pytest.mark.parametrize("block, drift", [
    ("192.0.2.11\tnode0\n192.0.2.12\tnode1\n", []),  # blockinfile's block: a trailing newline is not a line
    ("192.0.2.11\tnode0\n", ["/etc/hosts's block # {mark} gpufleet etc_hosts: the cluster's nodes differs"]),
    ("", ["/etc/hosts holds the block # {mark} gpufleet etc_hosts: the cluster's nodes"]),
])
def test_a_marked_block_is_compared_line_by_line(block, drift):
    want = {"path": "/etc/hosts", "marker": "# {mark} gpufleet etc_hosts: the cluster's nodes", "block": block}
    assert node_state.block_drift(want, HOSTS) == drift


def test_a_missing_block_or_file_is_a_difference_unless_no_block_is_wanted():
    want = {"path": "/etc/hosts", "marker": "# {mark} other", "block": "x"}
    assert node_state.block_drift(want, HOSTS) == ["/etc/hosts lacks the block # {mark} other"]
    assert node_state.block_drift(want, None) == ["/etc/hosts lacks the block # {mark} other"]
    assert node_state.block_drift(dict(want, block=""), None) == []


def test_services_are_compared_by_unit_file_state_and_active_state():
    units = node_state.parse_systemctl_show(SYSTEMCTL_OUT)
    assert node_state.service_drift({"name": "ssh", "enabled": True, "state": "started"}, units) == []
    assert node_state.service_drift({"name": "nosuch.service", "enabled": True, "state": "started"}, units) == [
        "nosuch.service is not found", "nosuch.service is inactive"]
    assert node_state.service_drift({"name": "ssh", "state": "stopped"}, units) == ["ssh.service is active"]
    assert node_state.service_drift({"name": "ssh", "enabled": True}, None) == [
        "the state of ssh.service cannot be read (no systemd)"]


def test_kernel_modules_are_read_from_proc_modules_with_dashes_as_underscores():
    loaded = node_state.loaded_modules("nvidia_peermem 16384 0 - Live 0x0\nnvidia 1 2 - Live 0x0\n")
    assert node_state.module_drift(["nvidia-peermem", "nvidia", "ib_core"], loaded) == [
        "kernel module ib_core is not loaded"]


def test_the_module_reads_packages_in_one_command_and_reports_every_difference(tmp_path):
    commands = []

    def run(argv):
        commands.append(argv)
        if argv[0] == "dpkg-query":
            return 1, DPKG_OUT, "dpkg-query: no packages found matching openmpi-bin\n"
        return 0, SYSTEMCTL_OUT, ""

    (tmp_path / "hostfile").write_text("node0 slots=8\n")
    params = {"packages": ["bash", "openmpi-bin"], "absent_packages": [], "held": ["libnccl2"],
              "package_manager": "apt", "lines_absent": [], "resolve": {}, "read": {},
              "files": [{"path": str(tmp_path / "hostfile"), "content": "node0 slots=8\nnode1 slots=8\n"}],
              "blocks": [], "services": [{"name": "ssh", "enabled": True, "state": "started"}],
              "kernel_modules": []}
    drift, read = drift_of(params, run)
    packages = read["packages"]
    assert drift == ["package openmpi-bin is not installed",
                     "%s differs from what the role writes" % (tmp_path / "hostfile")]
    assert packages["libnccl2"]["held"] is True
    assert [argv[0] for argv in commands] == ["dpkg-query", "systemctl"]
    assert commands[0][4:] == ["bash", "libnccl2", "openmpi-bin"]


def test_nothing_asked_runs_no_command():
    def run(argv):
        raise AssertionError("ran %s" % argv)

    params = {"packages": [], "absent_packages": [], "held": [], "package_manager": "apt", "files": [],
              "blocks": [], "lines_absent": [], "resolve": {}, "read": {}, "services": [], "kernel_modules": []}
    assert drift_of(params, run) == ([], {"packages": {}, "contents": {}})


def test_a_line_that_must_not_be_there_is_named():
    want = {"path": "/etc/hosts", "regexp": r"^127\.0\.1\.1\s"}
    assert node_state.line_drift(want, "127.0.0.1 localhost\n127.0.1.1\tnode0\n") == [
        "/etc/hosts has the line '127.0.1.1\\tnode0'"]
    assert node_state.line_drift(want, HOSTS) == [] and node_state.line_drift(want, None) == []


def test_each_name_must_resolve_first_to_its_cluster_address():
    answers = {"node0": "192.0.2.11", "node1": "127.0.0.5"}
    drift = node_state.resolve_drift({"node0": "192.0.2.11", "node1": "192.0.2.12", "node2": "192.0.2.13"},
                                     lambda name: answers.get(name, "nothing"))
    assert drift == ["node1 resolves to 127.0.0.5, not to its cluster address 192.0.2.12",
                     "node2 resolves to nothing, not to its cluster address 192.0.2.13"]


def test_the_resolver_is_asked_for_ipv4_as_getent_ahostsv4():
    assert node_state.first_address("localhost") == "127.0.0.1"
    assert node_state.first_address("no-such-name.invalid") == "nothing"


def test_a_virtual_environment_is_read_from_its_dist_info_folders(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    site = venv / "lib" / "python3.11" / "site-packages"
    for entry in ("torch-2.13.0+cpu.dist-info", "Jinja2-3.1.6.dist-info", "typing_extensions-4.15.0.dist-info",
                  "torch", "__pycache__"):
        (site / entry).mkdir(parents=True)
    found = node_state.venv_versions(str(venv))
    assert found == {"torch": "2.13.0+cpu", "jinja2": "3.1.6", "typing-extensions": "4.15.0"}
    assert node_state.pip_drift(str(venv), ["torch==2.13.0+cpu", "Jinja2==3.1.6", "typing-extensions==4.15.0"],
                                found) == []
    assert node_state.pip_drift(str(venv), ["torch[opt-einsum]==2.12.0", "py-spy==0.4.1"], found) == [
        "torch is 2.13.0+cpu in %s, not 2.12.0" % venv, "py-spy is not installed in %s, not 0.4.1" % venv]
    assert node_state.pip_drift(str(venv), ["jinja2==3.1.6.0"], found) == []  # PEP 440: equal versions
    assert node_state.pip_drift(str(venv), ["torch==2.13.0"], found) == []  # as pip: ==2.13.0 takes 2.13.0+cpu
    assert node_state.pip_drift(str(venv), ["torch==2.13.0+cu130"], found) == [
        "torch is 2.13.0+cpu in %s, not 2.13.0+cu130" % venv]
    assert node_state.venv_versions(str(tmp_path / "none")) is None
    assert node_state.pip_drift("/opt/x", ["torch==2.13.0"], None) == ["there is no Python environment at /opt/x"]


def test_the_module_returns_the_environments_packages(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    (venv / "lib" / "python3.11" / "site-packages" / "torch-2.13.0.dist-info").mkdir(parents=True)
    params = {"packages": [], "absent_packages": [], "held": [], "package_manager": "apt", "files": [],
              "blocks": [], "lines_absent": [], "resolve": {}, "read": {}, "services": [], "kernel_modules": [],
              "python_env": {"path": str(venv), "packages": ["torch==2.13.0", "numpy==2.3.5"]}}
    drift, read = drift_of(params, lambda argv: (0, "", ""))
    assert drift == ["numpy is not installed in %s, not 2.3.5" % venv]
    assert read["python_packages"] == {"torch": "2.13.0"}


def test_files_to_read_come_back_by_name_and_a_missing_one_as_none(tmp_path, monkeypatch):
    (tmp_path / "key.pub").write_text("ssh-ed25519 AAAA node0\n")
    params = {"packages": [], "absent_packages": [], "held": [], "package_manager": "apt", "files": [],
              "blocks": [], "lines_absent": [], "resolve": {}, "services": [], "kernel_modules": [],
              "read": {"user_key": str(tmp_path / "key.pub"), "checked": str(tmp_path / "none")}}
    drift, read = drift_of(params, lambda argv: (0, "", ""))
    assert drift == [] and read["contents"] == {"user_key": "ssh-ed25519 AAAA node0\n", "checked": None}
    monkeypatch.setenv("HOME", str(tmp_path))  # a path may start with ~ (the role's ~user)
    assert node_state.read_text("~/key.pub") == "ssh-ed25519 AAAA node0\n"
    assert node_state.read_file("~/key.pub")["kind"] == "file"


def test_every_installed_package_in_package_facts_shape_from_one_command():
    commands = []

    def run(argv):
        commands.append(argv)
        return (1, DPKG_OUT, "") if argv[0] == "dpkg-query" else (0, RPM_OUT, "")

    facts = packages.package_facts(packages.read_packages(None, "apt", run), "apt")
    assert commands == [["dpkg-query", "-W", "-f", packages.DPKG_FORMAT]]
    assert sorted(facts) == ["bash", "libc6", "libnccl2"]  # the removed openmpi-bin ("rc") is not installed
    assert facts["libnccl2"] == [{"name": "libnccl2", "version": "2.21.5-1+cuda12.4", "source": "apt"}]
    packages.read_packages(None, "dnf", run)
    assert commands[-1][:2] == ["rpm", "-qa"]
    from ansible_collections.gpufleet.cluster.plugins.filter.missing_packages import missing_packages
    assert missing_packages(["bash", "openmpi-bin"], facts) == ["openmpi-bin"]


def test_grep_finds_the_lines_with_a_fixed_string_in_files_and_below_folders(tmp_path):
    """As `grep -rsF TEXT FILE FOLDER`, one module run instead of a command: nvidia_repo's search for other apt
    sources of NVIDIA's repository. A missing path is no error; the text is not a pattern."""
    url = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64"
    (tmp_path / "sources.list").write_text("deb http://deb.debian.org/debian bookworm main\n")
    listing = tmp_path / "sources.list.d"
    (listing / "sub").mkdir(parents=True)
    (listing / "cuda-debian12-x86_64.list").write_text("# NVIDIA\ndeb [signed-by=/k.gpg] %s/ /\n" % url)
    (listing / "sub" / "old.list").write_text("deb %s/ /\ndeb %s/ /\n" % (url, url))
    (listing / "other.sources").write_text("URIs: https://developer.download.nvidia.com/compute/cuda\n")
    found = node_state.grep_fixed(url, [str(tmp_path / "sources.list"), str(listing), str(tmp_path / "none")])
    assert found == {str(listing / "cuda-debian12-x86_64.list"): "deb [signed-by=/k.gpg] %s/ /\n" % url,
                     str(listing / "sub" / "old.list"): "deb %s/ /\ndeb %s/ /\n" % (url, url)}
    assert node_state.grep_fixed("x86.64", [str(listing)]) == {}


def test_several_reads_in_one_run_read_their_packages_with_one_command_and_come_back_by_name(tmp_path):
    from ansible_collections.gpufleet.cluster.plugins.modules.node_state import checked_reads, reads_of
    commands = []

    def run(argv):
        commands.append(argv)
        return 1, DPKG_OUT, ""

    (tmp_path / "hosts").write_text("127.0.0.1 localhost\n")
    reads = checked_reads({"nccl": {"packages": ["libnccl2=2.21.5"], "held": ["libnccl2"]},
                           "mpi": {"packages": ["openmpi-bin", "bash"],
                                   "files": [{"path": str(tmp_path / "hosts"), "mode": "0644"}],
                                   "read": {"hosts": str(tmp_path / "hosts")}},
                           "cuda_toolkit": None})
    results = reads_of(reads, run)
    assert sorted(results) == ["mpi", "nccl"]  # a null read is not made
    assert results["nccl"]["drift"] == [] and results["nccl"]["packages"]["libnccl2"]["held"] is True
    assert results["mpi"]["drift"][0] == "package openmpi-bin is not installed"
    assert results["mpi"]["contents"] == {"hosts": "127.0.0.1 localhost\n"}
    assert sorted(results["mpi"]["packages"]) == ["bash"]  # each read's own packages, not the others'
    assert [argv[4:] for argv in commands] == [["bash", "libnccl2", "openmpi-bin"]]


@pytest.mark.parametrize("reads, named", [
    ({"mpi": {"packages": "openmpi-bin", "colour": "blue"}}, "reads.mpi: "),
    ({"mpi": {"package_manager": "zypper"}}, "reads.mpi: "),
    ({"mpi": ["openmpi-bin"]}, "reads.mpi must be a dict"),
])
def test_a_read_with_a_wrong_option_is_refused_naming_the_read(reads, named):
    from ansible_collections.gpufleet.cluster.plugins.modules.node_state import checked_reads
    with pytest.raises(ValueError, match=named):
        checked_reads(reads)
