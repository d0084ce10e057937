"""Host lists in the formats people already have: the same nodes, in the same order, or an error naming file and line."""

import pytest

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import hostfile

PSSH = """# lab nodes (parallel-ssh host_file)
ml@192.0.2.10

ml@192.0.2.11:2222   # the one behind a port forward
192.0.2.12
"""
MPI = """192.0.2.10 slots=8
192.0.2.11 slots=8 max_slots=8
# spare: 192.0.2.13 slots=8
192.0.2.12 slots=4
"""
DEEPSPEED = "worker-1 slots=4\nworker-2 slots=4\n"


def summary(nodes):
    return [(n.host, n.user, n.port, n.slots) for n in nodes]


def test_pssh_lines_keep_order_user_and_port():
    nodes = hostfile.parse(PSSH, "hosts.txt")
    assert summary(nodes) == [("192.0.2.10", "ml", None, None), ("192.0.2.11", "ml", 2222, None),
                              ("192.0.2.12", None, None, None)]
    assert [n.line for n in nodes] == [2, 4, 5]


def test_mpi_and_deepspeed_hostfiles_give_slots():
    assert summary(hostfile.parse(MPI, "hostfile")) == [("192.0.2.10", None, None, 8), ("192.0.2.11", None, None, 8),
                                                         ("192.0.2.12", None, None, 4)]
    assert summary(hostfile.parse(DEEPSPEED, "ds_hostfile", "deepspeed")) == [("worker-1", None, None, 4),
                                                                             ("worker-2", None, None, 4)]


def test_every_format_gives_the_same_nodes_in_the_same_order():
    hosts = ["192.0.2.10", "192.0.2.11", "192.0.2.12"]
    pssh = hostfile.parse("\n".join(hosts), "hosts.txt")
    mpi = hostfile.parse("\n".join(h + " slots=2" for h in hosts), "hostfile")
    mlp = hostfile.parse_mlp({"MLP_WORKER_NUM": "3", "MLP_WORKER_GPU": "2", "MLP_WORKER_ALL_HOSTS": ",".join(hosts)})
    by_index = hostfile.parse_mlp({"MLP_WORKER_NUM": "3", "MLP_WORKER_GPU": "2",
                                   **{"MLP_WORKER_%d_HOST" % i: h for i, h in enumerate(hosts)}})
    from_file = hostfile.parse_mlp({"MLP_MPI_HOSTFILE": "/mlp/hostfile", "MLP_WORKER_NUM": "3"},
                                   read_file={"/mlp/hostfile": "\n".join(h + " slots=2" for h in hosts)}.get)
    for nodes in (pssh, mpi, mlp, by_index, from_file):
        assert [n.host for n in nodes] == hosts
    for nodes in (mpi, mlp, by_index, from_file):
        assert [hostfile.host_vars(n) for n in nodes] == [{"ansible_host": h, "gpufleet_gpus": 2} for h in hosts]
    assert [hostfile.host_vars(n, default_gpus=2) for n in pssh] == [{"ansible_host": h, "gpufleet_gpus": 2}
                                                                     for h in hosts]


def test_mlp_hosts_with_slots():
    nodes = hostfile.parse_mlp({"MLP_MPI_HOSTS": "10.0.0.1:8,10.0.0.2:8", "MLP_WORKER_NUM": "2"})
    assert summary(nodes) == [("10.0.0.1", None, None, 8), ("10.0.0.2", None, None, 8)]


def test_host_vars_name_user_and_port():
    node = hostfile.parse(PSSH, "hosts.txt")[1]
    assert hostfile.host_vars(node, default_gpus=8) == {"ansible_host": "192.0.2.11", "ansible_user": "ml",
                                                        "ansible_port": 2222, "gpufleet_gpus": 8}


def test_one_host_on_two_ports_gets_two_names():
    nodes = hostfile.parse("gpu@192.0.2.20:2201\ngpu@192.0.2.20:2202\n192.0.2.21\n", "hosts.txt")
    assert hostfile.inventory_names(nodes) == ["192.0.2.20_2201", "192.0.2.20_2202", "192.0.2.21"]


MALFORMED = [
    ("port not a number", "ml@192.0.2.10\nml@192.0.2.11:ssh\n", "auto", "hosts.txt:2: port 'ssh' is not a number"),
    ("port out of range", "192.0.2.10:70000\n", "pssh", "hosts.txt:1: port '70000' is not a number from 1 to 65535"),
    ("slots=0", "192.0.2.10 slots=8\n192.0.2.11 slots=0\n", "auto", "hosts.txt:2: slots=0 must be a whole number"),
    ("slots not a number", "192.0.2.10 slots=eight\n", "mpi", "hosts.txt:1: slots=eight must be a whole number"),
    ("max_slots below slots", "192.0.2.10 slots=8 max_slots=4\n", "mpi", "hosts.txt:1: max_slots=4 is less than"),
    ("unknown field", "192.0.2.10 gpus=8\n", "mpi", "hosts.txt:1: expected host slots=N [max_slots=M], got 'gpus=8'"),
    ("empty file", "", "auto", "hosts.txt: lists no host"),
    ("only comments", "# nothing yet\n\n", "pssh", "hosts.txt: lists no host"),
    ("duplicate host", "192.0.2.10 slots=8\n192.0.2.11 slots=8\n192.0.2.10 slots=8\n", "auto",
     "hosts.txt:3: host 192.0.2.10 is listed again (first on line 1)"),
    ("duplicate pssh host", "ml@192.0.2.10\n\nroot@192.0.2.10\n", "pssh",
     "hosts.txt:3: host 192.0.2.10 is listed again (first on line 1)"),
    ("not a host", "ml@192.0.2.10 extra\n", "pssh", "hosts.txt:1: expected [user@]host[:port]"),
    ("bad format name", "x\n", "slurm", "hosts.txt: format must be one of"),
]


@pytest.mark.parametrize("case", MALFORMED, ids=[case[0] for case in MALFORMED])
def test_malformed_lists_fail_with_file_and_line(case):
    _name, text, fmt, message = case
    with pytest.raises(hostfile.HostfileError) as error:
        hostfile.parse(text, "hosts.txt", fmt)
    assert str(error.value).startswith(message), str(error.value)


def test_mlp_variables_that_disagree_fail_naming_them():
    with pytest.raises(hostfile.HostfileError, match="MLP_WORKER_NUM=3, but the hosts list 2 nodes"):
        hostfile.parse_mlp({"MLP_WORKER_NUM": "3", "MLP_WORKER_ALL_HOSTS": "a,b"})
    with pytest.raises(hostfile.HostfileError, match="MLP_WORKER_1_HOST: is not set, but MLP_WORKER_NUM=2"):
        hostfile.parse_mlp({"MLP_WORKER_NUM": "2", "MLP_WORKER_0_HOST": "a"})
    with pytest.raises(hostfile.HostfileError, match="MLP_WORKER_GPU=0 must be a whole number"):
        hostfile.parse_mlp({"MLP_WORKER_GPU": "0", "MLP_WORKER_ALL_HOSTS": "a"})
    with pytest.raises(hostfile.HostfileError, match="none of MLP_MPI_HOSTFILE"):
        hostfile.parse_mlp({})
