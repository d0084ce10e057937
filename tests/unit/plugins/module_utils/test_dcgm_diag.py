"""dcgmi diag -j documents read into one result per GPU (fixtures: tests/fixtures/dcgm, DCGM's JSON keys)."""

import os

from ansible_collections.gpufleet.cluster.plugins.module_utils import dcgm_diag

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "dcgm")


def read(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def test_a_passing_level_1_gives_each_gpu_pass_with_its_serial():
    result = dcgm_diag.parse(read("dcgm4_r1_pass.json"))
    assert result["error"] is None and result["version"] == "4.5.2" and result["driver"] == "580.95.05"
    assert result["gpus"] == [
        {"gpu": 0, "entity": "GPU 0", "serial": "1650123000001", "result": "Pass", "failed": [], "messages": []},
        {"gpu": 1, "entity": "GPU 1", "serial": "1650123000002", "result": "Pass", "failed": [], "messages": []}]


def test_a_failed_gpu_keeps_its_test_and_dcgms_message_and_a_warning_is_a_warning():
    result = dcgm_diag.parse(read("dcgm4_r1_gpu1_fail.json"), rc=226)
    gpu0, gpu1 = result["gpus"]
    assert gpu0["result"] == "Warn" and gpu0["failed"] == ["software (warn)"]
    assert gpu1 == {"gpu": 1, "entity": "GPU 1", "serial": None, "result": "Fail", "failed": ["software (fail)"],
                    "messages": ["GPU 1 has pending row remaps (gpufleet test text)."]}


def test_a_run_that_could_not_start_is_an_error_not_a_pass():
    result = dcgm_diag.parse(read("dcgm4_runtime_error.json"), rc=1)
    assert result["gpus"] == []
    assert result["error"] == "dcgmi diag could not run: Unable to connect to the host engine (gpufleet test text)."


def test_dcgm3_layout_and_the_line_before_its_json():
    result = dcgm_diag.parse(read("dcgm3_r1_pass.txt"))
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
