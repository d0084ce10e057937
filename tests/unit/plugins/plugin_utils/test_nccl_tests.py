"""Parsing nccl-tests all_reduce_perf output (layouts as nccl-tests prints them) and the pass/fail decision."""

import os

import pytest

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._verify import nccl_tests

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "nccl_tests")


def load(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return nccl_tests.parse(handle.read())


def test_single_node_eight_gpus():
    report = load("single_node_8gpu.txt")
    assert [r["size_bytes"] for r in report["rows"]] == [8, 1024, 1048576, 16777216, 134217728]
    last = report["rows"][-1]
    assert last["out_of_place"] == {"time_us": 742.8, "algbw_gbps": 180.69, "busbw_gbps": 316.21, "wrong": 0}
    assert last["in_place"]["busbw_gbps"] == 317.62
    assert report["avg_busbw_gbps"] == 102.614 and report["out_of_bounds"] == 0 and report["wrong"] == 0
    assert report["ranks"] == 8 and report["hosts"] == ["gpu01"]
    assert report["devices"][7]["model"] == "NVIDIA H100 80GB HBM3"


def test_one_h100_with_figures_in_exponent_form():
    """Real output: all_reduce_perf 2.19.6 on one H100 (device machine, 2026-11-23). Its in-place figures on one
    rank overflow their columns and print as 2e+06; every row still counts."""
    report = load("h100_single_gpu.txt")
    assert len(report["rows"]) == 14 and report["rows"][-1]["size_bytes"] == 536870912
    assert report["rows"][-1]["in_place"]["algbw_gbps"] == 2e6
    assert report["rows"][-2]["in_place"]["algbw_gbps"] == 405737.0
    assert nccl_tests.peak_algbw(report) == 1494.0 and nccl_tests.peak_busbw(report) == 0.0
    assert report["ranks"] == 1 and report["devices"][0]["model"] == "NVIDIA H100 80GB HBM3"
    assert nccl_tests.verdict(report, None)["passed"]
    refused = nccl_tests.verdict(report, 100)
    assert not refused["passed"] and "one rank moves no data" in refused["reasons"][0]


def test_two_nodes_with_nccl_info_lines_interleaved():
    report = load("two_node_mpirun.txt")
    assert len(report["rows"]) == 6 and report["hosts"] == ["node0", "node1"] and report["ranks"] == 4
    assert report["avg_busbw_gbps"] == 32.4132
    assert nccl_tests.peak_busbw(report) == 41.21


def test_launcher_prefixes_and_unchecked_results():
    report = load("slurm_prefixed_no_check.txt")
    assert [r["size_bytes"] for r in report["rows"]] == [8388608, 33554432]
    assert report["rows"][0]["out_of_place"]["wrong"] is None
    assert report["avg_busbw_gbps"] == 39.39 and report["wrong"] == 0


def test_verdict_pass_and_below_expectation():
    report = load("two_node_mpirun.txt")
    assert nccl_tests.verdict(report, None)["passed"] is True
    assert nccl_tests.verdict(report, 40)["passed"] is True
    failed = nccl_tests.verdict(report, 45)
    assert failed["passed"] is False
    assert failed["reasons"] == ["peak bus bandwidth 41.21 GB/s is below the expected 45.00 GB/s"]


def test_verdict_fails_on_wrong_results_and_out_of_bounds():
    result = nccl_tests.verdict(load("with_errors.txt"), None)
    assert result["passed"] is False
    assert result["reasons"] == ["2 wrong results", "3 out-of-bounds values"]


def test_empty_output_fails():
    result = nccl_tests.verdict(nccl_tests.parse("mpirun: command not found\n"), 10)
    assert result["passed"] is False and "no result rows" in result["reasons"][0]


@pytest.mark.parametrize("line", ["#  Rank  0 Group  0 Pid 1 on h device  0 [0x18] NVIDIA",
                                  "# Out of bounds values : 0 OK"])
def test_comment_lines_are_not_rows(line):
    assert nccl_tests.parse(line)["rows"] == []
