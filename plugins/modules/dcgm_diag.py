#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dcgm_diag
short_description: Run DCGM's diagnostic on a node and return one result per GPU
version_added: 0.1.0
description:
  - Where DCGM's C(dcgmi) is installed, runs C(dcgmi diag -r LEVEL -j) (through the node's C(nvidia-dcgm) host
    engine) and returns each GPU's result (C(Pass), C(Warn), C(Fail), C(Skip)) with the tests it did not pass and
    DCGM's own messages. C(dcgmi) writes a warning as C(Fail) in its JSON, so a result is C(Warn) where every one of its
    errors has a severity after which DCGM says the GPU can still work (MONITOR or CONFIG, as for persistence mode
    disabled), and C(Fail) for any other (ISOLATE, RESET, TRIAGE, or none given). Where C(dcgmi) is not installed,
    returns C(present=false) and runs nothing.
  - Level 1 takes seconds and does not load the GPUs (deployment checks of libraries, permissions, persistence
    mode, page retirement and inforom); levels 2 to 4 stress them for minutes to hours and must not run beside a job.
  - Used by C(verify.yml), whose M(gpufleet.cluster.stack_report) shows the results and fails naming the node and
    GPU that did not pass.
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.cluster.attributes.read_only
options:
  level:
    description: The diagnostic level (C(dcgmi diag -r)).
    type: int
    default: 1
    choices: [1, 2, 3, 4]
  timeout:
    description:
      - Seconds the diagnostic may take, given to C(dcgmi diag --timeout), which stops the diagnostic itself when they
        run out and reports it as not finished. A C(dcgmi) still running 30 s later is sent SIGTERM (on which it stops
        the diagnostic it launched), then SIGKILL.
    type: int
    default: 600
"""

EXAMPLES = r"""
- name: DCGM's quick diagnostic
  gpufleet.cluster.dcgm_diag:
    level: 1
  register: __verify_dcgm
"""

RETURN = r"""
present:
  description: Whether C(dcgmi) is installed on the node.
  returned: always
  type: bool
level:
  description: The level run.
  returned: always
  type: int
version:
  description: DCGM's version, from the result.
  returned: always
  type: str
gpus:
  description: One entry per GPU (C(gpu) is DCGM's GPU id, null for a result that names no GPU).
  returned: always
  type: list
  elements: dict
  sample: [{gpu: 1, serial: "1650123000002", result: Fail, failed: ["software (fail: RESET)"],
            messages: ["Page Retirement/Row Remap: A pending retired page has been detected in GPU 1."]}]
error:
  description: Why there is no result (C(dcgmi) not answering, no host engine, no JSON), or null.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils._node import dcgm_diag


def main() -> None:
    module = AnsibleModule(
        argument_spec={"level": {"type": "int", "default": 1, "choices": [1, 2, 3, 4]},
                       "timeout": {"type": "int", "default": 600}},
        supports_check_mode=True,
    )
    level = module.params["level"]
    dcgmi = module.get_bin_path("dcgmi", opt_dirs=["/usr/bin", "/usr/local/bin"])
    if not dcgmi:
        module.exit_json(changed=False, present=False, level=level, version=None, gpus=[], error=None)
    result = dcgm_diag.run(dcgmi, level, module.params["timeout"])
    module.exit_json(changed=False, present=True, level=level, **result)


if __name__ == "__main__":
    main()
