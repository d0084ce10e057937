#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_metrics
short_description: Write gpufleet's facts of a node for Prometheus's node exporter (its textfile collector)
version_added: 0.1.0
description:
  - Writes each of O(files), Prometheus's text format, in the node exporter's textfile folder O(dir), whole (under
    a name the collector does not read, then renamed into place), readable by all. A file whose content is empty
    is left as it is.
  - Where O(dir) does not exist (no node exporter on the node; C(monitor.yml) sets one up), writes nothing and says
    so in RV(msg). A file that cannot be written is a warning, not a failure (a health check is not failed for
    its metrics).
  - What the content says is decided on the controller, in C(plugins/plugin_utils/_control/standing_metrics.py)
    (each node's standing in the fleet and its last health check, which C(health.yml) and C(fleet.yml)'s release
    write).
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Says whether the file would change, and writes nothing.
  diff_mode:
    support: full
  platform:
    platforms: posix
options:
  dir:
    description: The node exporter's textfile folder (C(gpufleet_metrics_dir)).
    type: path
    required: true
  files:
    description: The metrics to write, by file name (each ending in C(.prom)), in Prometheus's text format.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Tell Prometheus the node's standing
  gpufleet.cluster.node_metrics:
    dir: /var/lib/prometheus/node-exporter
    files: "{{ __health.metrics[inventory_hostname] }}"
"""

RETURN = r"""
written:
  description: The files written (or, in check mode, that would be), each a path; none where the folder does not exist.
  returned: always
  type: list
  elements: str
msg:
  description: What was done, in a sentence.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.job_metrics import replace_textfile


def _current(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


def main() -> None:
    module = AnsibleModule(argument_spec={"dir": {"type": "path", "required": True},
                                          "files": {"type": "dict", "required": True}},
                           supports_check_mode=True)
    folder, files = module.params["dir"], module.params["files"]
    wrong = sorted(name for name in files if "/" in name or not name.endswith(".prom"))
    if wrong:
        module.fail_json(msg="files: %s: give file names ending in .prom (the textfile collector reads only those)"
                         % ", ".join(wrong))
    if not os.path.isdir(folder):
        module.exit_json(changed=False, written=[], msg="%s does not exist: no node exporter here to read %s "
                         "(monitor.yml sets one up)" % (folder, ", ".join(sorted(files))))
    written, before, after, problems = [], [], [], []
    for name, content in sorted(files.items()):
        path = os.path.join(folder, name)
        current = _current(path)
        if not content or current == content:
            continue
        if not module.check_mode:
            try:
                replace_textfile(path, str(content))
            except OSError as exc:
                problems.append("%s not written: %s (monitor.yml's node_exporter role lets "
                                "node_exporter_metrics_users write %s)" % (path, exc.strerror, folder))
                continue
        written.append(path)
        before.append("# %s\n%s" % (path, current or ""))
        after.append("# %s\n%s" % (path, content))
    for problem in problems:
        module.warn(problem)
    module.exit_json(changed=bool(written), written=written, diff={"before": "".join(before), "after": "".join(after)},
                     msg="; ".join((["written: %s" % ", ".join(written)] if written else []) + problems) or "unchanged")


if __name__ == "__main__":
    main()
