"""The supervisor's watch over a node's GPUs: samples into gpus.csv without blocking, new XIDs followed in the kernel
log. nvidia-smi is the test cluster's stand-in (tests/cluster/scripts/nvidia_smi_standin.py), first on PATH; the
kernel log is a file in /dev/kmsg's format. What this does not check: a real GPU (tests/gpu/)."""

import csv
import json
import os
import time

import pytest
from waiting import wait_for

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import gpu_watch

def test_samples_go_into_the_csv_one_row_per_gpu(tmp_path, gpus_on_path):
    del gpus_on_path
    log = tmp_path / "kmsg"
    log.write_text("")
    watch = gpu_watch.GpuWatch(str(tmp_path), "node1", 0.2, str(log))
    assert watch.start() == "GPU watch: sampled every 0.2 s into gpus.csv; new XIDs in %s stop the job" % log
    started = time.monotonic()
    assert watch.poll() is None
    assert time.monotonic() - started < 0.1  # the sample runs in the background: the poll does not wait for it
    wait_for(lambda: watch.poll() is None and os.path.exists(tmp_path / "gpus.csv") and watch.gpus)
    watch.close()
    with open(tmp_path / "gpus.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == list(gpu_watch.SAMPLE_COLUMNS)
    first, second = rows[0], rows[1]
    assert (first["host"], first["index"], first["bus_id"], first["utilization"], first["memory_used"]) == (
        "node1", "0", "00000000:18:00.0", "91.0", "40000.0")
    assert (second["index"], second["utilization"], second["sm_clock_max"], second["event_reasons"]) == (
        "1", "0.0", "1980.0", "1")


def test_a_new_hardware_xid_is_the_nodes_failure_naming_the_gpu(tmp_path, gpus_on_path):
    del gpus_on_path
    log = tmp_path / "kmsg"
    log.write_text("4,1,1000,-;NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, GPU has fallen off the bus.\n")
    watch = gpu_watch.GpuWatch(str(tmp_path), "node1", 0.2, str(log))
    watch.start()
    wait_for(lambda: watch.poll() is None and watch.gpus)  # the XID from before the start is not new
    with open(log, "a") as handle:
        handle.write("4,2,2000,-;NVRM: Xid (PCI:0000:19:00): 13, pid=7, name=python, Graphics Exception\n")
        handle.write("4,3,3000,-;NVRM: Xid (PCI:0000:19:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off")
    assert watch.poll() is None  # an application XID, and a line still being written
    with open(log, "a") as handle:
        handle.write(" the bus.\n")
    reason, at = watch.poll()
    assert reason == "node1 GPU 1 (0000:19:00.0): XID 79, GPU has fallen off the bus" and abs(at - time.time()) < 5
    assert watch.poll() == (reason, at)  # the first fault stays the reason
    watch.close()


def test_a_node_without_nvidia_smi_says_so_once_and_costs_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    watch = gpu_watch.GpuWatch(str(tmp_path), "node0", 10, "/dev/kmsg")
    assert watch.start() == "GPU watch: no GPU on this node (no nvidia-smi); nothing is sampled"
    assert watch.poll() is None and watch.kernel is None and watch.sampler is None
    watch.close()


def test_an_unreadable_kernel_log_is_said_and_sampling_goes_on(tmp_path, gpus_on_path):
    del gpus_on_path
    watch = gpu_watch.GpuWatch(str(tmp_path), "node1", 0.2, str(tmp_path / "no-such-dir" / "kmsg"))
    assert "XIDs not watched (%s: No such file or directory)" % (tmp_path / "no-such-dir" / "kmsg") in watch.start()
    wait_for(lambda: watch.poll() is None and os.path.exists(tmp_path / "gpus.csv"))
    watch.close()


def test_a_field_the_driver_refuses_is_asked_by_its_older_name(tmp_path, gpus_on_path):
    state = json.loads(gpus_on_path.read_text())
    gpus_on_path.write_text(json.dumps(state))
    watch = gpu_watch.GpuWatch(str(tmp_path), "node1", 0.2, str(tmp_path / "kmsg"))
    watch.start()
    watch.fields = [(key, "clocks_event_reason.bogus" if key == "event_reasons" else field)
                    for key, field in watch.fields]
    gpu_watch.FIELD_ALIASES["clocks_event_reason.bogus"] = "clocks_throttle_reasons.active"
    try:
        wait_for(lambda: watch.poll() is None and os.path.exists(tmp_path / "gpus.csv"))
    finally:
        del gpu_watch.FIELD_ALIASES["clocks_event_reason.bogus"]
        watch.close()
    assert ("event_reasons", "clocks_throttle_reasons.active") in watch.fields

