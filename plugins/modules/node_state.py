#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_state
short_description: Read what a role manages on a node at once, and say how it differs from what the role wants
version_added: 0.1.0
description:
  - One module run reads the packages (installed, version, held), files (kind, content digest, mode, owner,
    group), blocks that C(ansible.builtin.blockinfile) manages, services (enabled, active) and kernel modules
    (loaded) a role manages, and compares them with what the role wants. It returns each difference as a sentence
    in RV(drift). Changes nothing, in check mode too.
  - A role runs its install and configure tasks only when RV(drift) is not empty, so that a re-run on a node that
    is already right costs the controller one task for the role instead of one per package, file and service.
    Those tasks stay the one home of every change, and of what check mode and C(--diff) report.
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.cluster.attributes.read_only
options:
  packages:
    description:
      - Packages that must be installed, each C(name), or C(name=version) for a version that starts with that
        text (C(2.21.5) matches C(2.21.5-1+cuda12.4)).
    type: list
    elements: str
    default: []
  absent_packages:
    description: Packages that must not be installed.
    type: list
    elements: str
    default: []
  held:
    description:
      - Packages that must be installed and held (apt-mark hold on apt; the versionlock list on dnf).
    type: list
    elements: str
    default: []
  all_packages:
    description:
      - Also read every installed package (one C(dpkg-query -W) or C(rpm -qa)), and return them as RV(installed),
        in the shape of M(ansible.builtin.package_facts)' C(packages) (a name maps to a list of its versions),
        without the package manager's Python bindings and without opening its cache.
      - They are returned as a value to register, not as a fact, because Ansible copies every fact of a host each
        time it computes that host's variables (each task, and each read of C(hostvars)); with hundreds of packages
        that copy was about a tenth of a provision re-run's controller CPU.
    type: bool
    default: false
  package_manager:
    description: How packages are read, C(apt) (dpkg-query) or C(dnf) (rpm, and dnf's versionlock list).
    type: str
    choices: [apt, dnf]
    default: apt
  files:
    description:
      - Files as they must be. Each has C(path), and optionally C(state) (C(file), the default, C(directory),
        C(link) or C(absent)), C(content) (the whole text, compared by its SHA-1 as Ansible's copy and template do) or
        C(sha1), C(mode), C(owner) and C(group); a link's C(src), what it must point at (the link's own text, as
        C(ansible.builtin.file) with C(state=link) writes it). What is not given is not compared.
    type: list
    elements: dict
    default: []
  blocks:
    description:
      - Blocks that C(ansible.builtin.blockinfile) manages, each C(path), C(marker) (with C({mark})) and C(block),
        the text between the markers (an empty block must not be there).
    type: list
    elements: dict
    default: []
  read:
    description:
      - Small files to return as they are, by a name of the caller's choosing (C(user_key), C(checked)), each read
        up to 64 KiB; RV(contents) has their text, null where a file is missing. Reading is never a difference.
      - Paths here and in O(files) and O(blocks) may start with C(~user).
    type: dict
    default: {}
  grep:
    description:
      - A fixed string, C(text), to look for in C(paths), files or folders searched through (as C(grep -rsF));
        RV(grep) has the lines that contain it, by file. Reading is never a difference.
    type: dict
  lines_absent:
    description: Lines that must not be in a file, each C(path) and C(regexp) (a Python regular expression searched
      in each line, as C(ansible.builtin.lineinfile) with C(state=absent) removes them).
    type: list
    elements: dict
    default: []
  resolve:
    description:
      - Names and the IPv4 address each must resolve to first on the node (as C(getent ahostsv4 NAME) gives it).
    type: dict
    default: {}
  python_env:
    description:
      - A virtual environment, C(path), and the packages it must hold, C(packages), each pinned as
        C(NAME[EXTRAS]==VERSION); read from its C(*.dist-info) folders, without starting its Python. Every
        distribution found is returned in RV(python_packages).
    type: dict
  services:
    description: Services as they must be, each C(name) and optionally C(enabled) (bool) and C(state) (C(started)
      or C(stopped)).
    type: list
    elements: dict
    default: []
  kernel_modules:
    description: Kernel modules that must be loaded (in C(/proc/modules)).
    type: list
    elements: str
    default: []
  reads:
    description:
      - Several reads in the same run, by a name of the caller's choosing (a role's), each a dict of the options
        above but O(all_packages) and O(reads), checked as they are; RV(reads) has each one's result by its name, as
        the module returns it for its own options. A null read is not made (a role that does not apply to the node).
      - provision.yml reads the state of every role after Fabric Manager on a node this way, in one run, before any
        of those roles changes anything (the roles' own reads are the same dicts, in their vars).
      - The packages of all the reads are read with one command.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Read what the mpi role manages
  gpufleet.cluster.node_state:
    packages: [openmpi-bin, libopenmpi-dev]
    files:
      - path: /etc/gpufleet/hostfile
        content: "{{ lookup('ansible.builtin.template', 'hostfile.j2') }}"
        mode: "0644"
  register: __mpi_state

- name: Install and configure only where the node differs
  ansible.builtin.include_tasks: converge.yml
  when: __mpi_state.drift | length > 0
"""

RETURN = r"""
drift:
  description: Each difference from what was asked, as a sentence naming the package, file or service; empty when
    the node is as the role wants it.
  returned: always
  type: list
  elements: str
  sample: ["package openmpi-bin is not installed", "/etc/gpufleet/hostfile differs from what the role writes"]
python_packages:
  description: With O(python_env), each distribution in the environment (its PEP 503 name) and its version; null
    when there is no environment at its path.
  returned: when O(python_env) is given
  type: dict
  sample: {"torch": "2.13.0+cpu", "numpy": "2.3.5"}
contents:
  description: The text of each file of O(read), by its name; null where the file is missing.
  returned: always
  type: dict
  sample: {"host_key": "ssh-ed25519 AAAAC3Nz... root@node0\n", "checked": null}
grep:
  description: With O(grep), the lines that contain its text, by file (each line ending with a newline).
  returned: when O(grep) is given
  type: dict
  sample: {"/etc/apt/sources.list.d/cuda-debian12-x86_64.list": "deb [signed-by=...] https://.../x86_64/ /\n"}
installed:
  description: With O(all_packages), every installed package, as M(ansible.builtin.package_facts)' C(packages).
  returned: when O(all_packages) is true
  type: dict
  sample: {"openmpi-bin": [{"name": "openmpi-bin", "version": "4.1.4-3+b1", "source": "apt"}]}
packages:
  description: The installed ones of the packages asked about, each with C(version) and C(held).
  returned: always
  type: dict
  sample: {"openmpi-bin": {"version": "4.1.4-3+b1", "held": false}}
reads:
  description: With O(reads), each read's result by its name (RV(drift), RV(packages), RV(contents), and
    RV(grep) and RV(python_packages) where asked for).
  returned: when O(reads) is given
  type: dict
  sample: {"mpi": {"drift": [], "packages": {"openmpi-bin": {"version": "4.1.4-3+b1", "held": false}},
                   "contents": {}}}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.gpufleet.cluster.plugins.module_utils._node import node_state, packages

LIST_OF_STR = {"type": "list", "elements": "str", "default": []}
LIST_OF_DICT = {"type": "list", "elements": "dict", "default": []}
READ_LIMIT = 64 * 1024
# The options of one read: the module's own, and each of O(reads).
READ_SPEC = {"packages": LIST_OF_STR, "absent_packages": LIST_OF_STR, "held": LIST_OF_STR,
             "package_manager": {"type": "str", "choices": ["apt", "dnf"], "default": "apt"},
             "files": LIST_OF_DICT, "blocks": LIST_OF_DICT, "lines_absent": LIST_OF_DICT,
             "resolve": {"type": "dict", "default": {}}, "python_env": {"type": "dict"},
             "grep": {"type": "dict"},
             "read": {"type": "dict", "default": {}},
             "services": LIST_OF_DICT,
             "kernel_modules": LIST_OF_STR}


def package_names(params: dict) -> list[str]:
    """The packages a read asks about."""
    return sorted(set(spec.partition("=")[0] for spec in params["packages"])
                  | set(params["absent_packages"]) | set(params["held"]))


def drift_of(params: dict, run: node_state.Run, found: dict | None = None) -> tuple[list[str], dict]:
    """Every difference between the node and params, and what was read (packages, python_packages). found: the
    packages already read (reads_of reads those of every read at once)."""
    names = package_names(params)
    installed = ({name: found[name] for name in names if name in found} if found is not None
                 else packages.read_packages(names, params["package_manager"], run))
    drift = packages.package_drift(params["packages"], params["absent_packages"], params["held"], installed)
    for want in params["files"]:
        drift.extend(node_state.file_drift(want, node_state.read_file(want["path"])))
    for want in params["blocks"]:
        drift.extend(node_state.block_drift(want, node_state.read_text(want["path"])))
    for want in params["lines_absent"]:
        drift.extend(node_state.line_drift(want, node_state.read_text(want["path"])))
    drift.extend(node_state.resolve_drift({str(name): str(address) for name, address in params["resolve"].items()}))
    if params["services"]:
        units = node_state.read_services([want["name"] for want in params["services"]], run)
        for want in params["services"]:
            drift.extend(node_state.service_drift(want, units))
    if params["kernel_modules"]:
        loaded = node_state.loaded_modules(node_state.read_text("/proc/modules"))
        drift.extend(node_state.module_drift(params["kernel_modules"], loaded))
    read: dict = {"packages": installed,
                  "contents": {name: node_state.read_text(path, READ_LIMIT) for name, path in params["read"].items()}}
    if params.get("grep"):
        grep = params["grep"]
        read["grep"] = node_state.grep_fixed(str(grep["text"]), [str(path) for path in grep.get("paths") or []])
    if params.get("python_env"):
        venv = params["python_env"]["path"]
        read["python_packages"] = node_state.venv_versions(venv)
        drift.extend(node_state.pip_drift(venv, params["python_env"].get("packages") or [], read["python_packages"]))
    return drift, read


def checked_reads(reads: dict) -> dict[str, dict]:
    """Each read of O(reads) (null ones left out) checked against READ_SPEC, with its defaults; ValueError naming
    the read and the option that is wrong."""
    checked = {}
    for name, options in reads.items():
        if options is None:
            continue
        if not isinstance(options, dict):
            raise ValueError("reads.%s must be a dict of node_state's options, not %r" % (name, options))
        result = ArgumentSpecValidator(READ_SPEC).validate(options)
        if result.error_messages:
            raise ValueError("reads.%s: %s" % (name, "; ".join(result.error_messages)))
        checked[str(name)] = result.validated_parameters
    return checked


def reads_of(reads: dict[str, dict], run: node_state.Run) -> dict[str, dict]:
    """Each checked read's result by its name: the packages of all of them read with one command per package
    manager."""
    found: dict[str, dict] = {}
    for kind in sorted(set(params["package_manager"] for params in reads.values())):
        names = sorted(set(name for params in reads.values() if params["package_manager"] == kind
                           for name in package_names(params)))
        found[kind] = packages.read_packages(names, kind, run)
    results = {}
    for name, params in reads.items():
        drift, read = drift_of(params, run, found[params["package_manager"]])
        results[name] = dict(read, drift=drift)
    return results


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(READ_SPEC, all_packages={"type": "bool", "default": False},
                           reads={"type": "dict", "default": {}}),
        supports_check_mode=True,
    )

    def run(argv: list) -> tuple[int, str, str]:
        return module.run_command(argv, environ_update={"LC_ALL": "C"})

    try:
        reads = checked_reads(module.params["reads"])
    except ValueError as error:
        module.fail_json(msg=str(error))
    drift, read = drift_of(module.params, run)
    if reads:
        read["reads"] = reads_of(reads, run)
    if module.params["all_packages"]:
        kind = module.params["package_manager"]
        read["installed"] = packages.package_facts(packages.read_packages(None, kind, run), kind)
    module.exit_json(changed=False, drift=drift, **read)


if __name__ == "__main__":
    main()
