"""The ssh_mesh role's view of the mesh (plugin_utils/_provision/ssh_mesh.py, filter gpufleet.cluster.ssh_mesh_view)
against the 52-line Jinja program the role computed it with before (REFERENCE, verbatim but for its first line, which
took the nodes from the cluster_nodes filter): the same peers, blocks, fingerprint and verdicts, rendered by Ansible's
own templating over the same hosts' variables."""

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.gpufleet.cluster.plugins.filter.ssh_mesh_view import ssh_mesh_view
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._provision.ssh_mesh import fingerprint

REFERENCE = """{%- set nodes = mesh_nodes -%}
{%- set hosts = nodes | map(attribute='host') | list -%}
{%- set peers = [] -%}
{%- set hostnames = [] -%}
{%- set reads = {} -%}
{%- set user_keys = {} -%}
{%- set ns = namespace(keys_everywhere=true, drift_free=true, authorized='', known_hosts='', config='') -%}
{%- for node in nodes -%}
{%-   set found = hostvars[node.host] -%}
{%-   set hostname = found['ansible_facts']['hostname'] | default(node.host) -%}
{%-   set names = [node.host, hostname, node.ip] | unique -%}
{%-   set port = found['gpufleet_ssh_port'] | default(found['ansible_port'] | default(22)) | int -%}
{%-   set known_as = names if port == 22 else names | map('regex_replace', '^(.*)$', '[\\\\1]:' ~ port) | list -%}
{%-   set _ = hostnames.append(hostname) -%}
{%-   set _ = peers.append({'host': node.host, 'ip': node.ip, 'names': names, 'port': port, 'known_as': known_as}) -%}
{%-   set first = found['_gpufleet_first_read'] | default({}) -%}
{%-   set read = (found['__ssh_mesh_read'] if found['__ssh_mesh_read'].contents is defined
                  else first).contents | default({}, true) -%}
{%-   set made = found['__ssh_mesh_user'] | default({}) -%}
{%-   set user_key = (made.ssh_public_key | default(read.user_key, true) | default('', true)) | trim -%}
{%-   set host_key = read.host_key | default('', true) | trim -%}
{%-   set installed = first.installed | default({}, true) -%}
{%-   set _ = reads.update({node.host: read}) -%}
{%-   set _ = user_keys.update({node.host: user_key}) -%}
{%-   set ns.authorized = ns.authorized ~ user_key ~ '\n' -%}
{%-   set ns.known_hosts = ns.known_hosts ~ known_as | join(',') ~ ' ' ~ host_key.split()[:2] | join(' ') ~ '\n' -%}
{%-   set ns.config = ns.config ~ 'Host ' ~ names | join(' ') ~ '\n    HostName ' ~ node.ip ~ '\n    Port ' ~ port
                      ~ '\n    User ' ~ ssh_mesh_user ~ '\n' -%}
{%-   set ns.keys_everywhere = ns.keys_everywhere and (read.user_key | default('', true) | length > 0)
                               and ('openssh-client' in installed or 'openssh-clients' in installed) -%}
{%-   set ns.drift_free = ns.drift_free
                          and (found['_gpufleet_read'].reads.ssh_mesh.drift | default(['not read'])) | length == 0 -%}
{%- endfor -%}
{%- set fingerprint = ([peers] + (hosts | map('extract', user_keys) | list)
                       + (hosts | map('extract', reads) | map(attribute='host_key') | map('default', '', true)
                          | map('b64encode') | list)) | to_json | hash('sha256') -%}
{%- set blocks = [] -%}
{%- set files = [] -%}
{%- for file, text in [('authorized_keys', ns.authorized), ('known_hosts', ns.known_hosts), ('config', ns.config)] -%}
{%-   set path = _ssh_mesh_home ~ '/.ssh/' ~ file -%}
{%-   set _ = blocks.append({'path': path, 'marker': '# {mark} gpufleet ssh_mesh', 'block': text}) -%}
{%-   set _ = files.append({'path': path, 'owner': ssh_mesh_user, 'mode': '0600'}) -%}
{%- endfor -%}
{{ {'hosts': hosts, 'targets': hosts + hostnames + (nodes | map(attribute='ip') | list), 'reads': reads,
    'user_keys': user_keys, 'fingerprint': fingerprint, 'blocks': blocks,
    'wants': {'files': files, 'blocks': blocks},
    'keys_everywhere': ns.keys_everywhere,
    'settled': ns.keys_everywhere and ns.drift_free
               and (not ssh_mesh_verify or hosts | map('extract', reads) | map(attribute='checked')
                                           | map('default', '', true) | map('trim')
                                           | reject('equalto', fingerprint | trim) | list | length == 0)} }}"""

KEY0 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK0 root@node0"
KEY1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK1 root@node1"
HOST0 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH0 root@node0\n"
HOST1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH1 root@node1\n"
CLIENT = {"openssh-client": {"version": "1:9.6p1-3ubuntu13"}}


def hostvars_of(case):
    node0 = {"gpufleet_cluster_address": "192.0.2.10", "ansible_facts": {"hostname": "gpu-a"},
             "_gpufleet_first_read": {"contents": {"user_key": KEY0, "host_key": HOST0, "checked": ""},
                                      "installed": CLIENT},
             "_gpufleet_read": {"reads": {"ssh_mesh": {"drift": []}}}}
    node1 = {"ansible_host": "192.0.2.11", "ansible_port": 2222, "ansible_facts": {"hostname": "gpu-b"},
             "_gpufleet_first_read": {"contents": {"user_key": "", "host_key": HOST1}, "installed": {}},
             "__ssh_mesh_user": {"ssh_public_key": KEY1 + "\n"},
             "_gpufleet_read": {"reads": {"ssh_mesh": {"drift": ["a block differs"]}}}}
    if case == "read again":  # node.yml's read, after keys.yml made node1's key and the mesh was checked
        mesh = fingerprint([], [], [])
        node0["__ssh_mesh_read"] = {"contents": {"user_key": KEY0, "host_key": HOST0, "checked": mesh}}
        node1["__ssh_mesh_read"] = {"contents": {"user_key": KEY1, "host_key": HOST1, "checked": mesh}}
        node1["gpufleet_ssh_port"] = 22
    if case == "settled":
        node1 = dict(node0, gpufleet_cluster_address="192.0.2.11", ansible_facts={"hostname": "gpu-b"})
    if case == "no facts":
        del node0["ansible_facts"], node1["_gpufleet_read"]
        node0["__ssh_mesh_read"] = {"skipped": True}
    return {"node0": node0, "node1": node1}


def reference(hostvars, verify):
    variables = {"hostvars": hostvars, "mesh_nodes": [{"host": "node0", "ip": hostvars["node0"].get(
        "gpufleet_cluster_address", "192.0.2.10")}, {"host": "node1", "ip": hostvars["node1"].get(
            "gpufleet_cluster_address", hostvars["node1"].get("ansible_host"))}],
        "ssh_mesh_user": "root", "_ssh_mesh_home": "~root", "ssh_mesh_verify": verify}
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(REFERENCE))


@pytest.mark.parametrize("case", ["first run", "read again", "settled", "no facts"])
@pytest.mark.parametrize("verify", [True, False])
def test_the_view_is_what_the_roles_jinja_made(case, verify):
    hostvars = hostvars_of(case)
    view = ssh_mesh_view(["node0", "node1"], hostvars, user="root", home="~root", verify=verify)
    assert view == reference(hostvars, verify)


def test_the_blocks_name_every_node_by_every_name_at_its_port():
    view = ssh_mesh_view(["node0", "node1"], hostvars_of("first run"), user="root", home="~root")
    authorized, known_hosts, config = (block["block"] for block in view["blocks"])
    assert authorized == KEY0 + "\n" + KEY1 + "\n"
    assert known_hosts.splitlines() == ["node0,gpu-a,192.0.2.10 " + " ".join(HOST0.split()[:2]),
                                        "[node1]:2222,[gpu-b]:2222,[192.0.2.11]:2222 " + " ".join(HOST1.split()[:2])]
    assert "Host node1 gpu-b 192.0.2.11\n    HostName 192.0.2.11\n    Port 2222\n    User root\n" in config
    assert view["keys_everywhere"] is False and view["settled"] is False  # node1 had no key and no client
