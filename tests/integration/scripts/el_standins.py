"""Stand-in rpm and dnf for tests/integration/playbooks/el_node.yml: what an EL node's package tools answer, from
files in $GPUFLEET_TEST_EL_DIR: "installed" (NAME<TAB>VERSION-RELEASE a line) for `rpm -q --qf`, "available" (one
NAME-VERSION-RELEASE.ARCH a line, what the enabled repositories carry) for `dnf repoquery --qf %{name} SPEC...`;
every dnf command is recorded in "dnf.log". rpm's "package NAME is not installed" is rpm's own line for a name it
does not have (rpm(8), -q). They check the roles' commands, not rpm's or dnf's work."""

import os
import sys

RPM = r'''#!/usr/bin/python3
import os, sys
folder = os.environ["GPUFLEET_TEST_EL_DIR"]
installed = dict(line.rstrip("\n").split("\t") for line in open(os.path.join(folder, "installed")) if "\t" in line)
args = sys.argv[1:]
if args[:1] != ["-q"] or "--qf" not in args:
    sys.exit("stand-in rpm: %s" % " ".join(args))
code = 0
for name in args[args.index("--qf") + 2:]:
    if name in installed:
        sys.stdout.write("%s\t%s\n" % (name, installed[name]))
    else:
        sys.stdout.write("package %s is not installed\n" % name)
        code = 1
sys.exit(code)
'''
DNF = r'''#!/usr/bin/python3
import os, sys
folder = os.environ["GPUFLEET_TEST_EL_DIR"]
args = sys.argv[1:]
with open(os.path.join(folder, "dnf.log"), "a") as log:
    log.write(" ".join(args) + "\n")
if "repoquery" in args:
    available = open(os.path.join(folder, "available")).read().split()
    for spec in args[args.index("--qf") + 2:]:
        if spec in available:
            print(spec.rsplit("-", 2)[0])
'''


def install(folder: str, installed: dict, available: list | None = None) -> None:
    """rpm and dnf stand-ins in folder/bin, answering for installed ({name: version-release}) and available."""
    os.makedirs(os.path.join(folder, "bin"), exist_ok=True)
    for name, text in (("rpm", RPM), ("dnf", DNF)):
        path = os.path.join(folder, "bin", name)
        with open(path, "w") as handle:
            handle.write(text.replace("/usr/bin/python3", sys.executable, 1))
        os.chmod(path, 0o755)
    with open(os.path.join(folder, "installed"), "w") as handle:
        handle.writelines("%s\t%s\n" % item for item in installed.items())
    with open(os.path.join(folder, "available"), "w") as handle:
        handle.writelines("%s\n" % spec for spec in available or [])


def fake_gpu(folder: str) -> None:
    """A sysfs tree (folder/sys) with one H100 (vendor 0x10de, 3D controller class, device 0x2330)."""
    device = os.path.join(folder, "sys", "bus", "pci", "devices", "0000:18:00.0")
    os.makedirs(device, exist_ok=True)
    for name, value in (("vendor", "0x10de"), ("class", "0x030200"), ("device", "0x2330")):
        with open(os.path.join(device, name), "w") as handle:
            handle.write(value + "\n")
