"""GPUs on the PCI bus and the loaded driver, read from a fake sysfs tree; the installed driver from modinfo."""

import json
import os
import shutil
import subprocess
import sys

from ansible_collections.gpufleet.cluster.plugins.module_utils._node import nvidia_node

STANDIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "cluster", "scripts",
                       "nvidia_smi_standin.py")


def standin(tmp_path, state):
    """A runner that answers nvidia-smi's calls with the test cluster's stand-in, from this state."""
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(state))

    def run(cmd, **_kwargs):
        env = dict(os.environ, GPUFLEET_STANDIN_GPUS=str(path))
        return subprocess.run([sys.executable, STANDIN, *cmd[1:]], capture_output=True, text=True, env=env, check=False)

    return run


def pci(root, address, vendor, klass, device="0x2330"):
    path = root / "bus" / "pci" / "devices" / address
    path.mkdir(parents=True)
    (path / "vendor").write_text(vendor + "\n")
    (path / "class").write_text(klass + "\n")
    (path / "device").write_text(device + "\n")


def test_gpus_are_nvidia_display_devices_only(tmp_path):
    pci(tmp_path, "0000:18:00.0", "0x10de", "0x030200")           # H100: 3D controller
    pci(tmp_path, "0000:05:00.0", "0x10de", "0x068000", "0x22a3")  # NVSwitch: a bridge, not a GPU
    pci(tmp_path, "0000:3b:00.0", "0x15b3", "0x020700")           # a Mellanox HCA
    assert nvidia_node.pci_gpus(str(tmp_path)) == [{"address": "0000:18:00.0", "device": "0x2330"}]


def test_no_pci_bus_no_gpus(tmp_path):
    assert nvidia_node.pci_gpus(str(tmp_path)) == []


def test_loaded_driver(tmp_path):
    assert nvidia_node.loaded_driver(str(tmp_path)) is None
    (tmp_path / "module" / "nvidia").mkdir(parents=True)
    (tmp_path / "module" / "nvidia" / "version").write_text("570.124.06\n")
    assert nvidia_node.loaded_driver(str(tmp_path)) == "570.124.06"


def test_installed_driver_from_modinfo():
    def run(cmd, **_kwargs):
        return subprocess.CompletedProcess(cmd, 0, stdout="570.124.06\n", stderr="")

    def missing(cmd, **_kwargs):
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="modinfo: ERROR: Module nvidia not found.")

    assert nvidia_node.installed_driver(run) == "570.124.06"
    assert nvidia_node.installed_driver(missing) is None


def completed(stdout, rc=0):
    def run(cmd, **_kwargs):
        return subprocess.CompletedProcess(cmd, rc, stdout=stdout, stderr="")
    return run


def test_nvidia_smi_gpus_is_the_health_readers_count(tmp_path):
    """One reader of nvidia-smi's GPU list (gpu_health.query_gpus): the stand-in's two GPUs, one of them lost."""
    run = standin(tmp_path, {"driver": "570.124.06", "gpus": [{}, {"state": "lost"}, {}]})
    assert nvidia_node.nvidia_smi_gpus(run) == {"count": 2, "models": ["NVIDIA H100 80GB HBM3"], "driver": "570.124.06"}


def test_no_driver_or_no_nvidia_smi_means_no_gpu():
    """The launch's default nproc_per_node counts on 0 here (and then 1 rank per node)."""
    assert nvidia_node.nvidia_smi_gpus(completed("NVIDIA-SMI has failed", rc=9)) == {"count": 0, "models": [],
                                                                                      "driver": None}

    def missing(cmd, **_kwargs):
        raise FileNotFoundError(cmd[0])
    assert nvidia_node.nvidia_smi_gpus(missing)["count"] == 0


def test_a_line_that_does_not_answer_for_a_gpu_index_is_not_a_gpu():
    """nvidia-smi -L's style, or a message: not rows of the query asked, so no GPU (the count was lenient before)."""
    assert nvidia_node.nvidia_smi_gpus(completed("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)\n"))["count"] == 0


def test_cuda_version_from_nvcc():
    out = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.8, V12.8.93\nBuild cuda_12.8\n"
    assert nvidia_node.cuda_version(run=completed(out)) == "12.8"
    assert nvidia_node.cuda_version("/nonexistent") is None


def test_package_versions():
    """Through node_state's one package reader: dpkg-query's answer (DPKG_FORMAT, as Debian 12 printed it) for the
    names asked, the first installed one's version; a removed package ("rc ") is not installed."""
    def dpkg(out, rc=0):
        return lambda argv: (rc, out, "dpkg-query: no packages found matching libnccl\n" if rc else "")
    assert nvidia_node.package_version(("libnccl2",), dpkg("libnccl2\tii \t2.26.2-1+cuda12.8\n")) == "2.26.2-1+cuda12.8"
    assert nvidia_node.package_version(("libnccl2", "libnccl"), dpkg("libnccl2\trc \t2.26.2-1+cuda12.8\n", 1)) is None
    assert nvidia_node.package_version(("libnccl2",), dpkg("", rc=1)) is None


def test_several_packages_versions_are_read_in_one_query():
    """stack_facts' three versions (NCCL, the driver, Fabric Manager) from one dpkg-query, as Debian 12 prints it."""
    asked = []

    def dpkg(argv):
        asked.append(argv)
        return 1, "libnccl2\tii \t2.26.2-1+cuda12.8\nnvidia-open-580\tii \t580.95.05-1\n", "no packages found"
    versions = nvidia_node.package_versions({"nccl": ("libnccl2", "libnccl"), "driver": ("nvidia-open-580",),
                                             "fm": ("nvidia-fabricmanager",), "none": ()}, dpkg)
    assert versions == {"nccl": "2.26.2-1+cuda12.8", "driver": "580.95.05-1", "fm": None, "none": None}
    assert len(asked) == 1


def test_package_versions_from_this_machines_own_package_manager():
    """Ground truth: the reader against the real dpkg-query (or rpm) of the machine the tests run on."""
    assert shutil.which("dpkg-query") or shutil.which("rpm"), "the tests run on a machine with dpkg or rpm"
    own = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "bash"] if shutil.which("dpkg-query") else
                         ["rpm", "-q", "--qf", "%{VERSION}-%{RELEASE}", "bash"], capture_output=True, text=True,
                         check=True).stdout
    assert nvidia_node.package_version(("gpufleet-no-such-package", "bash")) == own
    assert "bash" in nvidia_node.installed_packages()


def test_nvswitches_are_nvidia_bridges(tmp_path):
    pci(tmp_path, "0000:18:00.0", "0x10de", "0x030200")
    pci(tmp_path, "0000:05:00.0", "0x10de", "0x068000", "0x22a3")
    pci(tmp_path, "0000:06:00.0", "0x8086", "0x068000", "0x1234")  # someone else's bridge
    assert nvidia_node.pci_nvswitches(str(tmp_path)) == [{"address": "0000:05:00.0", "device": "0x22a3"}]


def test_container_markers_are_named(tmp_path):
    assert nvidia_node.container_evidence(str(tmp_path)) is None
    (tmp_path / "proc" / "1").mkdir(parents=True)
    (tmp_path / "proc" / "1" / "environ").write_bytes(b"PATH=/bin\0HOME=/root\0")
    assert nvidia_node.container_evidence(str(tmp_path)) is None
    (tmp_path / "proc" / "1" / "environ").write_bytes(b"PATH=/bin\0container=podman\0")
    assert nvidia_node.container_evidence(str(tmp_path)) == "PID 1 runs with container=podman"
    other = tmp_path / "docker"
    other.mkdir()
    (other / ".dockerenv").write_text("")
    assert nvidia_node.container_evidence(str(other)) == "/.dockerenv exists"


def test_driver_origin(tmp_path):
    """Seen on the GPU machine of 2026-11-23: driver 580.159.04 loaded, no package carries it, no uninstaller."""
    assert nvidia_node.driver_origin(None, ["nvidia-open-570"], str(tmp_path)) is None
    assert nvidia_node.driver_origin("580.159.04", ["cuda-compat-13-0", "cuda-nvcc-13-0"], str(tmp_path)) == "unmanaged"
    # A pinning package alone carries no driver.
    assert nvidia_node.driver_origin("580.95.05", ["nvidia-driver-pinning-580"], str(tmp_path)) == "unmanaged"
    for package in ("nvidia-open-580", "cuda-drivers-570", "nvidia-kernel-open-dkms", "kmod-nvidia-open-dkms",
                    "nvidia-dkms-570-open", "linux-modules-nvidia-570-6.8.0-45-generic", "nvidia-driver"):
        assert nvidia_node.driver_origin("570.124.06", ["bash", package], str(tmp_path)) == "package", package
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "usr" / "bin" / "nvidia-uninstall").write_text("")
    assert nvidia_node.driver_origin("570.124.06", ["bash", "libnvidia-compute-570"], str(tmp_path)) == "runfile"
    assert nvidia_node.driver_origin("570.124.06", None, str(tmp_path)) == "runfile"


def test_installed_packages_from_dpkg_else_rpm():
    """Where dpkg-query is not there (127, as run_argv and run_command answer), rpm -qa's names (its
    %{NAME}\t%{VERSION}-%{RELEASE} lines); None where neither answers."""
    def dpkg_missing(argv):
        if argv[0] == "dpkg-query":
            return 127, "", "[Errno 2] No such file or directory: 'dpkg-query'"
        return 0, "kmod-nvidia-open-dkms\t575.57.08-1.el9\nbash\t5.1.8-9.el9\n", ""  # hand-made, in rpm's --qf format
    assert nvidia_node.installed_packages(dpkg_missing) == ["kmod-nvidia-open-dkms", "bash"]
    assert nvidia_node.installed_packages(lambda argv: (1, "", "")) is None


def test_service_state_through_node_states_one_reader(monkeypatch):
    """systemctl show's ActiveState (node_state.read_services), "no systemd" where systemctl does not answer or
    systemd is not the init."""
    asked = []

    def systemctl(argv):
        asked.append(argv)
        return 0, "Id=nvidia-fabricmanager.service\nUnitFileState=enabled\nActiveState=failed\n", ""
    monkeypatch.setattr(nvidia_node.os.path, "isdir", lambda path: path == "/run/systemd/system")
    assert nvidia_node.service_state("nvidia-fabricmanager", systemctl) == "failed"
    assert asked == [["systemctl", "show", "--property=Id,UnitFileState,ActiveState", "--",
                      "nvidia-fabricmanager.service"]]
    assert nvidia_node.service_state("nvidia-imex", lambda argv: (1, "", "Failed to connect to bus")) == "no systemd"
    monkeypatch.setattr(nvidia_node.os.path, "isdir", lambda path: False)
    assert nvidia_node.service_state("nvidia-imex", systemctl) == "no systemd"


def test_secure_boot_from_efivars(tmp_path):
    assert nvidia_node.secure_boot(str(tmp_path)) is False  # no UEFI: legacy boot
    efivars = tmp_path / "firmware" / "efi" / "efivars"
    efivars.mkdir(parents=True)
    assert nvidia_node.secure_boot(str(tmp_path)) is False  # UEFI without the variable
    (efivars / nvidia_node.SECURE_BOOT_VAR).write_bytes(b"\x06\x00\x00\x00\x01")
    assert nvidia_node.secure_boot(str(tmp_path)) is True
    (efivars / nvidia_node.SECURE_BOOT_VAR).write_bytes(b"\x06\x00\x00\x00\x00")
    assert nvidia_node.secure_boot(str(tmp_path)) is False


def test_nvlink5_systems_are_found_by_the_sw_mng_mark_in_an_infiniband_device_s_vpd(tmp_path):
    # HGX B200: no NVSwitch on the PCI bus as an NVIDIA bridge; its switch management ports are InfiniBand devices
    # whose VPD carries SW_MNG (gpu-driver-container, _assert_nvlink5_system). VPD is binary.
    for name, vpd in (("mlx5_0", b"\x82\x10ConnectX-7 HCA\x90\x00PN"), ("mlx5_4", b"\x82\x08NVSwitch\x90SW_MNG\x00\x78"),
                      ("mlx5_5", None)):
        device = tmp_path / "class" / "infiniband" / name / "device"
        device.mkdir(parents=True)
        if vpd is not None:
            (device / "vpd").write_bytes(vpd)
    assert nvidia_node.nvlink5_switch_devices(str(tmp_path)) == ["mlx5_4"]
    assert nvidia_node.pci_nvswitches(str(tmp_path)) == []
    assert nvidia_node.nvlink5_switch_devices(str(tmp_path / "none")) == []


def test_nvlink5_switch_ports_are_found_on_the_pci_bus_before_mlx5_ib_is_loaded(tmp_path):
    """A fresh B200 node at preflight: mlx5_ib not loaded yet, so /sys/class/infiniband is empty; the switch
    management ports are on the PCI bus (Mellanox, vendor 0x15b3) with the same VPD. One that an InfiniBand device
    stands for is counted once, by its InfiniBand name."""
    for address, vendor, vpd in (("0000:5a:00.0", "0x15b3", b"\x82\x08NVSwitch\x90SW_MNG\x00\x78"),
                                 ("0000:5b:00.0", "0x15b3", b"\x82\x10ConnectX-7 HCA\x90\x00PN"),
                                 ("0000:18:00.0", "0x10de", b"SW_MNG in another vendor's device")):
        device = tmp_path / "bus" / "pci" / "devices" / address
        device.mkdir(parents=True)
        (device / "vendor").write_text(vendor + "\n")
        (device / "vpd").write_bytes(vpd)
    assert nvidia_node.nvlink5_switch_devices(str(tmp_path)) == ["0000:5a:00.0"]
    # Once mlx5_ib is loaded: the InfiniBand device's "device" is a link to the PCI device.
    ib = tmp_path / "class" / "infiniband" / "mlx5_4"
    ib.mkdir(parents=True)
    (ib / "device").symlink_to(tmp_path / "bus" / "pci" / "devices" / "0000:5a:00.0")
    assert nvidia_node.nvlink5_switch_devices(str(tmp_path)) == ["mlx5_4"]


def test_ofed_is_found_by_ofed_info_which_mlnx_ofed_and_doca_ofed_install():
    def answer(stdout, rc=0):
        return lambda argv, **_kw: subprocess.CompletedProcess(argv, rc, stdout, "")

    assert nvidia_node.ofed_release(answer("MLNX_OFED_LINUX-24.10-1.1.4.0:\n")) == "MLNX_OFED_LINUX-24.10-1.1.4.0"
    assert nvidia_node.ofed_release(answer("OFED-internal-25.01-0.6.0:\n")) == "OFED-internal-25.01-0.6.0"

    def missing(argv, **_kw):
        raise FileNotFoundError(argv[0])

    assert nvidia_node.ofed_release(missing) is None  # the inbox RDMA stack has no ofed_info
    assert nvidia_node.ofed_release(answer("", 1)) is None


def test_the_gpudirect_rdma_path_peermem_dma_buf_or_why_neither(tmp_path):
    module = tmp_path / "module" / "nvidia"
    assert nvidia_node.open_modules_loaded(str(tmp_path)) is None
    module.mkdir(parents=True)
    (module / "taint").write_text("O\n")  # open modules: out-of-tree, not proprietary
    assert nvidia_node.open_modules_loaded(str(tmp_path)) is True
    (module / "taint").write_text("POE\n")
    assert nvidia_node.open_modules_loaded(str(tmp_path)) is False
    path = nvidia_node.gpudirect_rdma
    assert path(True, False, True, "6.8.0-49-generic") == "DMA-BUF"
    assert path(True, True, True, "6.8.0-49-generic") == "peermem"
    assert path(False, False, True, "6.8.0") == "no HCA"
    assert path(True, False, None, "6.8.0") == "no driver loaded"
    assert path(True, False, False, "6.8.0").startswith("none (DMA-BUF needs the open modules")
    assert path(True, False, True, "5.4.0-200-generic").startswith("none (DMA-BUF needs Linux 5.12")


def test_imex_is_read_only_on_a_multi_node_nvlink_systems_gpus(tmp_path):
    """GB200 NVL (0x2941) and GB300 NVL (0x31c2), the SKUs DCGM's multi-node diagnostic supports; an HGX B200
    (0x2901) shares no memory across nodes and has no IMEX to read."""
    asked = []

    def state(name):
        asked.append(name)
        return "failed"

    daemon, channels = tmp_path / "nvidia-imex", tmp_path / "nvidia-caps-imex-channels"
    assert nvidia_node.imex_state([{"address": "0000:18:00.0", "device": "0x2901"}], str(daemon), state,
                                  str(channels)) is None
    gb200 = [{"address": "0009:01:00.0", "device": "0x2941"}]
    assert nvidia_node.imex_state(gb200, str(daemon), state, str(channels)) == {
        "installed": False, "state": "not installed", "channels": []}
    assert asked == []
    daemon.write_text("")
    channels.mkdir()
    (channels / "channel0").write_text("")
    assert nvidia_node.imex_state(gb200, str(daemon), state, str(channels)) == {
        "installed": True, "state": "failed", "channels": ["channel0"]}
    assert nvidia_node.imex_state([{"device": "0x31C2"}], str(daemon), state, str(channels))["installed"] is True
    assert asked == ["nvidia-imex", "nvidia-imex"]


def test_the_health_read_carries_imex_from_the_same_pci_walk(tmp_path, monkeypatch):
    pci(tmp_path, "0009:01:00.0", "0x10de", "0x030200", "0x2941")
    monkeypatch.setattr(nvidia_node.gpu_health, "read", lambda _log: {"nvidia_smi": False})
    monkeypatch.setattr(nvidia_node, "IMEX_DAEMON", str(tmp_path / "absent"))
    monkeypatch.setattr(nvidia_node, "IMEX_CHANNELS", str(tmp_path / "absent"))
    health = nvidia_node.gpu_health_with_pci("/dev/null", str(tmp_path))
    assert health["pci_gpus"] == 1 and health["imex"] == {"installed": False, "state": "not installed", "channels": []}
