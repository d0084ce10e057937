"""The port decision of a launch (given, kept from the running job, or free), as the job role takes it."""

from ansible_collections.gpufleet.cluster.plugins.filter.job_ports import job_ports
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.ports import job_ports as decide

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


def test_the_filter_reads_force_as_the_role_passes_it():
    assert job_ports(None, RUNNING, "true")["master_port"] == 41000
    assert job_ports(None, RUNNING, "false")["master_port"] == 29500
