# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""IMEX domains: which nodes share one /etc/nvidia-imex/nodes_config.cfg, checked before anything is changed.

Every IMEX instance of a domain is configured with the addresses of all its nodes, and an instance whose address map
differs from another's fails to initialise (NVIDIA IMEX guide, "Deployment Models", "Constraints"). The nvidia_imex
role writes each node's file from its nvidia_imex_nodes (inventory names, in that order); these rules refuse a list
that cannot make one domain, naming the node, the variable and its value. Nothing here touches a node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._provision import nvidia_packaging

VARIABLE = "nvidia_imex_nodes"


def _names(value: Any) -> list[str] | None:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        return None
    names = list(value)
    return names if all(isinstance(name, str) and name for name in names) else None


def refusal(host: str, branch: Any, listed: Any, inventory: Iterable[str], domains: Mapping[str, Any],
            play_hosts: Iterable[str]) -> str:
    """Why IMEX cannot be set up on host as asked, or '' when it can.

    branch: the driver branch (IMEX ships from 550); listed: the host's nvidia_imex_nodes; inventory: every inventory
    hostname; domains: the nvidia_imex_nodes of each node of this play where IMEX is set up; play_hosts: the nodes of
    this play (a listed node in the play where IMEX is not set up could never join the domain)."""
    try:
        if not nvidia_packaging.imex_packages(branch):
            return ("nvidia_imex_branch=%s: NVIDIA ships IMEX from driver branch %d (nvidia-imex-%d); set "
                    "nvidia_driver_branch to %d or later, or nvidia_imex_enabled: false"
                    % (branch, nvidia_packaging.IMEX_FIRST_BRANCH, nvidia_packaging.IMEX_FIRST_BRANCH,
                       nvidia_packaging.IMEX_FIRST_BRANCH))
    except ValueError:
        return "nvidia_imex_branch=%s is not a driver branch (a number such as 580)" % (branch,)
    names = _names(listed)
    if not names:
        return ("%s=%r is not a list of the inventory names of the nodes of this node's NVLink domain"
                % (VARIABLE, listed))
    known = set(inventory)
    outside = [name for name in names if name not in known]
    if outside:
        return ("%s=%s names %s, not in the inventory; list the inventory names of the nodes of this node's NVLink "
                "domain" % (VARIABLE, names, ", ".join(outside)))
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        return "%s=%s names %s more than once" % (VARIABLE, names, ", ".join(twice))
    if host not in names:
        return ("%s=%s leaves out %s itself: each node's list is its own NVLink domain, the node among them"
                % (VARIABLE, names, host))
    in_play = set(play_hosts)
    for other in names:
        if other in domains and _names(domains[other]) != names:
            return ("%s differs between %s (%s) and %s (%s): IMEX fails to start where the nodes of a domain are "
                    "given different address lists; give every node of the domain the same list, in the same order"
                    % (VARIABLE, host, names, other, domains[other]))
        if other in in_play and other not in domains:
            return ("%s=%s names %s, where IMEX is not set up (no GB200/GB300 NVL GPU there, or "
                    "nvidia_imex_enabled: false), so the domain could never form" % (VARIABLE, names, other))
    return ""
