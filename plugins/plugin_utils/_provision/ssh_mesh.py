# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The SSH mesh as every node's variables make it, from one pass over the nodes (role ssh_mesh, through the filter
gpufleet.cluster.ssh_mesh_view). Pure: what each node's variables hold comes in as plain values (MeshNode).

- peers: each node as the mesh reaches it: every name and address (inventory name, short hostname, cluster address)
  and the port its sshd listens on (gpufleet_ssh_port, else the ansible_port Ansible itself uses, else 22);
- targets: every name and address a node may be reached by;
- reads: each node's keys and the mesh it last checked (node.yml's read where it ran, else provision.yml's);
- user_keys: each node's public user key, as keys.yml generated or found it in this run, else as it was read;
- fingerprint: what the mesh is (every peer's names, address and port, every node's user and host key). A node keeps
  the fingerprint of the mesh it last checked; the N x N check runs again only when it differs. It is computed as
  the role's Jinja computed it (`to_json | hash('sha256')` over the peers, the user keys and the host keys in
  base64), so that a fingerprint an earlier version wrote stays valid;
- blocks and wants: the three blocks configure.yml writes (every key authorized, every host key trusted under each of
  its names, every node reachable by each of its names) and the files they go in;
- keys_everywhere: whether provision.yml's first read found the SSH client and the user's key on every node;
- settled: whether the reads found nothing of the role's to change on any node (the mesh is the cluster's).
"""

from __future__ import annotations

import base64
import collections
import hashlib
import json
from typing import Any

# What the view takes of one node's variables: its inventory name and cluster address, its short hostname, its sshd
# port, its keys as read (node.yml's read, else provision.yml's first), the packages the first read found, the user
# key keys.yml made in this run ('' when none), and the drift provision.yml's read found for the role (None: not read).
MeshNode = collections.namedtuple("MeshNode", ("host", "ip", "hostname", "port", "read", "installed", "made_key",
                                               "drift"))
CLIENT_PACKAGES = ("openssh-client", "openssh-clients")


def _peer(node: MeshNode) -> dict[str, Any]:
    names = list(dict.fromkeys([node.host, node.hostname, node.ip]))
    known_as = names if node.port == 22 else ["[%s]:%d" % (name, node.port) for name in names]
    return {"host": node.host, "ip": node.ip, "names": names, "port": node.port, "known_as": known_as}


def fingerprint(peers: list[dict], user_keys: list[str], host_keys: list[str]) -> str:
    """sha256 of the JSON (json.dumps' default form, as Ansible's to_json writes it) of the peers, the user keys and
    the host keys, each host key base64-encoded as read."""
    encoded = [base64.b64encode(key.encode("utf-8")).decode("ascii") for key in host_keys]
    return hashlib.sha256(json.dumps([peers] + user_keys + encoded).encode("utf-8")).hexdigest()


def mesh_view(nodes: list[MeshNode], user: str, home: str, verify: bool) -> dict[str, Any]:
    hosts = [node.host for node in nodes]
    peers = [_peer(node) for node in nodes]
    reads = {node.host: dict(node.read or {}) for node in nodes}
    user_keys = {node.host: (node.made_key or reads[node.host].get("user_key") or "").strip() for node in nodes}
    authorized = known_hosts = config = ""
    keys_everywhere = drift_free = True
    for node, peer in zip(nodes, peers):
        read = reads[node.host]
        host_key = (read.get("host_key") or "").strip()
        authorized += user_keys[node.host] + "\n"
        known_hosts += ",".join(peer["known_as"]) + " " + " ".join(host_key.split()[:2]) + "\n"
        config += "Host %s\n    HostName %s\n    Port %d\n    User %s\n" % (
            " ".join(peer["names"]), node.ip, node.port, user)
        keys_everywhere = keys_everywhere and bool(read.get("user_key")) and any(
            package in (node.installed or {}) for package in CLIENT_PACKAGES)
        drift_free = drift_free and node.drift is not None and len(node.drift) == 0
    printed = fingerprint(peers, [user_keys[host] for host in hosts], [reads[host].get("host_key") or "" for host in hosts])
    blocks, files = [], []
    for name, text in (("authorized_keys", authorized), ("known_hosts", known_hosts), ("config", config)):
        path = "%s/.ssh/%s" % (home, name)
        blocks.append({"path": path, "marker": "# {mark} gpufleet ssh_mesh", "block": text})
        files.append({"path": path, "owner": user, "mode": "0600"})
    checked = all((reads[host].get("checked") or "").strip() == printed.strip() for host in hosts)
    return {"hosts": hosts, "targets": hosts + [node.hostname for node in nodes] + [node.ip for node in nodes],
            "reads": reads, "user_keys": user_keys, "fingerprint": printed, "blocks": blocks,
            "wants": {"files": files, "blocks": blocks}, "keys_everywhere": keys_everywhere,
            "settled": keys_everywhere and drift_free and (not verify or checked)}
