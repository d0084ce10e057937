"""verify.yml's Gloo measurement on the node (module_utils/_node/gloo_all_reduce.py): the child's command line and
environment, its outcome read back, nccl-tests' bandwidth formulas, and a real run of three ranks of this
checkout's Python (torch, Gloo) over loopback, the last rank missing in the second."""

import inspect
import subprocess
import sys
import threading

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._node import gloo_all_reduce
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import free_ports

SOURCE = inspect.getsource(gloo_all_reduce)


def test_the_command_line_carries_the_source_and_the_arguments_only():
    argv = gloo_all_reduce.child_command("/opt/gpufleet/venv/bin/python", "SRC", "192.0.2.10", 29512, 1, 3,
                                         [1024, 4096], 5, 60.0)
    assert argv == ["/opt/gpufleet/venv/bin/python", "-c", "SRC", "192.0.2.10", "29512", "1", "3", "1024,4096", "5",
                    "60.0"]


def test_gloo_binds_to_the_cluster_interface_unless_the_node_names_one():
    assert gloo_all_reduce.child_environment("ens1f0", {"PATH": "/bin"}) == {"PATH": "/bin", "GLOO_SOCKET_IFNAME": "ens1f0"}
    assert gloo_all_reduce.child_environment("ens1f0", {"GLOO_SOCKET_IFNAME": "ib0"})["GLOO_SOCKET_IFNAME"] == "ib0"
    assert "GLOO_SOCKET_IFNAME" not in gloo_all_reduce.child_environment("", {})


def test_bandwidths_follow_nccl_tests_definitions():
    # nccl-tests' doc/PERFORMANCE.md: algbw = S / t; all_reduce's busbw = algbw * 2(n-1)/n.
    found = gloo_all_reduce.bandwidths(1 << 30, 0.5, 4)
    assert found == {"time_us": 500000.0, "algbw_gbps": 2.147, "busbw_gbps": 3.221}
    assert gloo_all_reduce.bandwidths(4096, 0.001, 1)["busbw_gbps"] == 0.0
    # A small message on a loaded machine keeps its figure (three decimals made 4 KiB in 20 ms read 0.0 GB/s).
    assert gloo_all_reduce.bandwidths(4096, 0.02, 3) == {"time_us": 20000.0, "algbw_gbps": 0.0002048,
                                                          "busbw_gbps": 0.0002731}


def test_the_outcome_is_the_marked_line_or_the_last_word_of_the_failure():
    line = gloo_all_reduce.RESULT_MARK + '{"rank": 0, "rows": []}'
    assert gloo_all_reduce.outcome(0, "torch says hello\n" + line + "\n", "", 60) == {"rank": 0, "rows": []}
    failed = gloo_all_reduce.outcome(1, "", "Traceback ...\nModuleNotFoundError: No module named 'torch'\n", 60)
    assert failed == {"error": "the training Python ended with 1: ModuleNotFoundError: No module named 'torch'"}
    assert gloo_all_reduce.outcome(None, "", "", 180) == {"error": "the Gloo all_reduce did not end within 180 s"}


def test_a_python_that_does_not_exist_is_an_error_not_a_crash():
    found = gloo_all_reduce.run("/nonexistent/python", SOURCE, "127.0.0.1", 29999, 0, 1, [4], 1, 5, "lo")
    assert found["error"].startswith("cannot start the training Python /nonexistent/python: ")


def _ranks(ranks, world, timeout_s):
    port = free_ports.pick_free_port()
    found = {}

    def one(rank):
        found[rank] = gloo_all_reduce.run(sys.executable, SOURCE, "127.0.0.1", port, rank, world, [4096, 1 << 20], 2,
                                          timeout_s, "lo")

    threads = [threading.Thread(target=one, args=(rank,)) for rank in ranks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s + 150)
    return found


@pytest.mark.timeout(400)  # torch from the dev environment, as test_launcher_entry.py uses it
def test_three_ranks_over_loopback_sum_correctly_and_rank_0_reports_every_size():
    found = _ranks([0, 1, 2], 3, 120)
    assert sorted(found) == [0, 1, 2] and all("error" not in result for result in found.values()), found
    assert found[1]["rows"] == [] and found[2]["rows"] == []
    rows = found[0]["rows"]
    assert [row["size_bytes"] for row in rows] == [4096, 1 << 20], rows
    assert all(row["wrong"] == 0 and row["time_us"] > 0 and row["busbw_gbps"] > 0 for row in rows), rows
    assert all(abs(row["busbw_gbps"] - row["algbw_gbps"] * 4 / 3) < 0.002 for row in rows), rows
    assert found[0]["interface"] == "lo"


@pytest.mark.timeout(400)  # torch from the dev environment, as test_launcher_entry.py uses it
def test_a_missing_rank_ends_every_other_with_an_error_within_the_timeout():
    found = _ranks([0, 1], 3, 8)
    assert sorted(found) == [0, 1]
    assert all(result.get("error", "").startswith("the training Python ended with 1: ") for result in found.values()), found
    # torch's store says how many joined (the master's words, as torch 2.13 prints them).
    assert "2/3 clients joined" in found[0]["error"], found[0]


def test_the_child_is_run_as_a_script(tmp_path):
    """The module hands the training Python this file's source with -c: it runs as __main__ and reads its arguments."""
    done = subprocess.run([sys.executable, "-c", SOURCE, "127.0.0.1", "1", "0", "1"], capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode != 0 and "ValueError: not enough values to unpack" in done.stderr
