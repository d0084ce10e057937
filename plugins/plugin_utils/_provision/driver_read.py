# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""When an NVIDIA role uses the driver role's read of a node instead of its own: the one rule.

The driver role's preflight reads each node with gpufleet.cluster.nvidia_facts (registered as
``__nvidia_driver_facts``): the GPUs and NVSwitches on the PCI bus, the InfiniBand HCAs, and the installed version of
the driver packages it names. The repository, MPI, nccl-tests, peermem, Fabric Manager, IMEX and DCGM roles need some
of the same facts; where the driver role read them in the same run they are not read again. Nothing here touches a
node.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping


def covers(read: object, sys_root: object, packages: Iterable[str] = (), driver_moved: bool = False) -> bool:
    """Whether the driver role's read stands for a role's own read of ``sys_root`` and, where ``packages`` are named,
    of the installed version of the first of them: it read the same sysfs, asked for the same packages in the same
    order, and, for a package version, the driver was not installed since (its version may have moved).

    Anything else is not used, and the role reads for itself: no read (the driver role did not run), a skipped task,
    a result without ``read_of`` (from before nvidia_facts said what it read).
    """
    if not isinstance(read, Mapping) or not isinstance(read.get("read_of"), Mapping):
        return False
    read_of = read["read_of"]
    if os.path.normpath(str(read_of.get("sys_root") or "")) != os.path.normpath(str(sys_root or "")):
        return False
    wanted = [str(name) for name in packages or ()]
    if not wanted:
        return True
    return not driver_moved and [str(name) for name in read_of.get("driver_packages") or ()] == wanted
