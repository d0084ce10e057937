"""IMEX domains: a node list that cannot make one domain is refused before any change, naming the node, the variable
and its value; IMEX's package names per driver branch, as NVIDIA's driver container installs them."""

import pytest

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._provision import imex, nvidia_packaging

RACK = ["tray1", "tray2", "tray3"]
INVENTORY = RACK + ["tray4", "login1"]


def refusal(host="tray1", listed=RACK, domains=None, play=RACK, branch=580):
    return imex.refusal(host, branch, listed, INVENTORY, {h: RACK for h in RACK} if domains is None else domains, play)


def test_one_rack_whose_nodes_share_one_list_is_a_domain():
    assert refusal() == ""
    # A listed node outside this play (a --limit run) cannot be compared, and is not refused.
    assert refusal(play=["tray1"], domains={"tray1": RACK}) == ""


@pytest.mark.parametrize("listed, expected", [
    (RACK + ["tray9"], "nvidia_imex_nodes=['tray1', 'tray2', 'tray3', 'tray9'] names tray9, not in the inventory"),
    (["tray2", "tray3"], "nvidia_imex_nodes=['tray2', 'tray3'] leaves out tray1 itself"),
    (["tray1", "tray2", "tray2"], "names tray2 more than once"),
    ("tray1,tray2", "nvidia_imex_nodes='tray1,tray2' is not a list of the inventory names"),
    ([], "nvidia_imex_nodes=[] is not a list"),
])
def test_a_list_naming_hosts_outside_the_inventory_or_not_the_node_itself_is_refused(listed, expected):
    assert expected in refusal(listed=listed, domains={"tray1": listed, "tray2": RACK, "tray3": RACK})


def test_lists_that_differ_between_the_nodes_of_a_domain_are_refused_naming_both():
    """IMEX fails to initialise where an instance's address map differs from another's (IMEX guide, "Deployment
    Models"): the same nodes in another order are another map."""
    other = ["tray2", "tray1", "tray3"]
    found = refusal(domains={"tray1": RACK, "tray2": other, "tray3": RACK})
    assert found.startswith("nvidia_imex_nodes differs between tray1 (['tray1', 'tray2', 'tray3']) and tray2 "
                            "(['tray2', 'tray1', 'tray3'])"), found


def test_a_listed_node_of_the_play_where_imex_is_not_set_up_is_refused():
    wider = RACK + ["tray4"]
    found = refusal(listed=wider, domains={host: wider for host in RACK}, play=wider)
    assert "names tray4, where IMEX is not set up" in found


@pytest.mark.parametrize("branch, names", [(590, ["nvidia-imex"]), (580, ["nvidia-imex"]),
                                           (570, ["nvidia-imex-570"]), (550, ["nvidia-imex-550"]), (535, [])])
def test_imex_package_names_per_branch(branch, names):
    """gpu-driver-container's imex_install: nvidia-imex from 580, nvidia-imex-<branch> from 550, none before."""
    assert nvidia_packaging.imex_packages(branch) == names


def test_a_branch_without_imex_is_refused_naming_the_variable():
    assert refusal(branch=535).startswith("nvidia_imex_branch=535: NVIDIA ships IMEX from driver branch 550")
    assert refusal(branch="r580") == "nvidia_imex_branch=r580 is not a driver branch (a number such as 580)"
