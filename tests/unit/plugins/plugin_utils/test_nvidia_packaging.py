"""dnf version locks by exact name, EL's Open MPI paths, other apt sources of NVIDIA's repository."""

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._provision import nvidia_packaging as pkg

LOCKS = """Last metadata expiration check: 0:01:02 ago on Sun 22 Nov 2026.
libnccl-devel-0:2.26.2-1+cuda12.8.*
nvidia-driver-cuda-libs-3:575.51-1.fc41.*
kmod-nvidia-open-dkms-3:575.51-1.fc41.*
"""


def test_a_lock_of_libnccl_devel_does_not_count_as_a_lock_of_libnccl():
    assert pkg.versionlock_missing(LOCKS, ["libnccl", "libnccl-devel"]) == ["libnccl"]
    assert pkg.versionlock_missing(LOCKS, ["nvidia-driver-cuda-libs"]) == []
    # An exclusion (`dnf versionlock exclude`) is no lock: the hold still adds one.
    assert pkg.versionlock_missing("!nvidia-driver-3:570.86.15-1.el9.*\n", ["nvidia-driver"]) == ["nvidia-driver"]


def test_a_bump_replaces_the_lock_of_the_old_version():
    wanted = {"libnccl": "2.26.5-1+cuda12.8", "libnccl-devel": "2.26.5-1+cuda12.8"}
    assert pkg.versionlock_stale(LOCKS, wanted) == ["libnccl-devel-0:2.26.2-1+cuda12.8.*"]
    assert pkg.versionlock_stale(LOCKS, {"libnccl-devel": "2.26.2-1+cuda12.8"}) == []


def test_el_openmpi_headers_and_libraries():
    assert pkg.el_openmpi_paths("x86_64") == {"include": "/usr/include/openmpi-x86_64", "lib": "/usr/lib64/openmpi/lib",
                                              "bin": "/usr/lib64/openmpi/bin"}
    assert pkg.el_openmpi_paths("aarch64")["include"] == "/usr/include/openmpi-aarch64"


def test_other_sources_of_the_same_repository_are_found():
    url = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64"
    grep = ("/etc/apt/sources.list.d/cuda-ubuntu2404-x86_64.list:deb [signed-by=/usr/share/keyrings/cuda-archive-"
            "keyring.gpg] %s/ /\n"
            "/etc/apt/sources.list.d/nvidia-cuda.sources:URIs: %s/\n"
            "/etc/apt/sources.list.d/notes.list:# deb %s/ / (commented out)\n"
            "/etc/apt/sources.list.d/other.list:deb %s-extra/ /\n"
            "/etc/apt/sources.list.d/old.list.disabled-by-gpufleet:deb %s/ /\n") % (url, url, url, url, url)
    files = pkg.grep_files(grep)
    assert len(files) == 5
    assert pkg.apt_sources_for(files, url, "/etc/apt/sources.list.d/nvidia-cuda.sources") == [
        "/etc/apt/sources.list.d/cuda-ubuntu2404-x86_64.list"]


def test_the_toolkit_install_guide_s_own_list_is_found_below_the_repository_root():
    # NVIDIA Container Toolkit install guide: its list names .../stable/deb/$(ARCH), which apt expands.
    root = "https://nvidia.github.io/libnvidia-container"
    grep = ("/etc/apt/sources.list.d/nvidia-container-toolkit.list:deb [signed-by=/usr/share/keyrings/nvidia-container-"
            "toolkit-keyring.gpg] %s/stable/deb/$(ARCH) /\n"
            "/etc/apt/sources.list.d/nvidia-container-toolkit.sources:URIs: %s/stable/deb/amd64/\n") % (root, root)
    own = "/etc/apt/sources.list.d/nvidia-container-toolkit.sources"
    assert pkg.apt_sources_for(pkg.grep_files(grep), root, own, under=True) == [
        "/etc/apt/sources.list.d/nvidia-container-toolkit.list"]
    assert pkg.apt_sources_for(pkg.grep_files(grep), root, own) == []  # the CUDA repository's rule: exact URL


def test_every_package_of_the_branch_is_found():
    listing = ("nvidia-open-570 570.124.06-1\nlibnvidia-compute-570 570.124.06-1\nnvidia-utils-570 570.124.06-1\n"
               "nvidia-kernel-common-570 570.124.06-0ubuntu1\nnvidia-firmware-570-570.124.06 570.124.06-1\n"
               "nvidia-fabricmanager-570 570.124.06-1\nlibnvidia-compute-575 575.51.03-1\nlibnccl2 2.26.2-1+cuda12.8\n"
               "nvidia-open 1:570.124.06-1\ncuda-toolkit-12-8 12.8.1-1\n")
    assert pkg.branch_packages(listing, 570) == [
        "libnvidia-compute-570", "nvidia-firmware-570-570.124.06", "nvidia-kernel-common-570", "nvidia-open",
        "nvidia-open-570", "nvidia-utils-570"]


def test_the_other_branches_packages_are_found_to_release_their_holds():
    listing = ("nvidia-open-570 570.124.06-1\nlibnvidia-compute-570 570.124.06-1\nnvidia-utils-570 570.124.06-1\n"
               "nvidia-fabricmanager-570 570.124.06-1\nlibnccl2 2.26.2-1+cuda12.8\ncuda-toolkit-12-8 12.8.1-1\n")
    assert pkg.other_branch_packages(listing, 575) == [
        "libnvidia-compute-570", "nvidia-fabricmanager-570", "nvidia-open-570", "nvidia-utils-570"]
    assert pkg.other_branch_packages(listing, 570) == []
    # NVIDIA's pinned packaging (Debian from 580): unversioned names belong to the branch of their version.
    pinned = ("nvidia-driver-pinning-580 580-1\nnvidia-open 580.95.05-1\nlibnvidia-compute 1:580.95.05-1\n"
              "nvidia-utils 580.95.05-1\nlibnccl2 2.26.2-1+cuda12.8\ncuda-toolkit-12-8 12.8.1-1\n")
    assert pkg.other_branch_packages(pinned, 570) == [
        "libnvidia-compute", "nvidia-driver-pinning-580", "nvidia-open", "nvidia-utils"]
    assert pkg.other_branch_packages(pinned, 580) == []
    # A distribution's own package with an NVIDIA-like name, of no installed branch, is left alone.
    assert "libxnvctrl0" not in pkg.other_branch_packages(pinned + "libxnvctrl0 525.85.05-3\n", 570)
    assert pkg.installed_branches(pinned) == ["580"]
    assert pkg.installed_branches(listing) == ["570"]


def test_enabled_repository_ids_are_whole_ids():
    repolist = ("repo id                        repo name\n"
                "appstream                      Rocky Linux 9 - AppStream\n"
                "crb-debug                      Rocky Linux 9 - CRB - Debug\n\n")
    assert pkg.enabled_repo_ids(repolist) == ["appstream", "crb-debug"]
    assert "crb" not in pkg.enabled_repo_ids(repolist)  # a substring test would have found it


def test_fabric_manager_follows_the_driver_s_upstream_version_not_its_revision():
    # NVIDIA's apt repositories: the driver's packages 560.35.03-0ubuntu1, Fabric Manager's 560.35.03-1.
    assert pkg.upstream_version("560.35.03-0ubuntu1") == pkg.upstream_version("560.35.03-1") == "560.35.03"
    assert pkg.upstream_version("1:580.95.05-1") == "580.95.05"
    assert pkg.upstream_version("580.95.05-1.el9") == "580.95.05"
    assert pkg.upstream_version("580.95.05") == "580.95.05"
    assert pkg.at_upstream_version(["nvidia-fabricmanager-560"], "560.35.03-0ubuntu1", "apt") == [
        "nvidia-fabricmanager-560=560.35.03-*"]
    assert pkg.at_upstream_version(["nvidia-fabricmanager"], "3:580.95.05-1.el9", "dnf") == [
        "nvidia-fabricmanager-580.95.05"]


def test_fabric_manager_s_names_per_branch_as_nvidia_s_driver_container_installs_them():
    assert pkg.fabricmanager_packages(570, "apt") == ["nvidia-fabricmanager-570", "libnvidia-nscq-570"]
    assert pkg.fabricmanager_packages("580", "apt") == ["nvidia-fabricmanager", "libnvidia-nscq"]
    assert pkg.fabricmanager_packages(590, "dnf") == ["nvidia-fabricmanager", "libnvidia-nscq"]
    assert pkg.fabricmanager_packages(570, "dnf") == ["nvidia-fabric-manager", "libnvidia-nscq-570"]


def test_the_driver_packages_whose_version_is_the_drivers_branch_first_then_unversioned():
    """One list for the driver's preflight read and Fabric Manager's own read: the first installed is the driver's
    version (either flavor's branch metapackage, then NVIDIA's unversioned ones)."""
    assert pkg.driver_version_packages(580) == ["nvidia-open-580", "cuda-drivers-580", "nvidia-open", "cuda-drivers"]
    assert pkg.driver_version_packages("570") == pkg.driver_version_packages(570)


# `apt-cache policy podman` on Ubuntu 22.04 (jammy-updates ships 3.4.4+ds1-1ubuntu1.22.04.3) and on Debian 12.
JAMMY_PODMAN = """podman:
  Installed: (none)
  Candidate: 3.4.4+ds1-1ubuntu1.22.04.3
  Version table:
     3.4.4+ds1-1ubuntu1.22.04.3 500
        500 http://archive.ubuntu.com/ubuntu jammy-updates/universe amd64 Packages
     3.4.4+ds1-1ubuntu1 500
        500 http://archive.ubuntu.com/ubuntu jammy/universe amd64 Packages
"""
BOOKWORM_PODMAN = """podman:
  Installed: 4.3.1+ds1-8+deb12u1
  Candidate: 4.3.1+ds1-8+deb12u1
"""


def test_podman_before_4_1_is_refused_for_gpu_containers_naming_the_version():
    problem = pkg.podman_cdi_problem(JAMMY_PODMAN, "gpu07")
    assert problem.startswith("gpu07: Podman 3.4.4+ds1-1ubuntu1.22.04.3 reads no CDI specification")
    assert "container_runtime_engine=docker" in problem
    assert pkg.podman_cdi_problem(BOOKWORM_PODMAN, "gpu07") == ""
    assert pkg.podman_cdi_problem("podman:\n  Installed: 3.0.1+dfsg1-3+deb11u5\n  Candidate: 4.1.0-1\n", "n")  # installed wins
    assert pkg.podman_cdi_problem("N: Unable to locate package podman\n", "n") == ""


def test_the_cuda_alternative_is_read_from_debian_s_and_el_s_display():
    debian = ("cuda - manual mode\n  link best version is /usr/local/cuda-12.9\n"
              "  link currently points to /usr/local/cuda-12.8\n  link cuda is /usr/local/cuda\n"
              "/usr/local/cuda-12.8 - priority 128\n/usr/local/cuda-12.9 - priority 129\n")
    el = ("cuda - status is manual.\n link currently points to /usr/local/cuda-12.8\n"
          "/usr/local/cuda-12.8 - priority 128\nCurrent `best' version is /usr/local/cuda-12.8.\n")
    el_auto = el.replace("status is manual.", "status is auto.")
    assert pkg.alternative_state(debian) == pkg.alternative_state(el) == {"value": "/usr/local/cuda-12.8", "manual": True}
    assert pkg.alternative_state(el_auto)["manual"] is False
    assert pkg.alternative_state("") == {"value": "", "manual": False}  # no alternative yet


def test_the_alternatives_record_says_whether_cuda_was_set_by_hand():
    # /var/lib/dpkg/alternatives/cuda as update-alternatives --set wrote it (mode, link, then each alternative with
    # its priority); EL's /var/lib/alternatives/cuda has the same first two lines.
    record = "manual\n/usr/local/cuda\n\n/usr/local/cuda-12.8\n128\n/usr/local/cuda-12.9\n129\n"
    assert pkg.alternative_set_by_hand(record) is True
    assert pkg.alternative_set_by_hand(record.replace("manual", "auto", 1)) is False
    assert pkg.alternative_set_by_hand(None) is False  # no record: no alternative yet
    assert pkg.alternative_set_by_hand("/usr/local/cuda\nmanual\n") is False  # the mode is the first line only


def test_every_package_of_the_branch_is_found_on_el_too():
    # `rpm -qa --qf '%{NAME} %{VERSION}-%{RELEASE}\n'` on a RHEL 9 node with the 580-open stream.
    listing = ("nvidia-driver 580.95.05-1.el9\nnvidia-driver-libs 580.95.05-1.el9\nkmod-nvidia-open-dkms 580.95.05-1.el9\n"
               "nvidia-persistenced 580.95.05-1.el9\nlibnvidia-ml 580.95.05-1.el9\nnvidia-kmod-common 580.95.05-1.el9\n"
               "kernel 5.14.0-503.el9\ncuda-toolkit-12-8 12.8.1-1\nlibnccl 2.26.2-1+cuda12.8\n")
    assert pkg.branch_packages(listing, 580) == [
        "kmod-nvidia-open-dkms", "libnvidia-ml", "nvidia-driver", "nvidia-driver-libs", "nvidia-kmod-common",
        "nvidia-persistenced"]


def test_dkms_versions_reads_dkms_3_and_dkms_2_status_for_the_running_kernel():
    dkms3 = ("nvidia/580.95.05, 6.8.0-49-generic, x86_64: installed\n"
             "nvidia/580.95.05, 6.8.0-45-generic, x86_64: installed\n"
             "nvidia/570.124.06: added\n")
    assert pkg.dkms_versions(dkms3, "6.8.0-49-generic") == ["580.95.05"]
    assert pkg.dkms_versions(dkms3, "6.1.0-26-amd64") == []
    dkms2 = "nvidia, 580.95.05, 5.15.0-1-generic, x86_64: installed (original_module exists)\n"
    assert pkg.dkms_versions(dkms2, "5.15.0-1-generic") == ["580.95.05"]
    assert pkg.dkms_versions("nvidia-fs/2.20.5, 6.8.0-49-generic, x86_64: installed\n", "6.8.0-49-generic") == []
