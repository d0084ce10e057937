"""What the NVIDIA roles do on EL nodes, which cannot run here: their real tasks run on this machine as an EL 9 node
(ansible_facts set to Rocky 9), with stand-in rpm and dnf (tests/integration/scripts/el_standins.py) that answer
from a list of installed packages and record what dnf is asked to do. What this checks is the roles' commands;
not rpm's, dnf's or the versionlock plugin's own work."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "integration", "scripts"))

import el_standins  # noqa: E402

# The driver branch's packages as the nvidia_driver role holds them on EL (test_nvidia_settings.py: DNF), Fabric
# Manager's, and one that is not installed.
INSTALLED = {"nvidia-driver": "580.95.05-1.el9", "nvidia-driver-libs": "580.95.05-1.el9",
             "nvidia-kmod-common": "580.95.05-1.el9", "libnvidia-nscq": "580.95.05-1"}
HOLD = ["nvidia-driver", "nvidia-driver-libs", "nvidia-kmod-common", "libnvidia-nscq", "nvidia-fabric-manager"]


KERNEL = "5.14.0-427.13.1.el9_4.x86_64"  # the running kernel of el_node.yml's Rocky 9


def el_run(tmp_path, task, *extra, installed=None, available=None):
    el_standins.install(str(tmp_path), INSTALLED if installed is None else installed, available)
    el_standins.fake_gpu(str(tmp_path))
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
                           os.path.join(REPO, "tests", "integration", "playbooks", "el_node.yml"),
                           "-e", "el_dir=%s" % tmp_path, "-e", "el_task=%s" % task,
                           "-e", '{"hold_names": %s}' % str(HOLD).replace("'", '"'),
                           *extra], cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300)
    log = tmp_path / "dnf.log"
    return done, log.read_text().splitlines() if log.exists() else []


def hold(tmp_path, *extra):
    return el_run(tmp_path, "hold", *extra)


def test_el_packages_are_version_locked_in_one_dnf_run(tmp_path):
    """Every installed package a role holds gets dnf's versionlock (NVIDIA's guide, "Version locking"), in one run;
    one that is not installed is not asked for."""
    done, dnf = hold(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:]
    assert dnf == ["versionlock add nvidia-driver nvidia-driver-libs nvidia-kmod-common libnvidia-nscq"]


def test_el_check_mode_says_which_locks_would_come_and_runs_no_dnf(tmp_path):
    done, dnf = hold(tmp_path, "--check")
    assert done.returncode == 0, done.stdout[-3000:]
    assert dnf == []
    assert "nvidia-driver would be held" in done.stdout
    assert "nvidia-fabric-manager would be held once installed" in done.stdout


@pytest.mark.parametrize("role_file", ["roles/nvidia_driver/tasks/install.yml",
                                       "roles/nvidia_fabricmanager/tasks/install.yml", "roles/nvidia_imex/tasks/install.yml",
                                       "roles/dcgm/tasks/install.yml",
                                       "roles/container_runtime/tasks/nvidia_toolkit.yml"])
def test_a_pinned_el_install_goes_past_the_lock_it_moves(role_file):
    """A version change on EL installs past the lock of the installed version (apt's allow_change_held_packages),
    and hold.yml then moves the lock; without it dnf would find no package of the new version."""
    import yaml

    with open(os.path.join(REPO, role_file)) as handle:
        tasks = yaml.safe_load(handle)
    installs = [task for task in tasks if "ansible.builtin.dnf" in task
                and "epel" not in str(task["ansible.builtin.dnf"].get("name"))]
    assert installs and all(task["ansible.builtin.dnf"].get("disable_plugin") == ["versionlock"] for task in installs)


def test_el_9_headers_are_the_running_kernels_and_their_absence_refuses_before_any_change(tmp_path):
    """kernel-devel-matched requires kernel-core of its own version: unversioned it would install the newest kernel
    and DKMS would build for a kernel that is not running. Where the repositories no longer carry the running
    kernel's headers, the preflight refuses, saying what to do."""
    done, dnf = el_run(tmp_path, "driver_preflight", available=["kernel-devel-" + KERNEL])
    assert done.returncode != 0
    assert dnf == ["-q repoquery --qf %%{name} kernel-devel-%s kernel-devel-matched-%s" % (KERNEL, KERNEL)]
    assert ("localhost: the running kernel %s has no kernel-devel-matched-%s in the enabled repositories (the "
            "distribution has moved to a newer kernel), and DKMS builds the driver's module only against the running "
            "kernel's headers. Update the kernel (dnf update kernel), reboot into it, then run provision.yml again"
            % (KERNEL, KERNEL)) in " ".join(done.stdout.split()), done.stdout[-3000:]


def test_el_9_headers_carried_by_the_repositories_pass_the_preflight(tmp_path):
    done, dnf = el_run(tmp_path, "driver_preflight",
                       available=["kernel-devel-" + KERNEL, "kernel-devel-matched-" + KERNEL])
    assert done.returncode == 0, done.stdout[-3000:]
    assert len(dnf) == 1 and "repoquery" in dnf[0]
