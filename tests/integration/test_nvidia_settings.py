"""The NVIDIA roles' repository and package settings, rendered for every supported distribution.

An unsupported or misspelt distribution fails here, in CI, rather than on a customer's server.
Runs the roles' own data and preflight tasks with the target's facts; touches no host.
"""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK = os.path.join(REPO, "tests", "integration", "playbooks", "render_nvidia_settings.yml")
MIRROR = "https://developer.download.nvidia.com/compute/cuda/repos"
# Ubuntu up to 580: branch-named packages, held. Debian from 580: unversioned names and the pinning package first.
APT = {"driver_open": ["nvidia-open-580"], "driver_proprietary": ["cuda-drivers-580"], "kind": "apt",
       "driver_hold": ["nvidia-open-580"], "driver_pinned": False, "el_prerequisites": {},
       "nccl": ["libnccl2=2.26.2-1+cuda12.8", "libnccl-dev=2.26.2-1+cuda12.8"],
       "nccl_hold": ["libnccl2", "libnccl-dev"], "headers": ["linux-headers-6.1.0-test"],
       # Fabric Manager at the driver's upstream version, whatever the revision (the driver's 580.95.05-0ubuntu1,
       # Fabric Manager's 580.95.05-1), under the unversioned names NVIDIA uses from 580 (gpu-driver-container).
       "fabricmanager": ["nvidia-fabricmanager=580.95.05-*", "libnvidia-nscq=580.95.05-*"],
       "fabricmanager_hold": ["nvidia-fabricmanager", "libnvidia-nscq"],
       # IMEX at the driver's upstream version, unversioned from 580 (gpu-driver-container's imex_install).
       "imex": ["nvidia-imex=580.95.05-*"], "imex_hold": ["nvidia-imex"],
       # DCGM with the proprietary modules its CUDA build recommends, all at dcgm_version (held by the role), and the
       # DCGM exporter built against it, at its own version.
       "dcgm": ["datacenter-gpu-manager-4-core=1:4.5.2-*", "datacenter-gpu-manager-4-cuda13=1:4.5.2-*",
                "datacenter-gpu-manager-4-proprietary=1:4.5.2-*", "datacenter-gpu-manager-4-proprietary-cuda13=1:4.5.2-*",
                "datacenter-gpu-manager-exporter=4.8.1-*"]}
APT_PINNED = dict(APT, driver_open=["nvidia-open"], driver_proprietary=["cuda-drivers"], driver_pinned=True,
                  driver_hold=["nvidia-driver-pinning-580", "nvidia-open"])
DNF = {"driver_open": ["@nvidia-driver:580-open"], "driver_proprietary": ["@nvidia-driver:580-dkms"], "kind": "dnf",
       "driver_pinned": False,
       # The four names, and every other installed package of the branch (none on the render's empty listing).
       "driver_hold": ["nvidia-driver", "nvidia-driver-cuda", "nvidia-driver-libs", "nvidia-kmod-common"],
       "nccl": ["libnccl-2.26.2-1+cuda12.8", "libnccl-devel-2.26.2-1+cuda12.8"], "nccl_hold": ["libnccl", "libnccl-devel"],
       # By name from the stream the driver role enabled (its fm profile would be another stream to dnf).
       "fabricmanager": ["nvidia-fabricmanager-580.95.05", "libnvidia-nscq-580.95.05"],
       "fabricmanager_hold": ["nvidia-fabricmanager", "libnvidia-nscq"],
       "imex": ["nvidia-imex-580.95.05"], "imex_hold": ["nvidia-imex"],
       "dcgm": ["datacenter-gpu-manager-4-core-4.5.2", "datacenter-gpu-manager-4-cuda13-4.5.2",
                "datacenter-gpu-manager-4-proprietary-4.5.2", "datacenter-gpu-manager-4-proprietary-cuda13-4.5.2",
                "datacenter-gpu-manager-exporter-4.8.1"]}
# The running kernel's headers at its version (name-version-release.arch as uname -r gives it): EL 9's
# kernel-devel-matched unversioned would install the newest kernel-core with it (test_el_nodes.py).
DNF8 = dict(DNF, headers=["kernel-devel-6.1.0-test", "kernel-headers"])
DNF9 = dict(DNF, headers=["kernel-devel-6.1.0-test", "kernel-devel-matched-6.1.0-test", "kernel-headers"])
# EPEL (for dkms) and the CodeReady Builder repository it needs, as NVIDIA's guide sets them up per distribution.
ROCKY = {"crb_enable": ["dnf", "config-manager", "--set-enabled"], "epel": "epel-release"}
RHEL = {"crb_enable": ["subscription-manager", "repos", "--enable"]}
ROCKY8 = dict(DNF8, el_prerequisites=dict(ROCKY, crb="powertools"))
ROCKY9 = dict(DNF9, el_prerequisites=dict(ROCKY, crb="crb"))
RHEL8 = dict(DNF8, el_prerequisites=dict(RHEL, crb="codeready-builder-for-rhel-8-x86_64-rpms",
                                         epel="https://dl.fedoraproject.org/pub/epel/epel-release-latest-8.noarch.rpm"))
RHEL9 = dict(DNF9, el_prerequisites=dict(RHEL, crb="codeready-builder-for-rhel-9-x86_64-rpms",
                                         epel="https://dl.fedoraproject.org/pub/epel/epel-release-latest-9.noarch.rpm"))
SUPPORTED = [
    ("Ubuntu", "20", "x86_64", "ubuntu2004/x86_64", APT),
    ("Ubuntu", "22", "x86_64", "ubuntu2204/x86_64", APT),
    ("Ubuntu", "24", "aarch64", "ubuntu2404/sbsa", APT),
    ("Debian", "12", "x86_64", "debian12/x86_64", APT_PINNED),
    ("Rocky", "8", "x86_64", "rhel8/x86_64", ROCKY8),
    ("Rocky", "9", "aarch64", "rhel9/sbsa", ROCKY9),
    ("RedHat", "8", "x86_64", "rhel8/x86_64", RHEL8),
    ("RedHat", "9", "x86_64", "rhel9/x86_64", RHEL9),
]


def render(tmp_path, distribution, major, arch, *extra):
    out = tmp_path / "rendered.json"
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), PLAYBOOK,
                           "-e", "target_distribution=%s" % distribution, "-e", "target_major=%s" % major,
                           "-e", "target_arch=%s" % arch, "-e", "out_file=%s" % out, *extra], cwd=REPO, env=env,
                          capture_output=True, text=True, check=False)
    return done.returncode, done.stdout + done.stderr, json.loads(out.read_text()) if out.exists() else None


@pytest.mark.parametrize("distribution, major, arch, path, expected", SUPPORTED,
                         ids=["%s-%s-%s" % case[:3] for case in SUPPORTED])
def test_supported_distribution_renders(tmp_path, distribution, major, arch, path, expected):
    rc, _out, rendered = render(tmp_path, distribution, major, arch)
    assert rc == 0
    assert rendered.pop("url") == "%s/%s" % (MIRROR, path)
    assert rendered.pop("dcgm_major") == 13  # driver branch 580's CUDA major
    assert rendered == expected


@pytest.mark.parametrize("distribution, major, branch, pinned, driver", [
    ("Ubuntu", "24", 580, False, "nvidia-open-580"),  # Ubuntu keeps branch names up to 580
    ("Ubuntu", "24", 590, True, "nvidia-open"),       # and drops them from 590 on
    ("Debian", "12", 570, False, "nvidia-open-570"),
    ("Debian", "12", 580, True, "nvidia-open"),
])
def test_where_nvidia_pins_branches_with_a_package(tmp_path, distribution, major, branch, pinned, driver):
    rc, out, rendered = render(tmp_path, distribution, major, "x86_64", "-e", "target_branch=%d" % branch)
    assert rc == 0, out[-2000:]
    assert rendered["driver_pinned"] is pinned and rendered["driver_open"] == [driver]
    assert ("nvidia-driver-pinning-%d" % branch in rendered["driver_hold"]) is pinned


@pytest.mark.parametrize("distribution, major, expected, hold", [
    ("Ubuntu", "22", ["nvidia-fabricmanager-570=570.124.06-*", "libnvidia-nscq-570=570.124.06-*"],
     ["nvidia-fabricmanager-570", "libnvidia-nscq-570"]),
    ("Rocky", "9", ["nvidia-fabric-manager-570.124.06", "libnvidia-nscq-570-570.124.06"],
     ["nvidia-fabric-manager", "libnvidia-nscq-570"]),
])
def test_fabric_manager_before_580_carries_the_branch_in_its_names(tmp_path, distribution, major, expected, hold):
    rc, out, rendered = render(tmp_path, distribution, major, "x86_64", "-e", "target_branch=570",
                               "-e", "target_driver_version=570.124.06-0ubuntu1")
    assert rc == 0, out[-2000:]
    assert rendered["fabricmanager"] == expected and rendered["fabricmanager_hold"] == hold


@pytest.mark.parametrize("distribution, major, expected", [
    ("Ubuntu", "22", ["nvidia-imex-570=570.124.06-*"]),
    ("Rocky", "9", ["nvidia-imex-570-570.124.06"]),  # rhel9/precompiled/Dockerfile: nvidia-imex-<branch>-<version>
])
def test_imex_before_580_carries_the_branch_in_its_name(tmp_path, distribution, major, expected):
    rc, out, rendered = render(tmp_path, distribution, major, "x86_64", "-e", "target_branch=570",
                               "-e", "target_driver_version=570.124.06-0ubuntu1")
    assert rc == 0, out[-2000:]
    assert rendered["imex"] == expected and rendered["imex_hold"] == ["nvidia-imex-570"]


@pytest.mark.parametrize("distribution, major, arch, expected, hold", [
    ("Ubuntu", "24", "x86_64", ["nvidia-fabricmanager=580.95.05-*", "libnvidia-nscq=580.95.05-*", "libnvsdm=580.95.05-*"],
     ["nvidia-fabricmanager", "libnvidia-nscq", "libnvsdm"]),
    ("Rocky", "9", "x86_64", ["nvidia-fabricmanager-580.95.05", "libnvidia-nscq-580.95.05", "libnvsdm-580.95.05"],
     ["nvidia-fabricmanager", "libnvidia-nscq", "libnvsdm"]),
    ("Ubuntu", "24", "aarch64", ["nvidia-fabricmanager=580.95.05-*", "libnvidia-nscq=580.95.05-*"],
     ["nvidia-fabricmanager", "libnvidia-nscq"]),
])
def test_an_nvlink5_system_gets_libnvsdm_at_the_drivers_version_on_x86_64(tmp_path, distribution, major, arch, expected,
                                                                          hold):
    """DCGM and NVML reach fourth-generation NVSwitches through libnvsdm (NVIDIA's gpu-driver-container installs it
    at the driver's version and holds it; there is none for arm64). An HGX B200 (device 0x2901) with one switch port."""
    rc, out, rendered = render(tmp_path, distribution, major, arch, "-e",
                               '{"target_gpus": [{"device": "0x2901"}], "target_nvlink5": ["mlx5_4"]}')
    assert rc == 0, out[-2000:]
    assert rendered["fabricmanager"] == expected
    assert rendered["fabricmanager_hold"] == hold


@pytest.mark.parametrize("distribution, major, arch", [("CentOS", "7", "x86_64"), ("Ubuntu", "18", "x86_64"),
                                                       ("Rocky", "10", "x86_64"), ("Ubunty", "22", "x86_64"),
                                                       ("Debian", "12", "ppc64le")])
def test_unsupported_or_misspelt_distribution_fails(tmp_path, distribution, major, arch):
    rc, out, rendered = render(tmp_path, distribution, major, arch)
    assert rc != 0 and rendered is None
    assert "localhost: %s %s (%s) is not supported by gpufleet's NVIDIA roles" % (distribution, major, arch) in out


def test_the_internal_repository_role_refuses_to_run_on_its_own():
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
                           os.path.join(REPO, "tests", "integration", "playbooks", "nvidia_repo_alone.yml")],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert "gpufleet.cluster.nvidia_repo is internal: it is included by the nvidia_driver, cuda_toolkit and nccl roles" \
        in done.stdout.replace("\n        ", " ")


@pytest.mark.parametrize("extra, major", [
    # The driver the nvidia_driver role installs (580): CUDA 13, whatever the node runs before the run.
    ({"target_node_facts": {"gpus": [{"device": "0x2330"}], "loaded_driver": "570.133.20", "driver_origin": "package"}},
     13),
    # A driver the role leaves alone: the node's own (570 reports CUDA 12).
    ({"nvidia_driver_enabled": False,
      "target_node_facts": {"gpus": [{"device": "0x2330"}], "loaded_driver": "570.133.20", "driver_origin": "package"}},
     12),
    # A driver kept as it was installed (the .run installer), 580.
    ({"nvidia_driver_keep_unpackaged": True,
      "target_node_facts": {"gpus": [{"device": "0x2330"}], "installed_driver": "580.95.05", "driver_origin": "runfile"}},
     13),
    # V100s on driver 580: CUDA 13 builds nothing for Volta, so DCGM's cuda12 build.
    ({"target_node_facts": {"gpus": [{"device": "0x1db1"}], "driver_origin": "package"}}, 12),
], ids=["managed", "left-alone-570", "kept-runfile-580", "volta-on-580"])
def test_dcgm_gets_the_build_for_the_driver_the_node_runs(tmp_path, extra, major):
    rc, out, rendered = render(tmp_path, "Ubuntu", "22", "x86_64", "-e", json.dumps(extra))
    assert rc == 0, out[-2000:]
    assert rendered["dcgm_major"] == major


def test_dcgm_without_its_proprietary_modules_or_exporter_names_only_the_core_and_cuda_build(tmp_path):
    rc, out, rendered = render(tmp_path, "Ubuntu", "24", "x86_64", "-e",
                               '{"target_dcgm_proprietary": false, "target_dcgm_exporter_enabled": false}')
    assert rc == 0, out[-2000:]
    assert rendered["dcgm"] == ["datacenter-gpu-manager-4-core=1:4.5.2-*", "datacenter-gpu-manager-4-cuda13=1:4.5.2-*"]
