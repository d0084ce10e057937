"""The container_runtime role on the container cluster: Podman from Debian's archive on a GPU-less node, and on a
node with an NVIDIA GPU (node2's fake sysfs) NVIDIA Container Toolkit from its own repository as well.

NVIDIA's repositories cannot be reached here: the toolkit's repository is a local, signed stand-in laid out as
NVIDIA's (tests/cluster/standin_repo.py: stable/deb/amd64/ and gpgkey), whose packages carry the real names and
versions and whose nvidia-ctk prints a stand-in CDI specification. What this checks is the role's logic: the
repository and its own key, the pinned version of the four packages, the hold, the CDI file written from
nvidia-ctk's output, idempotence and check mode. Not checked: NVIDIA's binaries, a real GPU in a container, and
Docker (its daemon needs an init these nodes do not run: Docker's daemon.json is checked in tests/unit only).
"""

import re

# The test inventory gives every node NVIDIA's stand-in software (gpufleet_nvidia_on_gpu_less_nodes); here the role
# decides by the PCI bus, as on servers.
ARGS = ("--tags", "container_runtime", "-e", "container_runtime_enabled=true", "-e", "gpufleet_container_engine=podman",
        "-e", "gpufleet_nvidia_on_gpu_less_nodes=false", "--limit", "node1,node2")
TOOLKIT = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
           "libnvidia-container1")


# The toolkit's repository as its install guide sets it up (its own list, another key file): beside gpufleet's
# source with another Signed-By, `apt update` would fail ("Conflicting values set for option Signed-By").
GUIDE_LIST = ("echo 'deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] "
              "file:///nvidia-repo/%s/stable/deb/$(ARCH) /' > /etc/apt/sources.list.d/nvidia-container-toolkit.list")


def test_container_runtime_gives_gpu_less_nodes_the_engine_and_gpu_nodes_the_toolkit(cluster):
    from standin_repo import TOOLKIT_DIR  # pylint: disable=import-outside-toplevel
    cluster.node_exec("node2", "sh", "-c", GUIDE_LIST % TOOLKIT_DIR, check=True)
    first = cluster.playbook("provision.yml", *ARGS)
    assert first.rc == 0, first.out[-3000:]
    gpu_less, gpu = cluster.host("node1"), cluster.host("node2")
    for host in (gpu_less, gpu):
        assert host.package("podman").is_installed and host.package("catatonit").is_installed
        assert host.run("podman --version").rc == 0
    assert [name for name in TOOLKIT if gpu_less.package(name).is_installed] == []
    assert not gpu_less.file("/etc/cdi/nvidia.yaml").exists
    assert not gpu_less.file("/etc/apt/sources.list.d/nvidia-container-toolkit.sources").exists

    for name in TOOLKIT:
        assert gpu.package(name).version == "1.18.2-1", name  # pinned: the repository also has 1.18.0-1, 1.17.8-1
    held = gpu.check_output("dpkg --get-selections %s" % " ".join(TOOLKIT))
    assert sorted(line.split()[1] for line in held.splitlines()) == ["hold"] * 4, held
    sources = gpu.file("/etc/apt/sources.list.d/nvidia-container-toolkit.sources").content_string
    assert "URIs: file:///nvidia-repo/libnvidia-container/stable/deb/amd64/" in sources
    assert not gpu.file("/etc/apt/sources.list.d/nvidia-container-toolkit.list").exists  # set aside, not deleted
    assert gpu.file("/etc/apt/sources.list.d/nvidia-container-toolkit.list.disabled-by-gpufleet").exists
    assert gpu.run("apt-get update").rc == 0
    assert "Signed-By: /etc/apt/keyrings/nvidia-container-toolkit.asc" in sources
    assert gpu.file("/etc/apt/keyrings/nvidia-container-toolkit.asc").contains("BEGIN PGP PUBLIC KEY BLOCK")
    cdi = gpu.file("/etc/cdi/nvidia.yaml").content_string
    assert "gpufleet stand-in for nvidia-ctk cdi generate (1.18.2-1)" in cdi and "kind: nvidia.com/gpu" in cdi

    again = cluster.playbook("provision.yml", *ARGS)
    assert again.rc == 0 and all(counts["changed"] == 0 for counts in again.recap().values()), again.out[-3000:]
    check = cluster.playbook("provision.yml", *ARGS, "--check", "--diff")
    assert check.rc == 0 and all(counts["changed"] == 0 for counts in check.recap().values()), check.out[-3000:]


def test_a_bad_engine_is_refused_before_any_package_is_touched(cluster):
    run = cluster.playbook("provision.yml", "--tags", "container_runtime", "-e", "container_runtime_enabled=true",
                           "-e", "gpufleet_container_engine=lxc", "--limit", "node0")
    assert run.rc != 0
    # The role's argument_specs refuse it, on the node, naming the variable and the choices.
    assert re.search(r"fatal: \[node0\].*\n(.*\n)*.*container_runtime_engine must be one of: docker, podman, got: lxc",
                     run.out), run.out[-2000:]
    assert not cluster.host("node0").package("podman").is_installed


# What `apt-cache policy podman` answers on Ubuntu 22.04 (jammy-updates), put in front of the node's own apt-cache:
# the nodes are Debian 12, whose Podman (4.3.1) reads CDI. Stand-in for an Ubuntu 22.04 node's apt, nothing more.
JAMMY_APT_CACHE = r"""#!/bin/sh
if [ "$1 $2" = "policy podman" ]; then
  printf 'podman:\n  Installed: (none)\n  Candidate: 3.4.4+ds1-1ubuntu1.22.04.3\n'
  exit 0
fi
exec /usr/bin/apt-cache "$@"
"""


def test_podman_older_than_4_1_is_refused_on_a_gpu_node_before_it_is_installed(cluster):
    """Checks: the refusal names node, version and the variable, before the engine's install (nothing changed).
    Not checked: a real Ubuntu 22.04 node (its apt's answer is a stand-in)."""
    cluster.node_exec("node2", "sh", "-c", "cat > /usr/local/bin/apt-cache <<'EOF'\n%sEOF\nchmod 755 /usr/local/bin/apt-cache"
                      % JAMMY_APT_CACHE, check=True)
    try:
        run = cluster.playbook("provision.yml", *ARGS[:-1], "node2")
        assert run.rc != 0
        assert ("node2: Podman 3.4.4+ds1-1ubuntu1.22.04.3 reads no CDI specification (Podman 4.1 or later does)"
                in " ".join(run.out.split())), run.out[-3000:]
        assert "container_runtime_engine=docker" in " ".join(run.out.split())
        assert run.recap()["node2"]["changed"] == 0
        assert "TASK [gpufleet.cluster.container_runtime : Install the engine" not in run.out
    finally:
        cluster.node_exec("node2", "rm", "-f", "/usr/local/bin/apt-cache")
