"""dcgmi diag -j documents read into one result per GPU (fixtures: tests/fixtures/dcgm, DCGM's JSON keys)."""

import os
import signal
import sys
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils._node import dcgm_diag

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "dcgm")


def read(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def test_a_passing_level_1_gives_each_gpu_pass_with_its_serial():
    result = dcgm_diag.parse(read("dcgm-4.5.2-r1-pass.json"))
    assert result["error"] is None and result["version"] == "4.5.2" and result["driver"] == "580.95.05"
    assert result["gpus"] == [
        {"gpu": 0, "entity": "GPU 0", "serial": "1650123000001", "result": "Pass", "failed": [], "messages": [],
         "skipped": []},
        {"gpu": 1, "entity": "GPU 1", "serial": "1650123000002", "result": "Pass", "failed": [], "messages": [],
         "skipped": []}]


def test_a_real_persistence_mode_warning_written_as_fail_is_read_as_the_warning_dcgm_means():
    """The real capture (GB10, DCGM 4.2.3, exit 226): dcgmi writes the software test's WARN as "Fail"; its one
    error is DCGM_FR_PERSISTENCE_MODE (29) with severity CONFIG (5), which DCGM says the GPU can work with."""
    result = dcgm_diag.parse(read("dcgm-4.2.3-r1-persistence-disabled.json"), rc=226)
    assert result["error"] is None and result["version"] == "4.2.3" and result["driver"] == "580.82.09"
    assert result["gpus"] == [{
        "gpu": 0, "entity": "GPU 0", "serial": None, "result": "Warn", "failed": ["software (warn: CONFIG)"],
        "messages": ['Persistence Mode: Persistence mode for GPU 0 is disabled. Enable persistence mode by running '
                     '"nvidia-smi -i <gpuId> -pm 1 " as root.'], "skipped": []}]


def test_a_pending_page_retirement_fails_with_dcgms_severity_and_message():
    result = dcgm_diag.parse(read("dcgm-4.5.2-r1-pending-retirement.json"), rc=226)
    gpu0, gpu1 = result["gpus"]
    assert gpu0["result"] == "Pass" and gpu0["failed"] == []
    assert gpu1 == {"gpu": 1, "entity": "GPU 1", "serial": "1650123000002", "result": "Fail",
                    "failed": ["software (fail: RESET)"],
                    "messages": ["Page Retirement/Row Remap: A pending retired page has been detected in GPU 1. "
                                 "Monitor - this GPU can still perform workload"], "skipped": []}


PERSISTENCE = ('Persistence Mode: Persistence mode for GPU 0 is disabled. Enable persistence mode by running '
               '"nvidia-smi -i <gpuId> -pm 1 " as root.')


def test_a_real_level_2_whose_hardware_tests_dcgm_skipped_names_them_and_is_no_pass():
    """The real pair (GB10, DCGM 4.5.2, level 2, exit 226 both, minutes apart): without DCGM's per-model permission
    the memory and pcie plugins are "Skip" with no reason given; with -p memory.is_allowed=true;pcie.is_allowed=true
    they ran and passed. test_summary repeats the software test's warning: it is read once."""
    gated = dcgm_diag.parse(read("dcgm-4.5.2-r2-memory-pcie-skipped.json"), rc=226)
    assert gated["error"] is None and gated["version"] == "4.5.2" and gated["driver"] == "580.82.09"
    assert gated["gpus"] == [{"gpu": 0, "entity": "GPU 0", "serial": None, "result": "Warn",
                              "failed": ["software (warn: CONFIG)"], "messages": [PERSISTENCE],
                              "skipped": ["memory", "pcie"]}]
    allowed = dcgm_diag.parse(read("dcgm-4.5.2-r2-memory-pcie-allowed.json"), rc=226)
    assert allowed["gpus"] == [dict(gated["gpus"][0], skipped=[])]


def test_a_gpu_whose_only_error_was_fixed_still_names_the_tests_dcgm_did_not_run():
    """The gated capture with persistence mode on (its software result a Pass, as level 1 writes one): the GPU's
    result is Pass, and what did not run is still named, never folded into the pass."""
    import json

    document = json.loads(read("dcgm-4.5.2-r2-memory-pcie-skipped.json"))
    software = document["DCGM Diagnostic"]["test_categories"][0]["tests"][0]
    software["results"][0] = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"}
    software["test_summary"] = {"status": "Pass"}
    (gpu,) = dcgm_diag.parse(json.dumps(document))["gpus"]
    assert (gpu["result"], gpu["failed"], gpu["skipped"]) == ("Pass", [], ["memory", "pcie"])
    for test in document["DCGM Diagnostic"]["test_categories"][0]["tests"]:
        test["results"][0]["status"] = "Skip"
    (gpu,) = dcgm_diag.parse(json.dumps(document))["gpus"]
    assert (gpu["result"], gpu["skipped"]) == ("Skip", ["software", "memory", "pcie"])


def _one_result(status, warnings):
    import json

    return json.dumps({"DCGM Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [{
        "name": "software", "results": [{"entity_group": "GPU", "entity_id": 0, "status": status,
                                         "warnings": warnings}]}]}]}})


def test_a_fail_is_a_warning_only_when_every_error_is_one_dcgm_says_the_gpu_can_work_with():
    config = {"warning": "Persistence Mode: off", "error_id": 29, "error_category": 8, "error_severity": 5}
    monitor = {"warning": "clocks held", "error_id": 10, "error_category": 9, "error_severity": 1}
    isolate = {"warning": "Detected 1 volatile double-bit ECC error(s) in GPU 0.", "error_id": 4,
               "error_category": 10, "error_severity": 2}
    triage = {"warning": "stress level", "error_id": 50, "error_category": 4, "error_severity": 4}
    judged = {name: dcgm_diag.parse(_one_result("Fail", warnings))["gpus"][0]
              for name, warnings in {"config+monitor": [config, monitor], "config+isolate": [config, isolate],
                                     "triage": [triage], "no severity": [{"warning": "DCGM 2 text"}],
                                     "no error": []}.items()}
    assert {name: (gpu["result"], gpu["failed"]) for name, gpu in judged.items()} == {
        "config+monitor": ("Warn", ["software (warn: CONFIG, MONITOR)"]),
        "config+isolate": ("Fail", ["software (fail: CONFIG, ISOLATE)"]),
        "triage": ("Fail", ["software (fail: TRIAGE)"]),
        "no severity": ("Fail", ["software (fail)"]),
        "no error": ("Fail", ["software (fail)"])}
    # A Skip keeps its word, whatever its warnings' severities (DCGM skips a test ECC cannot run).
    assert dcgm_diag.parse(_one_result("Skip", [isolate]))["gpus"][0]["result"] == "Skip"


def test_a_run_that_could_not_finish_is_an_error_not_a_pass():
    result = dcgm_diag.parse(read("dcgm-4.5.2-runtime-error.json"), rc=245)
    assert result["gpus"] == []
    assert result["error"] == ("dcgmi diag could not run: Error: Unable to complete diagnostic for entities "
                               "*,cpu:*. Return: (-11) : Timeout")


def test_dcgm3_layout_and_the_line_before_its_json():
    result = dcgm_diag.parse(read("dcgm-3.3.9-r1-pass.txt"))
    assert result["version"] == "3.3.9"
    # The Denylist result names no GPU: it is kept as the node's, not given to a GPU.
    assert [(g["entity"], g["result"]) for g in result["gpus"]] == [("GPU 0", "Pass"), ("GPU 1", "Skip"),
                                                                     ("node", "Pass")]


def test_output_without_json_says_what_dcgmi_printed():
    result = dcgm_diag.parse("Error: unable to establish a connection to the specified host: localhost\n", rc=255)
    assert result["gpus"] == [] and result["error"].startswith("dcgmi diag printed no JSON result (exit 255): Error:")


def test_an_unknown_status_word_is_never_a_pass():
    document = ('{"DCGM Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [{"name": "software",'
                ' "results": [{"entity_group": "GPU", "entity_id": 0, "status": "Inconclusive"},'
                ' {"entity_group": "GPU", "entity_id": 0, "status": "Pass"}]}]}]}}')
    (gpu,) = dcgm_diag.parse(document)["gpus"]
    assert gpu["result"] == "Inconclusive" and gpu["failed"] == ["software (inconclusive)"]


def test_a_document_with_no_result_is_an_error():
    assert dcgm_diag.parse('{"DCGM Diagnostic": {"test_categories": []}}')["error"] == \
        "dcgmi diag returned no test result (exit 0)"


def test_results_for_other_entities_are_kept_under_their_own_name():
    document = ('{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "nvswitch",'
                ' "results": [{"entity_group": "NvSwitch", "entity_id": 0, "status": "Fail"},'
                ' {"entity_group": "GPU", "entity_id": 3, "status": "Pass"}]}]}]}}')
    assert [(g["gpu"], g["entity"], g["result"]) for g in dcgm_diag.parse(document)["gpus"]] == [
        (3, "GPU 3", "Pass"), (None, "NvSwitch 0", "Fail")]


def _fake_dcgmi(tmp_path, body):
    script = tmp_path / "dcgmi"
    script.write_text("#!%s\nimport os, signal, sys, time\nARGS = sys.argv[1:]\n%s" % (sys.executable, body))
    script.chmod(0o755)
    return str(script)


def test_dcgmi_is_given_its_own_timeout_and_its_runtime_error_is_read(tmp_path):
    """dcgmi --timeout stops the diagnostic itself (DCGM 3.3.9 and 4) and writes a runtime error."""
    document = os.path.join(FIXTURES, "dcgm-4.5.2-runtime-error.json")
    dcgmi = _fake_dcgmi(tmp_path, "open(%r, 'w').write(' '.join(ARGS))\nsys.stdout.write(open(%r).read())\n"
                                  "sys.exit(245)\n" % (str(tmp_path / "argv"), document))
    result = dcgm_diag.run(dcgmi, 1, 300)
    assert (tmp_path / "argv").read_text() == "diag -r 1 -j --timeout 300"
    assert result["gpus"] == [] and result["error"].endswith("Return: (-11) : Timeout")


def test_a_dcgmi_that_outlives_its_timeout_gets_sigterm_to_stop_its_diagnostic_not_sigkill(tmp_path):
    marker = tmp_path / "signal"
    dcgmi = _fake_dcgmi(tmp_path, "def stop(number, _frame):\n    open(%r, 'w').write(str(number))\n    sys.exit(203)\n"
                                  "signal.signal(signal.SIGTERM, stop)\ntime.sleep(60)\n" % str(marker))
    started = time.monotonic()
    result = dcgm_diag.run(dcgmi, 1, 1, grace_s=5)
    assert time.monotonic() - started < 30
    assert result["error"] == "dcgmi diag -r 1 did not finish within 1 s and was stopped"
    assert marker.read_text() == str(signal.SIGTERM)


def test_a_dcgmi_without_the_timeout_option_is_run_again_without_it(tmp_path):
    document = os.path.join(FIXTURES, "dcgm-4.5.2-r1-pass.json")
    dcgmi = _fake_dcgmi(tmp_path, "if '--timeout' in ARGS:\n"
                                  "    print('PARSE ERROR:  \\n             Couldn\\'t find match for argument --timeout')\n"
                                  "    sys.exit(254)\n"
                                  "sys.stdout.write(open(%r).read())\n" % document)
    result = dcgm_diag.run(dcgmi, 1, 300)
    assert result["error"] is None and [gpu["result"] for gpu in result["gpus"]] == ["Pass", "Pass"]
