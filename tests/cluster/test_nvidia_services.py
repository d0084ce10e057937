"""Fabric Manager and nvidia-persistenced run for real on a node whose init is systemd (node6).

node6 boots systemd as its init (shared/TESTBED.md, "systemd as a node's init") and has a fake H100 and NVSwitch in
its sysfs (tests/cluster/testbed.py FAKE_SYS), so the driver role installs the driver and starts persistenced, and
the Fabric Manager role installs, enables and starts Fabric Manager. What this checks: that systemd runs the units
the roles leave (enabled, active, started again after a daemon restart), and the command lines it really runs:
nvidia-persistenced without --no-persistence-mode, which NVIDIA's Debian unit passes. Stand-ins: the daemons are
scripts that record their arguments and leave a process named as the daemon (tests/cluster/standin_repo.py); no
GPU, no NVSwitch and no NVIDIA software is involved.
"""

import json
import time
import urllib.parse
import urllib.request

import pytest

import gpu_standin
import testbed
from harness import REPO, Cluster

pytestmark = pytest.mark.cluster

NODE = 6
TAGS = ("--tags", "nvidia_driver,nvidia_fabricmanager")


@pytest.fixture(scope="module")
def systemd_node(own_nodes_state):
    info = testbed.start_nodes(own_nodes_state, [NODE], name="systemd.yml")
    try:
        yield Cluster(info, own_nodes_state)
    finally:
        testbed.remove_nodes([NODE])


def systemctl(host, *args: str) -> str:
    return host.run("systemctl " + " ".join(args)).stdout.strip()


def test_fabric_manager_and_persistence_run_under_systemd(systemd_node):
    node = systemd_node
    name = node.nodes[0]
    host = node.host(name)
    assert systemctl(host, "is-system-running") in ("running", "degraded")
    first = node.playbook("provision.yml", *TAGS)
    assert first.rc == 0, first.out[-4000:]
    for unit in ("nvidia-fabricmanager", "nvidia-persistenced"):
        assert systemctl(host, "is-active", unit) == "active", host.run("systemctl status %s" % unit).stdout
    assert systemctl(host, "is-enabled", "nvidia-fabricmanager") == "enabled"
    # What systemd started: the drop-in's command line, not the packaged one that turns persistence mode off.
    args = host.file("/var/run/nvidia-persistenced/gpufleet-standin-args").content_string.strip()
    assert args == "--verbose", args
    assert "--no-persistence-mode" not in systemctl(host, "show", "-p", "ExecStart", "nvidia-persistenced")
    assert host.file("/run/gpufleet-standin/nv-fabricmanager-args").content_string.strip() == \
        "-c /usr/share/nvidia/nvswitch/fabricmanager.cfg"
    # The daemons' processes (the kernel keeps 15 characters of a name: matched on the command line).
    assert host.run("pgrep -f '^nv-fabricmanager '").rc == 0 and host.run("pgrep -f '^nvidia-persistenced '").rc == 0
    # Nothing changes the second time, the services running.
    second = node.playbook("provision.yml", *TAGS)
    assert second.rc == 0 and second.recap()[name]["changed"] == 0, second.out[-4000:]
    # Fabric Manager is enabled at boot: systemd starts it again after it is stopped and the manager re-executes.
    assert host.run("systemctl stop nvidia-fabricmanager && systemctl daemon-reexec").rc == 0
    assert systemctl(host, "start", "multi-user.target") == ""
    assert systemctl(host, "is-active", "nvidia-fabricmanager") == "active"


DCGM = ("--tags", "nvidia_driver,nvidia_fabricmanager,dcgm", "-e", "dcgm_enabled=true")
# With the proprietary modules the CUDA build recommends (the stand-in repository has them at 4.5.3 too: left to apt's
# recommends they would come at 4.5.3 and unheld).
DCGM_PACKAGES = ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13", "datacenter-gpu-manager-4-proprietary",
                 "datacenter-gpu-manager-4-proprietary-cuda13")


def test_dcgm_pinned_held_and_running_and_verify_names_the_gpu_that_fails_its_diagnostic(systemd_node):
    """The dcgm role on the stand-in repository (DCGM 4.5.2 and 4.5.3 for CUDA 12 and 13, NVIDIA's epoch 1) and
    verify.yml's DCGM table with the stand-in dcgmi (tests/cluster/standin_repo.py), which replays the document of
    tests/fixtures/dcgm a control file names (a real capture of a persistence-mode warning among them) when a process
    named nv-hostengine runs. Checks the package choice for driver 580 (CUDA 13), the pin against a newer version,
    the hold, the service systemd runs, check mode, idempotence, and the verdicts; not DCGM's own diagnostics, which
    need a GPU."""
    node = systemd_node
    name = node.nodes[0]
    host = node.host(name)
    assert node.playbook("provision.yml", *TAGS).rc == 0
    check = node.playbook("provision.yml", *DCGM, "--check")
    assert check.rc == 0, check.out[-4000:]
    assert not host.package("datacenter-gpu-manager-4-core").is_installed  # check mode changed nothing
    first = node.playbook("provision.yml", *DCGM)
    assert first.rc == 0, first.out[-4000:]
    for package in DCGM_PACKAGES:
        assert host.package(package).version == "1:4.5.2-1"  # the pin, although 1:4.5.3-1 is newer
    assert not host.package("datacenter-gpu-manager-4-cuda12").is_installed  # driver 580 reports CUDA 13
    # NVIDIA's DCGM exporter with it: the release built against DCGM 4.5.2, although 4.8.2 is newer, held, running.
    assert host.package("datacenter-gpu-manager-exporter").version == "4.8.1-1"
    held = host.run("apt-mark showhold").stdout.split()
    assert all(package in held for package in DCGM_PACKAGES + ("datacenter-gpu-manager-exporter",)), held
    assert systemctl(host, "is-active", "nvidia-dcgm") == "active", host.run("systemctl status nvidia-dcgm").stdout
    assert systemctl(host, "is-enabled", "nvidia-dcgm") == "enabled"
    assert systemctl(host, "is-active", "nvidia-dcgm-exporter") == "active", \
        host.run("systemctl status nvidia-dcgm-exporter; cat /var/log/dcgm-exporter.log").stdout
    again = node.playbook("provision.yml", *DCGM)
    assert again.rc == 0 and again.recap()[name]["changed"] == 0, again.out[-4000:]
    check = node.playbook("provision.yml", *DCGM, "--check")
    assert check.rc == 0 and check.recap()[name]["changed"] == 0, check.out[-4000:]

    passed = node.playbook("verify.yml", "--tags", "stack")
    assert passed.rc == 0, passed.out[-4000:]
    table = passed.out.split("DCGM diagnostic, per GPU", 1)[1].splitlines()
    assert any(line.startswith(name) and "GPU 1 (serial 1650123000002)" in line and " Pass" in line
               for line in table), table[:6]
    # A real level-1 document with persistence mode off: dcgmi writes the warning as "Fail" (and exits 226); verify
    # shows it as the warning DCGM means and passes.
    host.run("mkdir -p /etc/gpufleet-standin && echo persistence-disabled > /etc/gpufleet-standin/dcgm-diag")
    try:
        warned = node.playbook("verify.yml", "--tags", "stack")
    finally:
        host.run("rm -f /etc/gpufleet-standin/dcgm-diag")
    assert warned.rc == 0, warned.out[-4000:]
    table = warned.out.split("DCGM diagnostic, per GPU", 1)[1].splitlines()
    assert any(line.startswith(name) and " Warn " in line and "software (warn: CONFIG)" in line
               and "Persistence mode for GPU 0 is disabled" in line for line in table), table[:6]
    # A real level-2 document whose memory and pcie plugins DCGM skipped without a reason: named in the table, no
    # failure (the stand-in refuses to answer -r 2 with a level-1 document, and -r 1 with this one).
    host.run("echo memory-pcie-skipped > /etc/gpufleet-standin/dcgm-diag")
    try:
        skipped = node.playbook("verify.yml", "--tags", "stack", "-e", "verify_dcgm_level=2")
    finally:
        host.run("rm -f /etc/gpufleet-standin/dcgm-diag")
    assert skipped.rc == 0, skipped.out[-4000:]
    table = skipped.out.split("DCGM diagnostic, per GPU", 1)[1].splitlines()
    assert any(line.startswith(name) and " Warn " in line and "memory (not run), pcie (not run)" in line
               for line in table), table[:6]
    host.run("echo pending-retirement > /etc/gpufleet-standin/dcgm-diag")
    try:
        failed = node.playbook("verify.yml", "--tags", "stack")
    finally:
        host.run("rm -f /etc/gpufleet-standin/dcgm-diag")
    assert failed.rc != 0
    assert ("%s: GPU 1 (serial 1650123000002) failed DCGM's diagnostic (level 1): software (fail: RESET): Page "
            "Retirement/Row Remap: A pending retired page has been detected in GPU 1." % name) in failed.out, \
        failed.out[-4000:]
    # train.yml -e health_diag=1 runs the same diagnostic in its GPU health gate (the node gets a stand-in nvidia-smi
    # with one GPU at its fake sysfs H100's address, tests/cluster/gpu_standin.py): the failing GPU refuses the launch
    # before anything is written. launcher=none with the system Python: this node has no training Python.
    gpu_standin.install(name, {"gpus": [{}]})
    host.run("echo pending-retirement > /etc/gpufleet-standin/dcgm-diag")
    try:
        gated = node.playbook("train.yml", "-e", "script=%s/examples/train.py" % REPO, "-e", "job=dcgm-gate",
                              "-e", "launcher=none", "-e", "gpufleet_python=/usr/bin/python3", "-e", "health_diag=1",
                              *gpu_standin.KERNEL_LOG_ARGS)
    finally:
        host.run("rm -f /etc/gpufleet-standin/dcgm-diag")
        gpu_standin.remove(name)
    assert gated.rc != 0
    assert ("%s GPU 1: fails DCGM's level-1 diagnostic (software (fail: RESET): Page Retirement/Row Remap: A pending "
            "retired page has been detected in GPU 1." % name) in " ".join(gated.out.split()), gated.out[-4000:]
    assert host.run("test -e /root/.gpufleet/jobs/dcgm-gate").rc != 0
    # Without its host engine DCGM gives no result, and verify.yml says so for the node instead of passing it.
    assert host.run("systemctl stop nvidia-dcgm").rc == 0
    try:
        stopped = node.playbook("verify.yml", "--tags", "stack", "-e", "dcgm_enabled=true")
    finally:
        host.run("systemctl start nvidia-dcgm")
    assert stopped.rc != 0
    assert "%s: DCGM's diagnostic (level 1) gave no result: dcgmi diag could not run" % name in stopped.out, \
        stopped.out[-4000:]
    level = node.playbook("verify.yml", "--tags", "stack", "-e", "verify_dcgm_level=7")
    assert level.rc != 0 and "verify_dcgm_level=7 is not 0 (no diagnostic) or a dcgmi diag level 1 to 4" in level.out


CONTAINERS = ("--tags", "container_runtime", "-e", "container_runtime_enabled=true",
              "-e", "gpufleet_container_engine=podman")


def test_on_systemd_the_toolkits_refresh_units_own_the_one_cdi_specification(systemd_node):
    """NVIDIA Container Toolkit 1.18's nvidia-cdi-refresh units (stand-ins shaped as NVIDIA's, tests/cluster/
    standin_repo.py) write /var/run/cdi/nvidia.yaml, which engines prefer to /etc/cdi. On a systemd node the role
    leaves the specification to them (path unit running, service enabled, the file there) and removes the copy it
    wrote before the units existed, so that one specification follows the driver. Not checked: a driver upgrade
    triggering the path unit (no driver here), or a GPU in a container."""
    node = systemd_node
    name = node.nodes[0]
    host = node.host(name)
    # What an earlier gpufleet (before the toolkit had the units) left on the node.
    host.run("mkdir -p /etc/cdi && echo '# written by nvidia-ctk before 1.18' > /etc/cdi/nvidia.yaml")
    first = node.playbook("provision.yml", *CONTAINERS)
    assert first.rc == 0, first.out[-4000:]
    assert systemctl(host, "is-active", "nvidia-cdi-refresh.path") == "active"
    assert systemctl(host, "is-enabled", "nvidia-cdi-refresh.path") == "enabled"
    assert systemctl(host, "is-enabled", "nvidia-cdi-refresh.service") == "enabled"
    spec = host.file("/var/run/cdi/nvidia.yaml").content_string
    assert "gpufleet stand-in for nvidia-ctk cdi generate (1.18.2-1)" in spec
    assert not host.file("/etc/cdi/nvidia.yaml").exists
    # The specification deleted (as a reboot of /var/run would, before the service ran): the role writes it again.
    host.run("rm -f /var/run/cdi/nvidia.yaml")
    again = node.playbook("provision.yml", *CONTAINERS)
    assert again.rc == 0 and host.file("/var/run/cdi/nvidia.yaml").exists, again.out[-4000:]
    third = node.playbook("provision.yml", *CONTAINERS)
    assert third.rc == 0 and third.recap()[name]["changed"] == 0, third.out[-4000:]
    check = node.playbook("provision.yml", *CONTAINERS, "--check")
    assert check.rc == 0 and check.recap()[name]["changed"] == 0, check.out[-4000:]


def test_a_user_who_may_not_read_the_kernel_log_is_told_xids_were_not_checked(systemd_node, tmp_path):
    """train.yml's probe runs as the inventory's user, without become. For a user other than root on a node under
    systemd, /dev/kmsg is refused (kernel.dmesg_restrict=1, as on this machine and on Ubuntu) or absent (a
    container's), and journald shows the user no kernel message (not in adm or systemd-journal): the gate says on
    that node that XIDs were not checked, and gpufleet_xid_check_required=true refuses the node. Nothing here is a
    stand-in but nvidia-smi: the kernel's and journald's own refusals."""
    node = systemd_node
    name = node.nodes[0]
    host = node.host(name)
    user = "mlops"
    added = host.run("id %s || (useradd -m -s /bin/bash %s && install -d -m 700 -o %s -g %s /home/%s/.ssh && "
                     "install -m 600 -o %s -g %s /root/.ssh/authorized_keys /home/%s/.ssh/authorized_keys)"
                     % ((user,) * 8))
    assert added.rc == 0, added.stderr
    assert "adm" not in host.run("id -nG %s" % user).stdout.split()
    gpu_standin.install(name, {"gpus": [{}]})
    script = tmp_path / "hello.py"  # this node has no training Python: a script of the standard library
    script.write_text("print('trained on a node whose kernel log this user may not read')\n")
    train = ("train.yml", "-e", "script=%s" % script, "-e", "launcher=none",
             "-e", "gpufleet_python=/usr/bin/python3", "-e", "ansible_user=%s" % user)
    try:
        warned = node.playbook(*train, "-e", "job=xid-unread")
        refused = node.playbook(*train, "-e", "job=xid-required", "-e", "gpufleet_xid_check_required=true")
    finally:
        gpu_standin.remove(name)
    said = " ".join(warned.out.split())
    assert warned.rc == 0, warned.out[-4000:]
    assert "%s: XIDs were not checked: the kernel log is unreadable: /dev/kmsg: " % name in said, said[-4000:]
    assert "journalctl shows this user no kernel message of this boot" in said
    assert refused.rc != 0
    assert "%s: XIDs were not checked" % name in " ".join(refused.out.split()), refused.out[-4000:]
    assert host.run("test -e /home/%s/.gpufleet/jobs/xid-required" % user).rc != 0


IMEX = ("--tags", "nvidia_driver,nvidia_imex")
FAKE_GPU = testbed.FAKE_SYS_ROOT + "/bus/pci/devices/0000:18:00.0"
FAKE_SWITCH = testbed.FAKE_SYS_ROOT + "/bus/pci/devices/0000:05:00.0"
SWITCH_AWAY = testbed.FAKE_SYS_ROOT + "/.nvswitch-away"  # outside the PCI bus's folder, for the test's time


def _active(host, unit: str, within: float = 60.0) -> str:
    """systemctl is-active of a unit the role started without waiting for the start job, once it is active or
    after `within` seconds (returning what systemd last said)."""
    deadline = time.monotonic() + within
    state = systemctl(host, "is-active", unit)
    while state != "active" and time.monotonic() < deadline:
        time.sleep(0.5)
        state = systemctl(host, "is-active", unit)
    return state


def test_imex_on_a_gb200_tray_installed_held_configured_running_and_the_gate_refuses_it_stopped(systemd_node):
    """node6 made a GB200 NVL compute tray: its fake GPU's PCI device 0x2941 (the SKU DCGM's multi-node diagnostic
    supports), and no NVSwitch on its PCI bus (a tray's switches are in the rack's switch trays). A node list naming
    a host outside the inventory is refused before any change; then the nvidia_imex role on the stand-in repository
    (nvidia-imex 580.95.05-1 and a newer 580.105.08-1 for a driver the repository lacks): the package at the driver's
    version and held, nodes_config.cfg with the node's cluster address, channel 0's module option, the service
    systemd runs started with that list, idempotence; then verify.yml through the health gate: running without an
    IMEX channel fails, with one (a plain file standing for the driver's device node, which no container here can
    have) passes, stopped fails naming the state. Stand-ins: the IMEX daemon and package, nvidia-smi, the GPU."""
    node = systemd_node
    name = node.nodes[0]
    host = node.host(name)
    assert host.run("echo 0x2941 > %s/device && mv %s %s" % (FAKE_GPU, FAKE_SWITCH, SWITCH_AWAY)).rc == 0
    try:
        outside = node.playbook("provision.yml", *IMEX, "-e", '{"nvidia_imex_nodes": ["%s", "rack2-tray9"]}' % name)
        said = " ".join(outside.out.split())
        assert outside.rc != 0
        assert ("%s: nvidia_imex_nodes=['%s', 'rack2-tray9'] names rack2-tray9, not in the inventory" % (name, name)
                in said), said[-3000:]
        assert "nothing was changed" in said and not host.package("nvidia-imex").is_installed

        first = node.playbook("provision.yml", *IMEX)
        assert first.rc == 0, first.out[-4000:]
        assert host.package("nvidia-imex").version == "580.95.05-1"  # the driver's, although 580.105.08-1 is newer
        assert "nvidia-imex" in host.run("apt-mark showhold").stdout.split()
        assert host.file("/etc/nvidia-imex/nodes_config.cfg").content_string == node.addresses[name] + "\n"
        assert "options nvidia NVreg_CreateImexChannel0=1" in host.file(
            "/etc/modprobe.d/gpufleet-imex.conf").content_string
        assert "IMEX channel 0 is created when it loads" in " ".join(first.out.split())  # no driver in a container
        assert _active(host, "nvidia-imex") == "active", host.run("systemctl status nvidia-imex").stdout
        assert systemctl(host, "is-enabled", "nvidia-imex") == "enabled"
        # The daemon systemd started read the role's node list.
        assert host.file("/run/gpufleet-standin/nvidia-imex-nodes").content_string == node.addresses[name] + "\n"
        again = node.playbook("provision.yml", *IMEX)
        assert again.rc == 0 and again.recap()[name]["changed"] == 0, again.out[-4000:]

        gpu_standin.install(name, {"gpus": [{}]})
        no_channel = node.playbook("verify.yml", "--tags", "stack")
        assert no_channel.rc != 0
        assert "%s: NVIDIA IMEX runs but the node has no IMEX channel" % name in " ".join(no_channel.out.split()), \
            no_channel.out[-4000:]
        host.run("mkdir -p /dev/nvidia-caps-imex-channels && touch /dev/nvidia-caps-imex-channels/channel0")
        passed = node.playbook("verify.yml", "--tags", "stack")
        assert passed.rc == 0, passed.out[-4000:]
        services = passed.out.split("NVIDIA services", 1)[1].splitlines()
        assert any(line.startswith(name) and line.split()[-1] == "active" for line in services), services[:4]
        assert host.run("systemctl stop nvidia-imex").rc == 0
        stopped = node.playbook("verify.yml", "--tags", "stack")
        assert stopped.rc != 0
        assert ("%s: NVIDIA IMEX is inactive on a multi-node NVLink node (GB200/GB300 NVL)" % name
                in " ".join(stopped.out.split())), stopped.out[-4000:]
    finally:
        gpu_standin.remove(name)
        host.run("systemctl stop nvidia-imex; rm -rf /dev/nvidia-caps-imex-channels; echo 0x2330 > %s/device; "
                 "mv %s %s" % (FAKE_GPU, SWITCH_AWAY, FAKE_SWITCH))


def test_monitor_yml_runs_prometheus_that_scrapes_the_node_and_evaluates_gpufleet_s_alert_rules(systemd_node, tmp_path):
    """monitor.yml on node6 (systemd), the node and the monitoring host at once (-e monitor_host): the distribution's
    node exporter and Prometheus (Debian's packages, from Debian's archive) installed and running under systemd.
    Prometheus's HTTP API, asked from the controller at the node's address: the node exporter's `up` and its own
    samples (node_load1) for node6, labelled with its inventory name, and gpufleet's alert rules loaded and healthy.
    The DCGM exporter the dcgm role runs (the stand-in package's, which serves a real exporter's capture for the
    stand-in GPU) is scraped: the GPU's utilisation is there, and an XID 79 line in the node's kernel log makes
    GpuHardwareXid fire.
    A job run by a user who is not root (mlops, in node_exporter_metrics_users) is seen running, then stopped, in
    gpufleet's own metrics (job_metrics.py, through the textfile collector). A second run changes nothing. With the
    node exporter stopped, NodeDown goes pending at the next evaluations (it fires after 2 minutes, not waited for
    here); the exporter is started again after."""
    node = systemd_node
    name = node.nodes[0]
    host = node.host(name)
    address = node.addresses[name]
    user = "mlops"
    added = host.run("id %s || (useradd -m -s /bin/bash %s && install -d -m 700 -o %s -g %s /home/%s/.ssh && "
                     "install -m 600 -o %s -g %s /root/.ssh/authorized_keys /home/%s/.ssh/authorized_keys)"
                     % ((user,) * 8))
    assert added.rc == 0, added.stderr
    args = ("-e", "monitor_host=%s" % name, "-e", "scrape_interval=1s",
            "-e", json.dumps({"node_exporter_metrics_users": [user]}))
    # DCGM with its exporter (the dcgm role; already there after the DCGM test), and a GPU for the exporter to see.
    provisioned = node.playbook("provision.yml", *DCGM)
    assert provisioned.rc == 0, provisioned.out[-4000:]
    gpu_standin.install(name, {"gpus": [{}]})
    first = node.playbook("monitor.yml", *args)
    assert first.rc == 0, first.out[-4000:]
    said = " ".join(first.out.split())
    # (the callback doubles the apostrophe of "gpufleet's" in its quoted YAML)
    assert ("Prometheus on %s: http://%s:9090/ scrapes the node exporter of %s every 1s, keeps 15d, and evaluates "
            "gpufleet''s alert rules" % (name, address, name)) in said, said[-3000:]
    for unit in ("prometheus", "prometheus-node-exporter"):
        assert systemctl(host, "is-active", unit) == "active", host.run("systemctl status %s" % unit).stdout

    def api(path, **params):
        url = "http://%s:9090/api/v1/%s?%s" % (address, path, urllib.parse.urlencode(params))
        with urllib.request.urlopen(url, timeout=5) as answer:
            return json.load(answer)["data"]

    def samples(query):
        return {row["metric"].get("node"): row["value"][1] for row in api("query", query=query)["result"]}

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and samples('up{job="node"}') != {name: "1"}:
        time.sleep(1)
    assert samples('up{job="node"}') == {name: "1"}, api("targets")
    assert list(samples("node_load1")) == [name]
    rules = {rule["name"]: rule["health"] for group in api("rules")["groups"] for rule in group["rules"]}
    assert sorted(rules) == ["GpuExporterDown", "GpuHardwareXid", "GpuLost", "GpuRowRemapFailed",
                             "GpuUncorrectableMemoryError", "GpufleetJobHung", "GpufleetJobRestartingInALoop",
                             "GpufleetNodeFailedHealthCheck", "GpufleetNodeLostFromJob", "GpufleetNodeQuarantined",
                             "InfinibandPortDown", "NodeDown", "NvlinkDown"] and set(rules.values()) == {"ok"}, rules
    # The GPU's utilisation through the DCGM exporter (the stand-in serves a real exporter's capture, value 0), then
    # a hardware XID in the node's kernel log (the corpus's XID 79 line, the stand-in GPU's bus): GpuHardwareXid fires.
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and samples('DCGM_FI_DEV_GPU_UTIL{gpu="0"}') != {name: "0"}:
            time.sleep(1)
        assert samples('DCGM_FI_DEV_GPU_UTIL{gpu="0"}') == {name: "0"}, api("targets")
        gpu_standin.log_kernel(name, gpu_standin.xid_line("0000:18:00", 79))
        firing = 'ALERTS{alertname="GpuHardwareXid",alertstate="firing"}'
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not samples(firing):
            time.sleep(1)
        alerts = api("query", query=firing)["result"]
        assert [(a["metric"]["node"], a["metric"]["gpu"], a["metric"]["severity"]) for a in alerts] == [
            (name, "0", "critical")], (alerts, samples("DCGM_FI_DEV_XID_ERRORS"))
    finally:
        gpu_standin.remove(name)
    # A running job's state, as Prometheus has it: a script of the standard library (no training Python here).
    script = tmp_path / "watched.py"
    script.write_text("import time\nprint('watched job running', flush=True)\ntime.sleep(300)\n")
    as_user = ("-e", "job=watched", "-e", "ansible_user=%s" % user)
    gpu_standin.install(name, {"gpus": [{}]})
    try:
        launched = node.playbook("train.yml", "-e", "script=%s" % script, "-e", "launcher=none", "-e", "wait=false",
                                 "-e", "gpufleet_python=/usr/bin/python3", *as_user)
        assert launched.rc == 0, launched.out[-4000:]
        state = 'gpufleet_job_state{gpufleet_job="watched",state="%s"}'
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and samples(state % "running") != {name: "1"}:
            time.sleep(1)
        assert samples(state % "running") == {name: "1"}, host.run("ls -l /var/lib/prometheus/node-exporter").stdout
        assert samples('gpufleet_job_attempt{gpufleet_job="watched"}') == {name: "1"}
        written = host.file("/var/lib/prometheus/node-exporter/gpufleet_job_mlops_watched.prom")
        assert (written.user, written.group, written.mode) == (user, "gpufleet-metrics", 0o644)
        stopped = node.playbook("stop.yml", *as_user)
        assert stopped.rc == 0, stopped.out[-4000:]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and samples(state % "stopped") != {name: "1"}:
            time.sleep(1)
        assert samples(state % "stopped") == {name: "1"} and samples(state % "running") == {name: "0"}
    finally:
        gpu_standin.remove(name)
    second = node.playbook("monitor.yml", *args)
    assert second.rc == 0 and second.recap()[name]["changed"] == 0, second.out[-4000:]
    assert host.run("systemctl stop prometheus-node-exporter").rc == 0
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not samples('ALERTS{alertname="NodeDown"}'):
            time.sleep(1)
        alerts = api("query", query='ALERTS{alertname="NodeDown"}')["result"]
        assert [(a["metric"]["node"], a["metric"]["alertstate"], a["metric"]["severity"]) for a in alerts] == [
            (name, "pending", "critical")], alerts
    finally:
        host.run("systemctl start prometheus-node-exporter")
