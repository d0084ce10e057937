"""The GPU health reader against nvidia-smi's output formats and the kernel log's XID lines.

nvidia-smi's answers come from the test cluster's stand-in (tests/cluster/scripts/nvidia_smi_standin.py), run as
the reader's command, and from lines written out here in nvidia-smi's documented formats; the XID lines are the
NVIDIA driver's (a real kernel log's, named where used). What this does not check: a real GPU's answers
(tests/gpu/ does, where a GPU is lent)."""

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import gpu_health

HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN = os.path.join(HERE, "..", "..", "..", "cluster", "scripts", "nvidia_smi_standin.py")
# A real driver's line (leptonai/gpud, testdata/dmesg-with-xid-119.log, an H100 node's kernel log).
XID_119 = ("NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of waiting for RPC "
           "response from GPU4 GSP! Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4).")


def standin(tmp_path, state):
    """A runner that answers nvidia-smi's calls with the stand-in, from this state."""
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(state))
    calls = []

    def run(cmd, **_kwargs):
        calls.append(cmd)
        env = dict(os.environ, GPUFLEET_STANDIN_GPUS=str(path))
        return subprocess.run([sys.executable, STANDIN, *cmd[1:]], capture_output=True, text=True, env=env, check=False)

    run.calls = calls
    return run


def test_every_field_of_a_healthy_gpu_is_read(tmp_path):
    run = standin(tmp_path, {"gpus": [{}, {"utilization.gpu": 97, "clocks_event_reasons.active": "0x0000000000000048"}]})
    found = gpu_health.query_gpus(run)
    assert found["nvidia_smi"] and found["lost"] == [] and found["error"] == ""
    first, second = found["gpus"]
    assert first == {"index": 0, "uuid": "GPU-00000000-0000-0000-0000-000000000000", "bus_id": "00000000:18:00.0",
                     "name": "NVIDIA H100 80GB HBM3", "driver": "580.95.05", "error": "", "temperature": 31.0,
                     "utilization": 0.0,
                     "memory_used": 0.0, "memory_total": 81559.0, "power": 69.52, "sm_clock": 345.0,
                     "sm_clock_max": 1980.0, "ecc_uncorrected": 0.0, "pcie_width": 16.0, "pcie_width_max": 16.0,
                     "event_reasons": 1, "retired_pending": False, "remap_pending": False, "remap_failure": False,
                     "fabric_state": None, "fabric_status": None, "recovery_action": "None"}
    assert second["index"] == 1 and second["utilization"] == 97.0 and second["event_reasons"] == 0x48
    assert len(run.calls) == 1  # one nvidia-smi call for every field of every GPU


def test_a_field_the_driver_does_not_know_is_asked_by_its_older_name():
    asked = []

    def run(cmd, **_kwargs):
        asked.append(cmd[1])
        if "clocks_event_reasons.active" in cmd[1]:
            return subprocess.CompletedProcess(cmd, 2, 'Field "clocks_event_reasons.active" is not a valid field to '
                                                       'query.\n', "")
        if "remapped_rows.pending" in cmd[1]:  # a driver without row remapping fields (before A100)
            return subprocess.CompletedProcess(cmd, 2, 'Field "remapped_rows.pending" is not a valid field to query.\n', "")
        fields = cmd[1].split("=", 1)[1].split(",")
        row = ["0" if field != "clocks_throttle_reasons.active" else "0x0000000000000008" for field in fields]
        return subprocess.CompletedProcess(cmd, 0, ", ".join(row) + "\n", "")

    found = gpu_health.query_gpus(run)
    assert "clocks_throttle_reasons.active" in asked[-1] and "remapped_rows.pending" not in asked[-1]
    assert found["gpus"][0]["event_reasons"] == 0x8 and found["gpus"][0]["remap_pending"] is False


def test_a_lost_gpu_and_one_that_needs_a_reset(tmp_path):
    run = standin(tmp_path, {"gpus": [{}, {"state": "lost"}, {"state": "reset"}]})
    found = gpu_health.query_gpus(run)
    assert found["lost"] == [{"bus_id": "0000:19:00.0", "error": "Unknown Error"}]
    assert [gpu["index"] for gpu in found["gpus"]] == [0, 2]
    assert found["gpus"][1]["error"] == "[GPU requires reset]" and found["gpus"][1]["temperature"] is None


def test_no_nvidia_smi_reads_nothing_else():
    def run(cmd, **_kwargs):
        raise FileNotFoundError(cmd[0])

    assert gpu_health.read(run=run) == {"nvidia_smi": False, "gpus": [], "lost": [], "error": "", "processes": [],
                                        "nvlink": {}, "xids": [], "kernel_log": ""}


def test_nvidia_smi_that_fails_says_why():
    def run(cmd, **_kwargs):
        return subprocess.CompletedProcess(cmd, 9, "NVIDIA-SMI has failed because it couldn't communicate with the "
                                                   "NVIDIA driver. Make sure that the latest NVIDIA driver is installed "
                                                   "and running.\n", "")

    found = gpu_health.query_gpus(run)
    assert found["gpus"] == [] and found["error"].startswith("NVIDIA-SMI has failed")


def test_compute_processes_with_their_user(tmp_path):
    run = standin(tmp_path, {"gpus": [{}, {}], "processes": [{"gpu": 1, "pid": 4242, "name": "python3", "memory": 10240}]})
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "status").write_text("Name:\tpython3\nUid:\t0\t0\t0\t0\n")
    assert gpu_health.compute_processes(run, str(proc)) == [
        {"bus_id": "00000000:19:00.0", "pid": 4242, "command": "python3", "memory": 10240.0, "user": "root"}]
    assert gpu_health.process_user(99999, str(proc)) == ""  # another PID namespace's process


SMI = os.path.join(HERE, "..", "..", "..", "fixtures", "nvidia_smi")


def replay(name):
    """A runner that answers `nvidia-smi nvlink --status` with a document of tests/fixtures/nvidia_smi."""
    with open(os.path.join(SMI, name)) as handle:
        out = handle.read()

    def run(cmd, **_kwargs):
        assert cmd == ["nvidia-smi", "nvlink", "--status"]
        return subprocess.CompletedProcess(cmd, 0, out, "")

    return run


def test_the_real_line_of_a_gpu_that_fell_off_the_bus_is_a_lost_gpu():
    with open(os.path.join(SMI, "lost-gpu-unknown-error.txt")) as handle:
        out = handle.read()

    def run(cmd, **_kwargs):
        return subprocess.CompletedProcess(cmd, 15, out, "")

    assert gpu_health.query_gpus(run) == {"nvidia_smi": True, "gpus": [], "error": "",
                                          "lost": [{"bus_id": "0000:91:00.0", "error": "Unknown Error"}]}


def test_nvlink_of_a_real_a100_node_and_of_a_node_without_nvlink():
    states = gpu_health.nvlink_states(replay("nvlink-status-a100-8gpu.txt"))
    assert states == {str(gpu): {"up": 12, "down": []} for gpu in range(8)}
    assert gpu_health.nvlink_states(replay("nvlink-status-a10.txt")) == {}


def test_nvlink_links_written_inactive_are_down():
    states = gpu_health.nvlink_states(replay("handmade-nvlink-status-a100-two-links-down.txt"))
    assert states["3"] == {"up": 10, "down": [4, 9]} and states["2"] == {"up": 12, "down": []}


def test_a_gpu_nvidia_smi_says_has_all_its_links_inactive_is_marked_so():
    """Real captures: three RTX A6000s, two bridged (GPU 2 without a bridge); two A100 PCIe without one; the lines of
    one GPU of an HGX B200 whose links were all down (a user's report). nvidia-smi prints no link for such a GPU."""
    a6000 = gpu_health.nvlink_states(replay("nvlink-status-rtx-a6000-one-gpu-unbridged.txt"))
    assert a6000 == {"0": {"up": 4, "down": []}, "1": {"up": 4, "down": []},
                     "2": {"up": 0, "down": [], "all_inactive": True}}
    assert gpu_health.nvlink_states(replay("nvlink-status-a100-pcie-no-bridge.txt")) == {
        str(gpu): {"up": 0, "down": [], "all_inactive": True} for gpu in range(2)}
    assert gpu_health.nvlink_states(replay("nvlink-status-b200-gpu2-all-inactive-excerpt.txt")) == {
        "2": {"up": 0, "down": [], "all_inactive": True}}


def test_nvlink_links_up_and_down(tmp_path):
    run = standin(tmp_path, {"gpus": [{}, {}], "nvlink": {"0": ["26.562 GB/s"] * 3, "1": ["26.562 GB/s", "<inactive>",
                                                                                          "<inactive>"]}})
    assert gpu_health.nvlink_states(run) == {"0": {"up": 3, "down": []}, "1": {"up": 1, "down": [1, 2]}}


@pytest.mark.parametrize("line, xid, kind, bus", [
    (XID_119, 119, "hardware", "0000:9b:00"),
    ("NVRM: Xid (PCI:0000:c6:00): 79, pid=1101234, name=nvc:[driver], GPU has fallen off the bus.", 79, "hardware",
     "0000:c6:00"),
    ("NVRM: Xid (PCI:0000:3b:00): 13, pid=5512, name=python, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0)",
     13, "application", "0000:3b:00"),
    ("NVRM: Xid (PCI:0000:18:00): 94, pid=771, name=python3, Contained: SM (0x1). RST: No, D-RST: No", 94, "hardware",
     "0000:18:00"),
])
def test_xid_lines_are_classified(line, xid, kind, bus):
    event = gpu_health.parse_xid(line)
    assert (event["xid"], event["class"], event["bus_id"]) == (xid, kind, bus)
    assert event["meaning"] == gpu_health.XID_MEANINGS[xid]


@pytest.mark.parametrize("line, action", [
    # Kernel lines of XID 154 as public reports quote them (driver branches name the actions differently).
    ("NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
     "GPU Reset Required"),
    ("NVRM: Xid (PCI:0000:02:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
     "Node Reboot Required"),
    ("NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (OS Reboot)", "OS Reboot"),
])
def test_xid_154_names_the_recovery_action_the_driver_asks_for(line, action):
    event = gpu_health.parse_xid(line)
    assert event["xid"] == 154 and event["class"] == "hardware" and event["action"] == action


def test_xid_109_is_an_applications_fault_as_nvidias_device_plugin_counts_it():
    # A real PyTorch process's line (leptonai/gpud, the accelerator-nvidia-error-xid component's README, a dmesg of
    # 2024-08-30).
    event = gpu_health.parse_xid("NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, "
                                 "errorString CTX SWITCH TIMEOUT, Info 0x58005")
    assert event["xid"] == 109 and event["class"] == "application"


def test_lines_that_are_not_xids():
    assert gpu_health.parse_xid("NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-b600-ac93-3616-d754b23d636d") is None
    assert gpu_health.parse_xid("nvidia-nvlink: Nvlink Core is being initialized") is None


def test_the_kernel_log_in_kmsg_format_with_times_from_boot(tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "stat").write_text("cpu  1 2 3\nbtime 1764000000\nprocesses 5\n")
    log = tmp_path / "kmsg"
    log.write_text("6,101,5000000,-;nvidia-nvlink: Nvlink Core is being initialized\n"
                   "4,102,60000000,-;%s\n"
                   "4,103,120500000,-;NVRM: Xid (PCI:0000:c6:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
                   % XID_119)
    events, source = gpu_health.kernel_xids(str(log), proc=str(proc))
    assert source == str(log)
    assert [(event["xid"], event["time"]) for event in events] == [(119, 1764000060.0), (79, 1764000120.5)]
    later, _source = gpu_health.kernel_xids(str(log), since=1764000100, proc=str(proc))
    assert [event["xid"] for event in later] == [79]


KMSG = os.path.join(HERE, "..", "..", "..", "fixtures", "kmsg")


def test_real_kmsg_records_without_an_xid_give_none(tmp_path):
    """A real capture of /dev/kmsg (tests/fixtures/kmsg): device records with continuation lines, no XID."""
    (tmp_path / "stat").write_text("btime 1764000000\n")
    assert gpu_health.kernel_xids(os.path.join(KMSG, "linux-6.18.44-records.txt"), proc=str(tmp_path)) == (
        [], os.path.join(KMSG, "linux-6.18.44-records.txt"))


def test_the_drivers_xid_lines_in_kmsg_records_are_read_with_their_times_and_classes(tmp_path):
    (tmp_path / "stat").write_text("btime 1764000000\n")
    events, _source = gpu_health.kernel_xids(os.path.join(KMSG, "handmade-xids.txt"), proc=str(tmp_path))
    assert [(event["xid"], event["class"], event["bus_id"], event.get("action")) for event in events] == [
        (119, "hardware", "0000:9b:00", None), (109, "application", "0000:cb:00", None),
        (79, "hardware", "0000:01:00", None), (154, "hardware", "0000:01:00", "Node Reboot Required")]
    assert events[0]["time"] == pytest.approx(1764000000 + 2345.678901)


def test_nvswitch_sxids_are_read_beside_the_xids_and_only_fatal_ones_are_faults(tmp_path):
    """A real HGX kernel log's lines (tests/fixtures/kmsg/handmade-sxids.txt): XID 79, then fatal SXids 20034 on three
    NVSwitches with their continuation lines, and a non-fatal SXid."""
    (tmp_path / "stat").write_text("btime 1764000000\n")
    events, _source = gpu_health.kernel_xids(os.path.join(KMSG, "handmade-sxids.txt"), proc=str(tmp_path))
    assert [(event["xid"], event.get("sxid", False), event["class"], event["bus_id"]) for event in events] == [
        (79, False, "hardware", "0000:91:00"), (20034, True, "hardware", "0000:06:00.0"),
        (20034, True, "hardware", "0000:05:00.0"), (20034, True, "hardware", "0000:07:00.0"),
        (20034, True, "hardware", "0000:05:00.0"), (12028, True, "non-fatal", "0000:05:00.0")]
    assert events[1]["switch"] == "nvswitch1" and events[1]["detail"] == "Link 48 LTSSM Fault Up"


def test_an_unreadable_kernel_log_is_said():
    events, source = gpu_health.kernel_xids("/no/such/kmsg")
    assert events == [] and source.startswith("invalid: /no/such/kmsg: No such file or directory")


def test_a_kernel_log_that_is_neither_a_file_nor_a_character_device_is_invalid(tmp_path):
    events, source = gpu_health.kernel_xids(str(tmp_path))
    assert events == [] and source == "invalid: %s is neither a file nor a character device" % tmp_path
    assert gpu_health.kernel_log_problem("/dev/null") == ""  # a character device, as /dev/kmsg is


def test_this_machines_dev_kmsg_is_read_as_the_character_device_it_is():
    """The production branch: /dev/kmsg read record by record (one read a record, non-blocking to its end). Where
    this machine lets the test read it (root, or kernel.dmesg_restrict=0), its records are real; elsewhere the
    reader's refusal is the kernel's, and the journal is asked instead."""
    assert gpu_health.kernel_log_problem(gpu_health.KMSG) == ""
    try:
        records = gpu_health._kmsg_records(gpu_health.KMSG)
    except OSError as exc:
        assert exc.errno in (1, 2, 13), exc  # EPERM under dmesg_restrict, EACCES, or no /dev/kmsg in a container
        return
    assert records, "/dev/kmsg gave no record"
    for record in records[:50]:
        priority, sequence, microseconds = record.partition(";")[0].split(",")[:3]
        assert priority.isdigit() and sequence.isdigit() and microseconds.isdigit(), record[:120]
    assert int(records[-1].split(",")[1]) >= int(records[0].split(",")[1])


JOURNAL = os.path.join(HERE, "..", "..", "..", "fixtures", "journalctl")


def journal(*names):
    """A runner that replays the journalctl runs of tests/fixtures/journalctl (real captures and marked hand-made
    ones), each for the argv it was run with."""
    cases = []
    for name in names:
        with open(os.path.join(JOURNAL, name)) as handle:
            cases.append(json.load(handle))

    def run(cmd, **_kwargs):
        case = next(case for case in cases if case["argv"] == cmd)
        return subprocess.CompletedProcess(cmd, case["returncode"], case["stdout"], case["stderr"])

    return run


def no_kmsg(monkeypatch):
    monkeypatch.setattr(gpu_health, "_kmsg_records", lambda path: (_ for _ in ()).throw(PermissionError(1, "denied")))


def test_kmsg_unreadable_falls_back_on_journalctl(monkeypatch):
    no_kmsg(monkeypatch)
    events, source = gpu_health.kernel_xids(gpu_health.KMSG, run=journal("252-root-grep-xid-119.json"))
    assert source == "journalctl" and [(event["xid"], event["time"]) for event in events] == [(119, 1796236499.41115)]
    assert events[0]["bus_id"] == "0000:9b:00" and events[0]["class"] == "hardware"


def test_journalctl_that_shows_no_kernel_message_is_unreadable_not_no_xid(monkeypatch):
    """The real run of a user who may not read the kernel's journal: --grep exits 1, as it does for "no match"."""
    no_kmsg(monkeypatch)
    events, source = gpu_health.kernel_xids(gpu_health.KMSG, run=journal(
        "252-nonroot-grep-no-kernel-journal.json", "252-nonroot-last-no-kernel-journal.json"))
    assert events == []
    assert source == ("unreadable: /dev/kmsg: denied; journalctl shows this user no kernel message of this boot "
                      "(exit 0)")


def test_journalctl_exit_1_is_no_xid_where_the_kernel_journal_is_readable(monkeypatch):
    """The real runs over a kernel journal holding the driver's start and no XID: --grep exits 1, -n 1 shows a line."""
    no_kmsg(monkeypatch)
    events, source = gpu_health.kernel_xids(gpu_health.KMSG, run=journal(
        "252-root-grep-no-xid.json", "252-root-last-kernel-line.json"))
    assert (events, source) == ([], "journalctl")


def test_bus_ids_of_nvidia_smi_and_of_the_kernel_log_match():
    assert gpu_health.bus_key("00000000:9B:00.0") == gpu_health.bus_key("0000:9b:00") == (0, 0x9B, 0)
    assert gpu_health.bus_key("garbage") == (-1, -1, -1)


def test_one_pass_reads_everything_of_a_two_gpu_node(tmp_path):
    run = standin(tmp_path, {"gpus": [{}, {}], "nvlink": {"0": ["26.562 GB/s"], "1": ["26.562 GB/s"]}})
    log = tmp_path / "kmsg"
    log.write_text("")
    found = gpu_health.read(str(log), run=run)
    assert len(found["gpus"]) == 2 and found["processes"] == [] and found["xids"] == []
    assert found["nvlink"] == {"0": {"up": 1, "down": []}, "1": {"up": 1, "down": []}}
    assert [cmd[1] for cmd in run.calls] == [run.calls[0][1], run.calls[1][1], "nvlink"]  # three calls in all


# A real H200 (tests/fixtures/nvidia_smi/h200-*, captured on a lent machine, driver 580.159.04): each call the reader
# makes answered with what nvidia-smi printed there, its exit code too.
H200 = {
    "--query-gpu=" + ",".join(field for _key, field in gpu_health.HEALTH_FIELDS): ("h200-query-health.csv", 0),
    "--query-compute-apps=gpu_bus_id,pid,process_name,used_memory": ("h200-compute-apps.csv", 0),
    "nvlink": ("h200-nvlink-status.txt", 0),
}


def real_h200(cmd, **_kwargs):
    name, code = H200[cmd[1]]
    with open(os.path.join(SMI, name)) as handle:
        return subprocess.CompletedProcess(cmd, code, handle.read(), "")


def test_a_real_h200s_answers_read_as_one_healthy_gpu_without_fabric_nvlink_or_pending_action(tmp_path):
    proc = tmp_path / "proc"
    (proc / "615").mkdir(parents=True)
    (proc / "615" / "status").write_text("Name:\tpython3\nUid:\t0\t0\t0\t0\n")
    log = tmp_path / "kmsg"
    with open(os.path.join(KMSG, "h200-vm-nvrm-records.txt")) as handle:
        log.write_text(handle.read())
    found = gpu_health.read(str(log), run=real_h200, proc=str(proc))
    assert found["error"] == "" and found["lost"] == [] and found["xids"] == []
    (gpu,) = found["gpus"]
    assert gpu == {"index": 0, "uuid": "GPU-22abeb42-7052-94ae-7de3-763221a73c2f", "bus_id": "00000000:00:06.0",
                   "name": "NVIDIA H200", "driver": "580.159.04", "error": "", "temperature": 40.0,
                   "utilization": 0.0, "memory_used": 0.0, "memory_total": 143771.0, "power": 77.26,
                   "sm_clock": 345.0, "sm_clock_max": 1980.0, "ecc_uncorrected": 0.0, "pcie_width": 16.0,
                   "pcie_width_max": 16.0, "event_reasons": 1,
                   # Hopper retires no pages: "[N/A]" is not pending; the fabric fields read "N/A", no brackets.
                   "retired_pending": False, "remap_pending": False, "remap_failure": False,
                   "fabric_state": None, "fabric_status": None, "recovery_action": "None"}
    assert found["processes"] == [{"bus_id": "00000000:00:06.0", "pid": 615, "command": "python3", "memory": 1634.0,
                                   "user": "root"}]
    assert found["nvlink"] == {}  # one GPU: nvlink --status is not asked (and printed nothing there)
    assert gpu_health.nvlink_states(real_h200) == {}


def test_the_refusal_of_a_field_a_real_driver_does_not_know_is_read_as_such():
    with open(os.path.join(SMI, "h200-query-unknown-field.txt")) as handle:
        refusal = handle.read()
    assert gpu_health._INVALID_FIELD.search(refusal).group(1) == "no.such.field"  # pylint: disable=protected-access
