"""Controller-side planning: rank order, addresses, and every input check that must fail before a node is touched."""

import socket

import pytest

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import plan
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control.plan import PlanError


def test_rank_order_is_inventory_order():
    assert plan.order_nodes(["gpu01", "gpu02", "gpu03"], ["gpu03", "gpu01", "gpu02"]) == ["gpu01", "gpu02", "gpu03"]


def test_limit_keeps_order_among_remaining_hosts():
    assert plan.order_nodes(["a", "b", "c", "d"], ["d", "b"]) == ["b", "d"]


@pytest.mark.parametrize("group, play, needle", [([], ["a"], "empty or missing"), (["a"], ["x"], "--limit leaves")])
def test_no_nodes_is_refused(group, play, needle):
    with pytest.raises(PlanError, match=needle):
        plan.order_nodes(group, play)


def test_cluster_address_precedence():
    assert plan.cluster_address("n", {"gpufleet_cluster_address": "198.51.100.1", "ansible_host": "192.0.2.1"}) == (
        "198.51.100.1", "gpufleet_cluster_address")
    assert plan.cluster_address("n", {"ansible_host": "192.0.2.1"}) == ("192.0.2.1", "ansible_host")
    assert plan.cluster_address("n", {}) == ("n", "inventory_hostname")


def test_plan_nodes_gives_ranks_and_ips():
    hostvars = {"a": {"ansible_host": "192.0.2.1"}, "b": {"gpufleet_cluster_address": "b.example"}}
    planned = plan.plan_nodes(["a", "b"], hostvars.__getitem__, resolver=lambda name: "192.0.2.2")
    assert [(n["host"], n["node_rank"], n["ip"]) for n in planned] == [("a", 0, "192.0.2.1"), ("b", 1, "192.0.2.2")]
    assert planned[1]["address_variable"] == "gpufleet_cluster_address"


def test_master_address_that_does_not_resolve_names_host_and_variable():
    def resolver(name):
        raise socket.gaierror(-2, "Name or service not known")

    with pytest.raises(PlanError) as err:
        plan.plan_nodes(["gpu01"], lambda h: {"ansible_host": "nowhere.invalid"}, resolver=resolver)
    assert "gpu01" in str(err.value) and "ansible_host" in str(err.value) and "nowhere.invalid" in str(err.value)


def test_real_resolution_of_an_invalid_name_fails():
    with pytest.raises(PlanError, match="does not resolve"):
        plan.plan_nodes(["n"], lambda h: {"gpufleet_cluster_address": "no-such-host.invalid"})


def test_two_nodes_with_the_same_address_are_refused():
    hostvars = {"a": {"ansible_host": "192.0.2.1"}, "b": {"ansible_host": "192.0.2.1"}}
    with pytest.raises(PlanError, match="b: cluster address 192.0.2.1 .* also the address of a"):
        plan.plan_nodes(["a", "b"], hostvars.__getitem__)


def test_ip_literals_are_kept_and_normalised():
    assert plan.resolve_ip("192.0.2.7") == "192.0.2.7"
    assert plan.resolve_ip("2001:DB8::1") == "2001:db8::1"
    assert plan.resolve_ip("localhost") in ("127.0.0.1", "::1")


@pytest.mark.parametrize("name", ["train", "llama-ft.v2", "a_b", "9lives"])
def test_good_job_names(name):
    assert plan.validate_job_name(name) == name


@pytest.mark.parametrize("name", ["a/b", "a b", "", "../x", ".hidden", "-x", "x" * 64, None, 5])
def test_bad_job_names(name):
    with pytest.raises(PlanError, match="^job: "):
        plan.validate_job_name(name)


def test_env_is_validated_and_stringified():
    assert plan.validate_env({"A": 1, "B_2": "x y", "C": True}) == {"A": "1", "B_2": "x y", "C": "1"}
    assert plan.validate_env(None) == {}


@pytest.mark.parametrize("env, needle", [
    ({"1BAD": "x"}, "'1BAD' is not a valid"),
    ({"BAD-NAME": "x"}, "'BAD-NAME' is not a valid"),
    ({"OK": ["list"]}, "gpufleet_env.OK"),
    (["A=1"], "must be a dict"),
])
def test_bad_env(env, needle):
    with pytest.raises(PlanError, match=needle):
        plan.validate_env(env)


def test_script_args_split_like_a_shell():
    assert plan.split_script_args("--name \"a b\" --quote \"it's\" --x='y z'") == [
        "--name", "a b", "--quote", "it's", "--x=y z"]
    assert plan.split_script_args("") == []


@pytest.mark.parametrize("value, needle", [(["--x"], "must be a string"), (5, "must be a string"),
                                           ("--name 'unclosed", "cannot be split")])
def test_bad_script_args(value, needle):
    with pytest.raises(PlanError, match="^script_args: .*" + needle):
        plan.split_script_args(value)


@pytest.mark.parametrize("value, expected", [("2", 2), (3, 3), (None, None), ("", None), (" 4 ", 4)])
def test_positive_ints(value, expected):
    assert plan.parse_positive_int(value, "nproc_per_node") == expected


@pytest.mark.parametrize("value, needle", [(0, "must be >= 1, got 0"), ("0", "got 0"), ("two", "whole number"),
                                           (True, "boolean"), ("-1", "got -1")])
def test_bad_positive_ints_name_the_variable(value, needle):
    with pytest.raises(PlanError, match="^nproc_per_node: .*" + needle):
        plan.parse_positive_int(value, "nproc_per_node")


def test_port_range():
    with pytest.raises(PlanError, match="master_port: must be between 1 and 65535, got 70000"):
        plan.parse_positive_int(70000, "master_port", maximum=65535)


@pytest.mark.parametrize("value, expected", [(True, True), ("false", False), ("yes", True), ("0", False)])
def test_bools(value, expected):
    assert plan.parse_bool(value, "wait") is expected


def test_bad_bool():
    with pytest.raises(PlanError, match="wait: must be true or false"):
        plan.parse_bool("maybe", "wait")


def test_run_ids_are_unique():
    assert len({plan.new_run_id() for _index in range(100)}) == 100


SPARES = ["node3"]


def test_spares_serve_a_restarting_torchrun_job_over_ssh():
    """Two nodes, torchrun over SSH, a restart allowed: the spare is used (no note)."""
    assert plan.spares_note(SPARES, "torchrun", "ssh", 2, "gpu_spares", 1) == ""
    assert plan.spares_note([], "mpirun", "slurm", 1, "gpu_spares", 0) == ""


@pytest.mark.parametrize(
    "launcher, scheduler, nnodes, max_restarts, why",
    [
        ("torchrun", "ssh", 2, 0, "max_restarts=0: the job is not restarted, and a spare takes a node's place only in"),
        ("mpirun", "ssh", 2, 1, "launcher=mpirun starts the ranks from one place"),
        ("torchrun", "slurm", 2, 1, "under scheduler=slurm, a restart runs on the nodes the scheduler gives"),
        ("torchrun", "ssh", 1, 1, "a job on one node has no other node to notice it lost"),
    ],
)
def test_spares_a_job_cannot_use_are_left_out_with_the_reason(launcher, scheduler, nnodes, max_restarts, why):
    note = plan.spares_note(SPARES, launcher, scheduler, nnodes, "gpu_spares", max_restarts)
    assert note.startswith("spare nodes of group 'gpu_spares' (node3) are not used: "), note
    assert why in note, note


@pytest.mark.parametrize("value, level", [(None, 0), ("", 0), (False, 0), ("false", 0), ("0", 0), (0, 0), (True, 1),
                                          ("true", 1), ("1", 1), (1, 1), ("4", 4)])
def test_health_diag_is_a_dcgm_level(value, level):
    assert plan.parse_health_diag(value) == level


@pytest.mark.parametrize("value", ["5", 7, "-1", "quick", "1.5"])
def test_health_diag_that_dcgm_does_not_know_is_refused_naming_it(value):
    with pytest.raises(plan.PlanError, match=r"health_diag: .* is not a DCGM diagnostic level"):
        plan.parse_health_diag(value)


@pytest.mark.parametrize("value, expected", [(None, 5.0), ("", 5.0), ("0", 0.0), ("30", 30.0), (" 2.5 ", 2.5),
                                             (60, 60.0), (1.5, 1.5), ("3600", 3600.0)])
def test_a_stop_grace_is_a_number_of_seconds(value, expected):
    assert plan.parse_seconds(value, "stop_grace_s", 5.0, maximum=3600.0) == expected


@pytest.mark.parametrize("value", ["ten", "-1", -1, "nan", "inf", "1e3", "3601", True, "5s", "²", [5]])
def test_a_stop_grace_that_is_not_seconds_is_refused_naming_it(value):
    with pytest.raises(PlanError) as found:
        plan.parse_seconds(value, "stop_grace_s", 5.0, maximum=3600.0)
    assert str(found.value) == "stop_grace_s: must be a number of seconds from 0 to 3600, got %r" % (value,)


def test_min_nodes_unset_or_all_of_them_is_zero_and_below_is_kept_for_launchers_that_can_shrink():
    assert plan.parse_min_nodes(None, 3, "torchrun", "ssh") == 0
    assert plan.parse_min_nodes("3", 3, "mpirun", "slurm") == 0  # all of them: nothing to refuse
    assert plan.parse_min_nodes("2", 3, "torchrun", "ssh") == 2
    assert plan.parse_min_nodes(1, 3, "none", "ssh") == 1


@pytest.mark.parametrize("value, launcher, scheduler, needle", [
    ("4", "torchrun", "ssh", "min_nodes: must be between 1 and 3, got 4"),
    ("0", "torchrun", "ssh", "min_nodes: must be between 1 and 3, got 0"),
    ("-1", "torchrun", "ssh", "min_nodes: must be between 1 and 3, got -1"),
    ("two", "torchrun", "ssh", "min_nodes: must be a whole number, got 'two'"),
    ("2", "mpirun", "ssh", "min_nodes: 2 is below the job's 3 nodes, but launcher=mpirun cannot go on with fewer nodes"),
    ("2", "deepspeed", "ssh", "but launcher=deepspeed cannot go on with fewer nodes (its world is fixed at the launch); "
     "min_nodes works with torchrun and none"),
    ("2", "torchrun", "slurm", "min_nodes: 2 is below the job's 3 nodes, but under scheduler=slurm the scheduler ends"),
])
def test_min_nodes_out_of_range_or_for_a_launcher_that_cannot_shrink_is_refused_naming_it(value, launcher, scheduler,
                                                                                          needle):
    with pytest.raises(PlanError) as raised:
        plan.parse_min_nodes(value, 3, launcher, scheduler)
    assert needle in str(raised.value)
