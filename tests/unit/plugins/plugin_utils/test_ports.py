"""The port decision of a launch (given, kept from the running job, or free), as the job role takes it."""

from unittest import mock

import pytest

from ansible.playbook.task import Task

from ansible_collections.gpufleet.cluster.plugins.action.job_nodes import ActionModule
from ansible_collections.gpufleet.cluster.plugins.modules import job_nodes
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import action_args
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control.ports import job_ports as decide

FREE = {"free_port": 41000, "free_ports": [41001, 41002], "job": {"running": False}}
RUNNING = {"free_port": 41000, "free_ports": [41001, 41002],
           "job": {"running": True, "master_port": 29500, "restart_ports": [29501, 29502]}}


def test_a_given_port_wins_and_the_relaunch_ports_are_free_ones():
    assert decide(29400, FREE, False) == {"master_port": 29400, "restart_ports": [41001, 41002]}


def test_a_running_job_keeps_its_ports_so_the_launch_is_a_no_op():
    assert decide(None, RUNNING, False) == {"master_port": 29500, "restart_ports": [29501, 29502]}


def test_a_forced_relaunch_takes_free_ports():
    assert decide(None, RUNNING, True) == {"master_port": 41000, "restart_ports": [41001, 41002]}


def test_nothing_running_takes_the_masters_free_ports():
    assert decide(None, FREE, False) == {"master_port": 41000, "restart_ports": [41001, 41002]}
    assert decide(None, {"free_port": 41000, "job": {}}, False) == {"master_port": 41000, "restart_ports": []}


def test_a_running_job_without_relaunch_ports_gets_free_ones():
    probe = dict(RUNNING, job={"running": True, "master_port": 29500})
    assert decide(None, probe, False) == {"master_port": 29500, "restart_ports": [41001, 41002]}


def job_ports(given, probe, force):
    """The decision with force read as the role passes it to the job_nodes action (a word), then validated."""
    task = Task()
    task.args = {"plan": {"hosts": []}, "force": force}
    action = ActionModule(task, mock.Mock(), mock.Mock(), loader=None, templar=None, shared_loader_obj=None)
    return decide(given, probe, action_args.validated(action, job_nodes.DOCUMENTATION)["force"])


def test_the_action_reads_force_as_the_role_passes_it():
    assert job_ports(None, RUNNING, "true")["master_port"] == 41000
    assert job_ports(None, RUNNING, "false")["master_port"] == 29500


# The port check's reports (module_utils/_job/port_check.py) as the controller reads them: which node, port and protocol.
from ansible_collections.gpufleet.cluster.plugins.filter.port_problems import port_problems  # noqa: E402

LISTENED = {"node0": {"udp_error": "", "tcp_error": ""}, "node1": {"udp_error": ""}, "node2": {"udp_error": ""}}
PROBED_OK = {"node0": {"udp_unanswered": [], "tcp_error": ""},
             "node1": {"udp_unanswered": [], "tcp_error": ""},
             "node2": {"udp_unanswered": [], "tcp_error": ""}}


def test_every_port_answered_is_no_problem():
    assert port_problems(LISTENED, PROBED_OK, "node0", 29500) == {}


def test_a_node_whose_udp_port_answers_nobody_is_named_with_the_nodes_it_did_not_answer_and_the_rule():
    probed = dict(PROBED_OK, node0={"udp_unanswered": ["node2"], "tcp_error": ""},
                  node1={"udp_unanswered": ["node2"], "tcp_error": ""})
    problems = port_problems(LISTENED, probed, "node0", 29500)
    assert list(problems) == ["node2"]
    assert problems["node2"] == (
        "node2: UDP port 29500 (the supervisors' heartbeats) does not answer node0, node1; open it in the node's "
        "firewall, e.g. firewall-cmd --permanent --add-port=29500/udp && firewall-cmd --reload, or iptables -I INPUT "
        "-p udp --dport 29500 -j ACCEPT")


def test_a_master_whose_tcp_port_drops_connections_is_named_with_who_could_not_connect():
    probed = dict(PROBED_OK, node1={"udp_unanswered": [], "tcp_error": "no answer within 3 s (the packets are dropped)"},
                  node2={"udp_unanswered": [], "tcp_error": "no answer within 3 s (the packets are dropped)"})
    problems = port_problems(LISTENED, probed, "node0", 29500)
    assert list(problems) == ["node0"]
    assert problems["node0"].startswith(
        "node0: TCP port 29500 (the rendezvous) on the master does not accept connections from node1 (no answer "
        "within 3 s (the packets are dropped)), node2 (")
    assert "firewall-cmd --permanent --add-port=29500/tcp" in problems["node0"]


def test_a_port_taken_on_a_node_says_what_to_do_rather_than_blame_a_firewall():
    listened = dict(LISTENED, node1={"udp_error": "[Errno 98] Address already in use"})
    probed = dict(PROBED_OK, node0={"udp_unanswered": ["node1"], "tcp_error": ""})
    problems = port_problems(listened, probed, "node0", 29500)
    assert problems == {"node1": "node1: UDP port 29500 (the supervisors' heartbeats) cannot be used on the node: "
                                 "[Errno 98] Address already in use; omit master_port to have a free port chosen, "
                                 "or name another"}
    listened = dict(LISTENED, node0={"udp_error": "", "tcp_error": "[Errno 98] Address already in use"})
    assert "TCP port 29500 (the rendezvous) cannot be used on the master" in port_problems(
        listened, PROBED_OK, "node0", 29500)["node0"]


def test_both_protocols_blocked_name_both_nodes_once_each():
    probed = {"node0": {"udp_unanswered": ["node1"], "tcp_error": ""},
              "node1": {"udp_unanswered": [], "tcp_error": "ECONNREFUSED (Connection refused)"},
              "node2": {"udp_unanswered": ["node1"], "tcp_error": ""}}
    problems = port_problems(LISTENED, probed, "node0", "29500")
    assert sorted(problems) == ["node0", "node1"]
    assert "UDP port 29500" in problems["node1"] and "TCP port 29500" in problems["node0"]


def test_reports_of_skipped_or_missing_hosts_are_read_as_empty():
    assert port_problems({"node0": {"skipped": True}}, {"node0": {"skipped": True}}, "node0", 29500) == {}
    assert port_problems(None, None, "node0", 29500) == {}


# --- a remembered pass (port_check=remembered) ----------------------------------------------------------------------

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control.ports import remembered_pass  # noqa: E402

NODES = [["node0", "192.0.2.10"], ["node1", "192.0.2.11"], ["node2", "192.0.2.12"]]


def memories(nodes=None, port=29517, master="node0", age=60.0, tcp=True, hosts=("node0", "node1", "node2")):
    return {host: {"%s:%d" % (host, port): {"host": host, "port": port, "nodes": nodes or NODES, "master": master,
                                            "tcp": tcp, "age_s": age}} for host in hosts}


def test_a_pass_every_node_remembers_for_these_nodes_port_and_master_is_trusted():
    assert remembered_pass(memories(), NODES, "node0", 29517, 3600) == ""


@pytest.mark.parametrize("changes, needle", [
    ({"hosts": ("node0", "node1")}, "node2 remembers no pass on port 29517"),
    ({"port": 29600}, "node0 remembers no pass on port 29517"),
    ({"nodes": NODES[:2]}, "node0 remembers a pass on port 29517 for other nodes"),  # a node added since
    ({"nodes": NODES + [["node3", "192.0.2.13"]]}, "for other nodes"),  # a node removed since
    ({"nodes": [NODES[1], NODES[0], NODES[2]]}, "for other nodes"),  # another rank order
    ({"nodes": [NODES[0], ["node1", "192.0.2.99"], NODES[2]]}, "for other nodes"),  # readdressed
    ({"master": "node1"}, "for other nodes"),
    ({"age": 3601.0}, "node0's pass on port 29517 is 3601.0 s old (port_check_ttl_s=3600)"),
    ({"age": -5.0}, "s old"),
    ({"tcp": False}, "node1's pass on port 29517 did not try the master's TCP port"),
])
def test_a_pass_for_other_nodes_another_port_or_past_the_ttl_is_never_trusted(changes, needle):
    assert needle in remembered_pass(memories(**changes), NODES, "node0", 29517, 3600)


def test_a_record_of_another_host_on_the_same_machine_does_not_answer_for_this_one():
    shared = memories()
    shared["node2"] = dict(shared["node1"])  # node2's probe removed its record; node1's is in the same file
    assert "node2 remembers no pass on port 29517" in remembered_pass(shared, NODES, "node0", 29517, 3600)


def test_a_pass_without_the_tcp_check_serves_a_launch_without_a_rendezvous():
    assert remembered_pass(memories(tcp=False), NODES, "node0", 29517, 3600, tcp=False) == ""
    assert remembered_pass(memories(), NODES, "node0", 29517, 0) != ""  # a TTL of 0 trusts nothing
