#!/usr/bin/env python3
"""A local, signed apt repository of stand-in packages with NVIDIA's real package names and versions.

NVIDIA's CUDA repository cannot be reached from the test machines, and they have
no GPU. The NVIDIA roles' tests serve the nodes this repository instead, laid out
like NVIDIA's (<mirror>/debian12/x86_64/, flat, signed, key 3bf863cc.pub), so the
roles' repository and keyring setup, version pinning, holds, ordering, upgrade
and idempotence run for real against apt. The packages hold no NVIDIA software:
each installs a marker file, and the toolkit stand-in an `nvcc` script that
prints its version. What these tests check is the roles' logic, not NVIDIA's binaries.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import tempfile
import time

KEY_NAME = "3bf863cc.pub"  # the file name NVIDIA publishes its repository key under
SLUG = "debian12/x86_64"

# (package, version, files {path: content}); names and versions as NVIDIA publishes them.
PACKAGES: list[tuple[str, str, dict[str, str]]] = []
# Control fields and maintainer scripts of some packages: the facts that make a role fail when it forgets one.
EXTRAS: dict[tuple[str, str], dict[str, str]] = {}
KERNEL = os.uname().release  # the containers run the host's kernel: their `uname -r` is this machine's

# What DKMS does with the driver's module: build it only for a kernel whose headers are installed. The stand-in
# records the "module" where DKMS installs it, or says why not, as DKMS does.
DKMS_POSTINST = """#!/bin/sh
kernel=$(uname -r)
if [ -d /usr/src/linux-headers-$kernel ]; then
    mkdir -p /lib/modules/$kernel/updates/dkms
    echo "%(version)s" > /lib/modules/$kernel/updates/dkms/nvidia.ko
else
    echo "dkms: kernel headers for $kernel are not installed; the nvidia module was not built" >&2
fi
"""
DKMS_PRERM = """#!/bin/sh
rm -f /lib/modules/$(uname -r)/updates/dkms/nvidia.ko
"""
# NVIDIA's packaged nvidia-persistenced unit on Debian and Ubuntu runs the daemon with persistence mode off.
PERSISTENCED_UNIT = """[Unit]
Description=NVIDIA Persistence Daemon
Wants=syslog.target
StopWhenUnneeded=true

[Service]
Type=forking
ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose
ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced
"""
# The daemons, for nodes whose init is systemd: each forks a process that stays (Type=forking), named as the
# daemon is, and records the arguments it was started with, so that a test reads what the node really runs.
PERSISTENCED = """#!/bin/bash
mkdir -p /var/run/nvidia-persistenced
echo "$*" > /var/run/nvidia-persistenced/gpufleet-standin-args
(exec -a nvidia-persistenced sleep infinity) > /dev/null 2>&1 &
"""
FABRICMANAGER = """#!/bin/bash
case "$1" in
    -c) mkdir -p /run/gpufleet-standin; echo "$*" > /run/gpufleet-standin/nv-fabricmanager-args
        (exec -a nv-fabricmanager sleep infinity) > /dev/null 2>&1 & ;;
    *) echo 'Fabric Manager version is : %s' ;;
esac
"""
FABRICMANAGER_UNIT = """[Unit]
Description=NVIDIA fabric manager service

[Service]
Type=forking
ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg

[Install]
WantedBy=multi-user.target
"""
# The 570 driver at an Ubuntu-style revision, as NVIDIA's apt repositories version the driver's packages (e.g.
# nvidia-driver-560 560.35.03-0ubuntu1 beside nvidia-fabricmanager-560 560.35.03-1).
DRIVER_570 = "570.124.06-0ubuntu1"
for _branch, _version in (("570", DRIVER_570), ("575", "575.51.03-1")):
    _other = "575" if _branch == "570" else "570"
    # A branch is several packages (the metapackage pulls the compute libraries and utilities), all of one version.
    for _part in ("libnvidia-compute-%s" % _branch, "nvidia-utils-%s" % _branch):
        PACKAGES.append((_part, _version, {"/usr/share/gpufleet-standin/%s" % _part: _version + "\n"}))
        EXTRAS[(_part, _version)] = {"Conflicts": "%s, %s" % (_part.replace(_branch, _other), _part[:-4])}
    for _name in ("nvidia-open-%s" % _branch, "cuda-drivers-%s" % _branch):
        PACKAGES.append((_name, _version, {"/usr/share/gpufleet-standin/%s" % _name: _version + "\n",
                                           "/lib/systemd/system/nvidia-persistenced.service": PERSISTENCED_UNIT,
                                           "/usr/bin/nvidia-persistenced": PERSISTENCED}))
        EXTRAS[(_name, _version)] = {
            "Depends": "libnvidia-compute-{0} (= {1}), nvidia-utils-{0} (= {1})".format(_branch, _version),
            "Conflicts": "nvidia-open-%s, cuda-drivers-%s, nvidia-open, cuda-drivers" % (_other, _other),
            "postinst": DKMS_POSTINST % {"version": _version.split("-")[0]}, "prerm": DKMS_PRERM}
# From 580 on Debian, NVIDIA's packages carry no branch in their names, and the branch is locked by installing
# nvidia-driver-pinning-<branch> first. The repository also has a newer branch (590) under the same names: a role that
# forgets the pinning package gets 590. The stand-in pinning package is an apt preferences file to that effect (what
# NVIDIA's real one holds is not reproduced here).
PINNED_PARTS = ("libnvidia-compute", "nvidia-utils")
VERSIONED = ", ".join("%s-%s" % (name, branch) for branch in ("570", "575")
                      for name in ("nvidia-open", "cuda-drivers") + PINNED_PARTS)
for _version in ("580.95.05-1", "590.44.01-1"):
    for _part in PINNED_PARTS:
        PACKAGES.append((_part, _version, {"/usr/share/gpufleet-standin/%s" % _part: _version + "\n"}))
        EXTRAS[(_part, _version)] = {"Conflicts": "%s-570, %s-575" % (_part, _part)}
    for _name in ("nvidia-open", "cuda-drivers"):
        PACKAGES.append((_name, _version, {"/usr/share/gpufleet-standin/%s" % _name: _version + "\n",
                                           "/lib/systemd/system/nvidia-persistenced.service": PERSISTENCED_UNIT,
                                           "/usr/bin/nvidia-persistenced": PERSISTENCED}))
        EXTRAS[(_name, _version)] = {
            "Depends": ", ".join("%s (= %s)" % (part, _version) for part in PINNED_PARTS),
            "Conflicts": "%s, %s" % ("cuda-drivers" if _name == "nvidia-open" else "nvidia-open", VERSIONED),
            "postinst": DKMS_POSTINST % {"version": _version.split("-")[0]}, "prerm": DKMS_PRERM}
PACKAGES.append(("nvidia-driver-pinning-580", "580-1", {
    "/etc/apt/preferences.d/nvidia-driver-pinning-580":
        "Package: nvidia-open cuda-drivers %s\nPin: version 580.*\nPin-Priority: 1000\n" % " ".join(PINNED_PARTS)}))
# Fabric Manager must be the driver's version: each stand-in depends on that driver version, and the newer one on a
# driver the repository does not have, so an unpinned install cannot be satisfied. As NVIDIA packages them
# (NVIDIA/gpu-driver-container ubuntu22.04/install.sh, commit 78fa4ac): before 580 nvidia-fabricmanager-<branch>
# and libnvidia-nscq-<branch>, from 580 nvidia-fabricmanager and libnvidia-nscq, each at revision -1 whatever the
# driver's packages carry. The stand-in 570 driver carries an Ubuntu-style revision (570.124.06-0ubuntu1, as NVIDIA's
# apt repositories give the driver's packages; see DRIVER_570 above), so Fabric Manager's -1 is not the driver's
# whole version string.
for _branch, _driver_revision, _drivers, _versions in (
        ("570", "-0ubuntu1", ("nvidia-open-570", "cuda-drivers-570"), ("570.124.06-1", "570.133.20-1")),
        ("580", "-1", ("nvidia-open", "cuda-drivers"), ("580.95.05-1", "580.105.08-1"))):
    _suffix = "-" + _branch if _branch == "570" else ""
    for _version in _versions:
        _driver_version = _version.split("-")[0] + _driver_revision
        PACKAGES.append(("nvidia-fabricmanager" + _suffix, _version, {
            "/lib/systemd/system/nvidia-fabricmanager.service": FABRICMANAGER_UNIT,
            "/usr/bin/nv-fabricmanager": FABRICMANAGER % _version.split("-")[0]}))
        EXTRAS[("nvidia-fabricmanager" + _suffix, _version)] = {
            "Depends": " | ".join("%s (= %s)" % (driver, _driver_version) for driver in _drivers)}
        PACKAGES.append(("libnvidia-nscq" + _suffix, _version, {
            "/usr/share/gpufleet-standin/libnvidia-nscq" + _suffix: _version + "\n"}))
        # libnvsdm at the driver's version (NVIDIA's gpu-driver-container nvsdm_install), for NVLink5 systems.
        PACKAGES.append(("libnvsdm" + _suffix, _version, {
            "/usr/share/gpufleet-standin/libnvsdm" + _suffix: _version + "\n"}))
# NVIDIA IMEX at the driver's version (gpu-driver-container's imex_install: nvidia-imex from 580), each version
# depending on that driver version as Fabric Manager's stand-in does. What the package holds is stand-in: NVIDIA's
# packaged unit and config.cfg are not public. The unit is shaped as AWS ParallelCluster's nvidia-imex.service
# (aws/aws-parallelcluster-cookbook, templates/nvidia-imex/nvidia-imex.service.erb: Type=forking,
# ExecStart=/usr/bin/nvidia-imex -c <config.cfg>), and config.cfg carries only the settings the stand-in reads, at the
# defaults that file documents (IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg, SERVER_PORT=50000). The
# stand-in daemon refuses to start without a node list, records the list it started with, and leaves a process
# named nvidia-imex.
IMEX = """#!/bin/bash
config=/etc/nvidia-imex/config.cfg
[ "$1" = -c ] && config=$2
nodes=$(sed -n 's/^IMEX_NODE_CONFIG_FILE=//p' "$config")
if [ ! -s "${nodes:-/etc/nvidia-imex/nodes_config.cfg}" ]; then
    echo "nvidia-imex stand-in: no node list in ${nodes:-/etc/nvidia-imex/nodes_config.cfg}" >&2; exit 1
fi
mkdir -p /run/gpufleet-standin
cp "${nodes:-/etc/nvidia-imex/nodes_config.cfg}" /run/gpufleet-standin/nvidia-imex-nodes
(exec -a nvidia-imex sleep infinity) > /dev/null 2>&1 &
"""
IMEX_UNIT = """[Unit]
Description=NVIDIA IMEX service
After=network-online.target

[Service]
Type=forking
ExecStart=/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg

[Install]
WantedBy=multi-user.target
"""
IMEX_CONFIG = "IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg\nSERVER_PORT=50000\n"
for _version in ("580.95.05-1", "580.105.08-1"):
    PACKAGES.append(("nvidia-imex", _version, {"/usr/bin/nvidia-imex": IMEX, "/lib/systemd/system/nvidia-imex.service":
                                               IMEX_UNIT, "/etc/nvidia-imex/config.cfg": IMEX_CONFIG}))
    EXTRAS[("nvidia-imex", _version)] = {
        "Depends": " | ".join("%s (= %s)" % (driver, _version) for driver in ("nvidia-open", "cuda-drivers"))}
# The NVLink subnet manager, which NVIDIA's repository carries for NVLink5 systems (gpu-driver-container install.sh,
# nvlink5_pkgs_install: nvlsm with Debian's infiniband-diags); the stand-in's version is not one of NVIDIA's.
PACKAGES.append(("nvlsm", "2025.01.0-gpufleet", {"/usr/share/gpufleet-standin/nvlsm": "nvlsm stand-in\n"}))
# This machine's kernel has no Debian headers package: a stand-in under the name the driver role installs.
PACKAGES.append(("linux-headers-%s" % KERNEL, "1.0-gpufleet", {
    "/usr/src/linux-headers-%s/.gpufleet-standin" % KERNEL: "stand-in kernel headers\n"}))
for _cuda, _version, _build in (("12.8", "12.8.1-1", "V12.8.93"), ("12.9", "12.9.1-1", "V12.9.86")):
    _dash = _cuda.replace(".", "-")
    PACKAGES.append(("cuda-toolkit-%s" % _dash, _version, {
        "/usr/local/cuda-%s/bin/nvcc" % _cuda: "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver (gpufleet "
                                               "stand-in)'\necho 'Cuda compilation tools, release %s, %s'\n"
                                               % (_cuda, _build),
        "/usr/local/cuda-%s/version.json" % _cuda: '{"cuda": {"version": "%s"}}\n' % _version.split("-")[0],
    }))
    # NVIDIA's toolkit packages (cuda-toolkit-config-common) manage /usr/local/cuda with update-alternatives
    # (name "cuda"), the newest toolkit winning in automatic mode: a plain link the role forced would be undone.
    _priority = int(_cuda.replace(".", ""))
    EXTRAS[("cuda-toolkit-%s" % _dash, _version)] = {
        "postinst": "#!/bin/sh\nupdate-alternatives --install /usr/local/cuda cuda /usr/local/cuda-%s %d\n"
                    % (_cuda, _priority),
        "prerm": "#!/bin/sh\nupdate-alternatives --remove cuda /usr/local/cuda-%s\n" % _cuda}
# NCCL as NVIDIA's CUDA repository versions it: each release built for a few CUDA minors (2.30.4, the nccl role's
# default, for 12.9 and 13.2; none for 12.8, the toolkit default).
for _version in ("2.26.2-1+cuda12.8", "2.26.5-1+cuda12.8", "2.27.3-1+cuda12.9", "2.30.4-1+cuda12.9"):
    _nccl = _version.split("-")[0]
    PACKAGES.append(("libnccl2", _version, {"/usr/lib/x86_64-linux-gnu/libnccl.so.%s" % _nccl: ""}))
    PACKAGES.append(("libnccl-dev", _version, {"/usr/include/nccl.h": "#define NCCL_VERSION_STRING \"%s\"\n" % _nccl}))

# DCGM 4 as NVIDIA's CUDA repository carries it (docs.nvidia.com/datacenter/dcgm/latest/installation.html):
# datacenter-gpu-manager-4-cuda<major> depending on datacenter-gpu-manager-4-core, at apt versions with NVIDIA's
# epoch 1 (1:4.5.2-1, as NVIDIA's own Dockerfiles pin datacenter-gpu-manager-4-core=1:4.4.0-1), and the
# nvidia-dcgm unit running nv-hostengine in the foreground (-n). A newer 4.5.3 is there too, so that an unpinned
# install would take it. The stand-in dcgmi answers only `dcgmi diag -r N -j [--timeout S]`, and prints no text of
# its own making: it replays a document of the corpus in tests/fixtures/dcgm (DCGM_REPLAYS, each with the exit code
# dcgmi gave and the level it ran, None for a document of no level; the README there names every document's
# source), installed under DCGM_CORPUS. Which one: the name in /etc/gpufleet-standin/dcgm-diag ("pass" without it);
# asked for another level than the document's (-r), it refuses rather than answer one level's run with another's.
# Without a running process named nv-hostengine it replays the runtime error.
FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")
DCGM_CORPUS = "/usr/share/gpufleet-standin/dcgm"
DCGM_REPLAYS = {
    "pass": ("dcgm-4.5.2-r1-pass.json", 0, 1),
    "persistence-disabled": ("dcgm-4.2.3-r1-persistence-disabled.json", 226, 1),
    "pending-retirement": ("dcgm-4.5.2-r1-pending-retirement.json", 226, 1),
    "memory-pcie-skipped": ("dcgm-4.5.2-r2-memory-pcie-skipped.json", 226, 2),
    "memory-pcie-allowed": ("dcgm-4.5.2-r2-memory-pcie-allowed.json", 226, 2),
    "runtime-error": ("dcgm-4.5.2-runtime-error.json", 245, None),
}
DCGM_HOSTENGINE = """#!/bin/bash
exec -a nv-hostengine sleep infinity
"""
DCGM_UNIT = """[Unit]
Description=NVIDIA DCGM service

[Service]
User=root
PrivateTmp=false
ExecStart=/usr/bin/nv-hostengine -n --service-account nvidia-dcgm
Restart=on-abort

[Install]
WantedBy=multi-user.target
"""
DCGMI = r"""#!/usr/bin/python3
# gpufleet stand-in for DCGM's dcgmi: `dcgmi diag -r N -j [--timeout S]` only. No GPU is tested: it replays a
# document of gpufleet's corpus of dcgmi's output (tests/fixtures/dcgm), byte for byte, with dcgmi's exit code.
import os, sys
CORPUS = os.environ.get("GPUFLEET_STANDIN_DCGM_CORPUS", "@CORPUS@")
CONTROL = os.environ.get("GPUFLEET_STANDIN_CONTROL", "/etc/gpufleet-standin")
PROC = os.environ.get("GPUFLEET_STANDIN_PROC", "/proc")
REPLAYS = @REPLAYS@
args = sys.argv[1:]
if args[:1] != ["diag"] or "-j" not in args or "-r" not in args:
    sys.exit("gpufleet stand-in dcgmi: %s is not stood in for" % " ".join(args))
def engine_running():
    for pid in filter(str.isdigit, os.listdir(PROC)):
        try:
            with open("%s/%s/cmdline" % (PROC, pid), "rb") as handle:
                if handle.read().split(b"\0")[0] == b"nv-hostengine":
                    return True
        except OSError:
            pass
    return False
try:
    with open(os.path.join(CONTROL, "dcgm-diag")) as handle:
        case = handle.read().strip() or "pass"
except OSError:
    case = "pass"
if not engine_running():
    case = "runtime-error"
if case not in REPLAYS:
    sys.exit("gpufleet stand-in dcgmi: no document %r in the corpus (%s)" % (case, ", ".join(sorted(REPLAYS))))
name, code, level = REPLAYS[case]
asked = (args[args.index("-r") + 1:] or [""])[0]
if level is not None and asked != str(level):
    sys.exit("gpufleet stand-in dcgmi: the document %r is a level-%d run, asked for -r %s" % (case, level, asked))
with open(os.path.join(CORPUS, name), "rb") as handle:
    sys.stdout.buffer.write(handle.read())
sys.exit(code)
"""


def _read_fixture(*parts: str) -> str:
    with open(os.path.join(FIXTURES, *parts)) as handle:
        return handle.read()


DCGMI_SCRIPT = DCGMI.replace("@CORPUS@", DCGM_CORPUS).replace("@REPLAYS@", repr(DCGM_REPLAYS))
DCGM_FILES = {"%s/%s" % (DCGM_CORPUS, name): _read_fixture("dcgm", name)
              for name, _code, _level in DCGM_REPLAYS.values()}
for _version in ("1:4.5.2-1", "1:4.5.3-1"):
    _upstream = _version.split(":")[1].split("-")[0]
    PACKAGES.append(("datacenter-gpu-manager-4-core", _version, {
        "/usr/bin/nv-hostengine": DCGM_HOSTENGINE, "/lib/systemd/system/nvidia-dcgm.service": DCGM_UNIT,
        "/usr/bin/dcgmi": DCGMI_SCRIPT, **DCGM_FILES}))
    # DCGM's proprietary modules (the profiling module among them), which the CUDA build recommends: installing
    # -cuda<N> with recommends brings them (SUSE Observability's and others' DCGM guides install it so, e.g. zypper
    # --recommends datacenter-gpu-manager-4-cuda<N>). Which package of DCGM's carries the Recommends is not public;
    # the stand-in puts it on the CUDA build, without a version, so an install that leaves them to apt gets the newest.
    PACKAGES.append(("datacenter-gpu-manager-4-proprietary", _version, {
        "/usr/lib/x86_64-linux-gnu/libdcgmmoduleprofiling.so.4": "stand-in profiling module %s\n" % _upstream}))
    for _major in ("12", "13"):
        PACKAGES.append(("datacenter-gpu-manager-4-cuda" + _major, _version, {
            "/usr/share/gpufleet-standin/datacenter-gpu-manager-4-cuda" + _major: _version + "\n"}))
        EXTRAS[("datacenter-gpu-manager-4-cuda" + _major, _version)] = {
            "Depends": "datacenter-gpu-manager-4-core (= %s)" % _version,
            "Recommends": "datacenter-gpu-manager-4-proprietary, datacenter-gpu-manager-4-proprietary-cuda" + _major}
        PACKAGES.append(("datacenter-gpu-manager-4-proprietary-cuda" + _major, _version, {
            "/usr/share/gpufleet-standin/datacenter-gpu-manager-4-proprietary-cuda" + _major: _version + "\n"}))

# NVIDIA's DCGM exporter as its repository carries it: datacenter-gpu-manager-exporter at the exporter's own version
# (4.8.1, built against DCGM 4.5.2; 4.8.2 too, so that an unpinned install would take it), depending on DCGM's core,
# with NVIDIA's own unit file (tests/fixtures/dcgm_exporter/nvidia-dcgm-exporter.service, verbatim) and default
# counters (default-counters.csv, verbatim). Its /usr/bin/dcgm-exporter is gpufleet's stand-in
# (tests/cluster/scripts/dcgm_exporter_standin.py), which serves a real exporter's capture (metrics-tesla-t4.txt) for
# each GPU the node's nvidia-smi lists, its XID the last one the node's fake kernel log holds for that GPU.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "dcgm_exporter_standin.py")) as _handle:
    DCGM_EXPORTER_SCRIPT = _handle.read()
for _version in ("4.8.1-1", "4.8.2-1"):
    PACKAGES.append(("datacenter-gpu-manager-exporter", _version, {
        "/usr/bin/dcgm-exporter": DCGM_EXPORTER_SCRIPT,
        "/lib/systemd/system/nvidia-dcgm-exporter.service": _read_fixture("dcgm_exporter", "nvidia-dcgm-exporter.service"),
        "/etc/dcgm-exporter/default-counters.csv": _read_fixture("dcgm_exporter", "default-counters.csv"),
        "/usr/share/gpufleet-standin/dcgm-exporter/metrics-tesla-t4.txt": _read_fixture("dcgm_exporter",
                                                                                        "metrics-tesla-t4.txt")}))
    EXTRAS[("datacenter-gpu-manager-exporter", _version)] = {"Depends": "datacenter-gpu-manager-4-core"}

# NVIDIA Container Toolkit's repository (its own, with its own key at <mirror>/gpgkey), as a stand-in: the four
# packages at two versions, and an nvidia-ctk that prints a CDI specification naming the GPUs it finds under
# GPUFLEET_SYS_ROOT (the test nodes' fake sysfs), and Docker's configuration with NVIDIA's runtime added (--dry-run).
TOOLKIT_DIR = "libnvidia-container"
NVIDIA_CTK = r"""#!/usr/bin/python3
import json, os, sys
args = sys.argv[1:]
if args[:2] == ["cdi", "generate"]:
    spec = ("# gpufleet stand-in for nvidia-ctk cdi generate (@VERSION@)\n"
            "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n  containerEdits:\n"
            "    deviceNodes:\n    - path: /dev/nvidia0\n")
    output = os.environ.get("NVIDIA_CTK_CDI_OUTPUT_FILE_PATH")  # --output's variable, set by nvidia-cdi-refresh
    if output:
        os.makedirs(os.path.dirname(output), exist_ok=True)
        with open(output, "w") as handle:
            handle.write(spec)
    else:
        sys.stdout.write(spec)
elif args[:2] == ["runtime", "configure"] and "--runtime=docker" in args and "--dry-run" in args:
    try:
        config = json.load(open("/etc/docker/daemon.json"))
    except OSError:
        config = {}
    config.setdefault("runtimes", {})["nvidia"] = {"args": [], "path": "nvidia-container-runtime"}
    print(json.dumps(config, indent=4))
else:
    sys.exit("gpufleet stand-in nvidia-ctk: %s is not stood in for" % " ".join(args))
"""
# From 1.18 the base package ships NVIDIA's CDI refresh units and its postinst enables and starts them
# (NVIDIA/nvidia-container-toolkit deployments/systemd/nvidia-cdi-refresh.{path,service} and
# packaging/debian/nvidia-container-toolkit-base.postinst, PR 1229). The stand-in service leaves out the real one's
# ConditionPathExists on nvidia-smi and ExecCondition on the driver's module in modules.dep: the test nodes have
# neither. Everything else is as NVIDIA ships it: oneshot, RemainAfterExit, the output path in its environment.
CDI_REFRESH_PATH = """[Unit]
Description=Trigger CDI refresh on NVIDIA driver or toolkit install / upgrade events

[Path]
PathChanged=/lib/modules/%v/modules.dep
PathChanged=/lib/modules/%v/modules.dep.bin
PathChanged=/usr/bin/nvidia-ctk

[Install]
WantedBy=multi-user.target
"""
CDI_REFRESH_SERVICE = """[Unit]
Description=Refresh NVIDIA CDI specification file
ConditionPathExists=/usr/bin/nvidia-ctk
After=multi-user.target

[Service]
Type=oneshot
Environment=NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/var/run/cdi/nvidia.yaml
EnvironmentFile=-/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env
ExecStart=/usr/bin/nvidia-ctk cdi generate
RemainAfterExit=yes

[Install]
WantedBy=multi-user.target
"""
CDI_REFRESH_POSTINST = """#!/bin/sh
systemctl daemon-reload || echo "Warning: Failed to reload systemd daemon" >&2
systemctl enable --now nvidia-cdi-refresh.path || echo "Warning: Failed to enable nvidia-cdi-refresh.path" >&2
systemctl enable --now nvidia-cdi-refresh.service || echo "Warning: Failed to enable nvidia-cdi-refresh.service" >&2
systemctl start nvidia-cdi-refresh.service || echo "Warning: Failed to trigger CDI refresh" >&2
exit 0
"""
TOOLKIT_PACKAGES: list[tuple[str, str, dict[str, str]]] = []
# 1.18.1 and 1.18.2 fix NVIDIA_VISIBLE_DEVICES=none exposing every GPU (NVIDIA Container Toolkit release notes);
# gpufleet's default is 1.18.2-1, and the older ones stay in the repository so that the pin is tested.
for _version in ("1.17.8-1", "1.18.0-1", "1.18.2-1"):
    for _name in ("libnvidia-container1", "libnvidia-container-tools", "nvidia-container-toolkit-base",
                  "nvidia-container-toolkit"):
        _files = {"/usr/share/gpufleet-standin/%s" % _name: _version + "\n"}
        if _name == "nvidia-container-toolkit-base":
            _files["/usr/bin/nvidia-ctk"] = NVIDIA_CTK.replace("@VERSION@", _version)
            if not _version.startswith("1.17."):
                _files["/lib/systemd/system/nvidia-cdi-refresh.path"] = CDI_REFRESH_PATH
                _files["/lib/systemd/system/nvidia-cdi-refresh.service"] = CDI_REFRESH_SERVICE
                EXTRAS[(_name, _version)] = {"postinst": CDI_REFRESH_POSTINST}
        TOOLKIT_PACKAGES.append((_name, _version, _files))


def _deb(work: str, name: str, version: str, files: dict[str, str]) -> str:
    root = os.path.join(work, "%s_%s" % (name, version))
    os.makedirs(os.path.join(root, "DEBIAN"))
    for path, content in files.items():
        target = root + path
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w") as handle:
            handle.write(content)
        os.chmod(target, 0o755 if "/bin/" in path else 0o644)
    extra = EXTRAS.get((name, version), {})
    fields = "".join("%s: %s\n" % (key, value) for key, value in extra.items() if key[0].isupper())
    with open(os.path.join(root, "DEBIAN", "control"), "w") as handle:
        handle.write("Package: %s\nVersion: %s\nArchitecture: all\nMaintainer: gpufleet tests <tests@example.invalid>\n"
                     "%sDescription: gpufleet test stand-in for %s\n Carries the real package name and version only;"
                     " no NVIDIA software.\n" % (name, version, fields, name))
    for script in ("postinst", "prerm"):
        if script in extra:
            with open(os.path.join(root, "DEBIAN", script), "w") as handle:
                handle.write(extra[script])
            os.chmod(os.path.join(root, "DEBIAN", script), 0o755)
    deb = os.path.join(work, "%s_%s_all.deb" % (name, version.replace(":", "%3a")))
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", root, deb], check=True, stdout=subprocess.DEVNULL)
    return deb


def _stanza(deb: str, filename: str) -> str:
    control = subprocess.run(["dpkg-deb", "--field", deb], check=True, capture_output=True, text=True).stdout.strip()
    with open(deb, "rb") as handle:
        data = handle.read()
    return "%s\nFilename: ./%s\nSize: %d\nSHA256: %s\n" % (control, filename, len(data), hashlib.sha256(data).hexdigest())


def _read_stamp(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def build(dest: str) -> str:
    """Build the repository under dest/<SLUG>, and NVIDIA Container Toolkit's under dest/TOOLKIT_DIR; return the
    mirror root to give the roles (a file:// URL)."""
    # NVIDIA's CUDA repositories' Release files say "Origin: NVIDIA" and "Label: NVIDIA CUDA": the apt preferences
    # of NVIDIA's cuda-<distro>.pin (and the nvidia_repo role's) select the repository by that label.
    _flat_repo(os.path.join(dest, SLUG), PACKAGES, KEY_NAME, os.path.join(dest, ".recipe"),
               origin="NVIDIA", label="NVIDIA CUDA")
    toolkit = os.path.join(dest, TOOLKIT_DIR)
    _flat_repo(os.path.join(toolkit, "stable", "deb", "amd64"), TOOLKIT_PACKAGES, os.path.join("..", "..", "..", "gpgkey"),
               os.path.join(toolkit, ".recipe"))
    return "file://" + dest


def _flat_repo(repo: str, packages: list, key_name: str, stamp: str, origin: str = "gpufleet test stand-in",
               label: str = "gpufleet test stand-in") -> None:
    """A flat apt repository of packages in repo, signed (InRelease) by a key made for it, exported as key_name
    (relative to repo); made anew when its content changes, not only when absent."""
    recipe = hashlib.sha256(repr((packages, sorted(EXTRAS.items()), origin, label)).encode()).hexdigest()
    if os.path.exists(os.path.join(repo, "InRelease")) and _read_stamp(stamp) == recipe:
        return
    shutil.rmtree(repo, ignore_errors=True)
    os.makedirs(repo, exist_ok=True)
    work = tempfile.mkdtemp(prefix="standin-")
    gnupg = tempfile.mkdtemp(prefix="gnupg-")
    try:
        stanzas = []
        for name, version, files in packages:
            deb = _deb(work, name, version, files)
            shutil.copy(deb, repo)
            stanzas.append(_stanza(deb, os.path.basename(deb)))
        data = "\n".join(stanzas).encode()
        with open(os.path.join(repo, "Packages"), "wb") as handle:
            handle.write(data)
        with gzip.open(os.path.join(repo, "Packages.gz"), "wb") as handle:
            handle.write(data)
        lines = ["Origin: %s" % origin, "Label: %s" % label,
                 "Date: %s" % time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime()), "SHA256:"]
        for index in ("Packages", "Packages.gz"):
            with open(os.path.join(repo, index), "rb") as handle:
                data = handle.read()
            lines.append(" %s %d %s" % (hashlib.sha256(data).hexdigest(), len(data), index))
        with open(os.path.join(repo, "Release"), "w") as handle:
            handle.write("\n".join(lines) + "\n")
        gpg = ["gpg", "--batch", "--homedir", gnupg, "--pinentry-mode", "loopback", "--passphrase", ""]
        subprocess.run(gpg + ["--quick-generate-key", "gpufleet test stand-in repository", "ed25519", "sign", "never"],
                       check=True, capture_output=True)
        subprocess.run(gpg + ["--armor", "--yes", "--output", os.path.normpath(os.path.join(repo, key_name)),
                              "--export"], check=True)
        subprocess.run(gpg + ["--clearsign", "--output", os.path.join(repo, "InRelease"),
                              os.path.join(repo, "Release")], check=True, capture_output=True)
        with open(stamp, "w") as handle:
            handle.write(recipe)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(gnupg, ignore_errors=True)


STANDIN_MAKEFILE = """# gpufleet test stand-in for nccl-tests: no CUDA here. `make` records the variables the
# role passes and installs a script that prints all_reduce_perf's layout (measuring nothing).
all:
\tmkdir -p build
\techo "MPI=$(MPI) MPI_HOME=$(MPI_HOME) CUDA_HOME=$(CUDA_HOME) NCCL_HOME=$(NCCL_HOME)" > build/inputs.txt
\techo "$(NVCC_GENCODE)" > build/gencode.txt
\tcp all_reduce_perf.sh build/all_reduce_perf
\tchmod 755 build/all_reduce_perf
\tdate +%s%N > build/built_at
"""

STANDIN_ALL_REDUCE = r"""#!/bin/bash
# gpufleet test stand-in for all_reduce_perf: every MPI rank prints its device line, rank 0 the result
# table in nccl-tests' layout. The figures are fixed; nothing is measured.
rank=${OMPI_COMM_WORLD_RANK:-0}
printf '#  Rank %2d Group  0 Pid %6d on %10s device  0 [0x00] gpufleet stand-in (no GPU)\n' "$rank" $$ "$(hostname)"
[ "$rank" = 0 ] || exit 0
sleep 1
cat <<'TABLE'
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    142.6    7.35   11.03      0    141.9    7.39   11.08      0
    16777216       4194304     float     sum      -1    701.5   23.92   35.87      0    699.8   23.97   35.96      0
  1073741824     268435456     float     sum      -1  39104.7   27.46   41.19      0  39087.2   27.47   41.21      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 29.39
#
TABLE
"""


NCCL_TESTS_VERSION = "2.19.6"  # the nccl_tests role's default release


def build_nccl_tests_archive(dest: str, version: str = NCCL_TESTS_VERSION) -> str:
    """A source archive shaped like nccl-tests' release (one top folder), holding the stand-in build; made anew
    when the stand-in changes (its name carries a hash of its content)."""
    digest = hashlib.sha256((STANDIN_MAKEFILE + STANDIN_ALL_REDUCE).encode()).hexdigest()[:12]
    path = os.path.join(dest, "nccl-tests-standin-%s-%s.tar.gz" % (version, digest))
    if os.path.exists(path):
        return path
    os.makedirs(dest, exist_ok=True)
    work = tempfile.mkdtemp(prefix="nccl-tests-")
    try:
        top = os.path.join(work, "nccl-tests-%s" % version)
        os.makedirs(top)
        with open(os.path.join(top, "Makefile"), "w") as handle:
            handle.write(STANDIN_MAKEFILE)
        with open(os.path.join(top, "all_reduce_perf.sh"), "w") as handle:
            handle.write(STANDIN_ALL_REDUCE)
        subprocess.run(["tar", "-C", work, "-czf", path + ".tmp", "nccl-tests-%s" % version], check=True)
        os.replace(path + ".tmp", path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return path
