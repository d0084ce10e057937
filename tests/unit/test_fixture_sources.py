"""The corpus of outside tools' output (tests/fixtures/<tool>/): every document names its source, and the test
cluster's stand-ins print only what the corpus holds.

A fixture written by the same hands as its reader carries the reader's misreadings, so each file says where it is
from: a real capture, verbatim from the tool's own source or docs or a public report, or marked hand-made where
nothing real was found."""

import json
import os
import re
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures")
sys.path.insert(0, os.path.join(HERE, "..", "cluster"))

import standin_repo  # noqa: E402  (tests/cluster, the stand-in packages)
from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime import gpu_health  # noqa: E402

# The folders that hold an outside tool's output (the others hold gpufleet's own inputs or CRD schemas).
TOOL_CORPORA = ("dcgm", "dcgm_exporter", "journalctl", "kmsg", "nvidia_smi", "sysfs_infiniband")


@pytest.mark.parametrize("tool", TOOL_CORPORA)
def test_every_document_names_its_source_in_the_readme(tool):
    folder = os.path.join(FIXTURES, tool)
    with open(os.path.join(folder, "README.md")) as handle:
        rows = [line for line in handle if line.startswith("| `")]
    described = {re.match(r"\| `([^`]+)`", row).group(1): row for row in rows}
    documents = sorted(name for name in os.listdir(folder) if name != "README.md")
    assert documents and sorted(described) == documents
    for name in documents:  # a hand-made document says so in its name too
        assert ("**hand-made" in described[name]) == name.startswith("handmade-") or tool == "dcgm", name
    for name, row in described.items():
        assert re.search(r"\*\*(real capture|verbatim from [^*]+|hand-made[^*]*)\*\*", row), \
            "%s: %s says neither real, verbatim from its source, nor hand-made" % (tool, name)


@pytest.fixture(name="host_engine")
def fixture_host_engine():
    """A process named nv-hostengine, as the stand-in dcgmi (like the real one) needs its host engine."""
    engine = subprocess.Popen(["bash", "-c", "exec -a nv-hostengine sleep 60"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open("/proc/%d/cmdline" % engine.pid, "rb") as handle:
                if handle.read().startswith(b"nv-hostengine"):
                    break
        except OSError:
            pass
        time.sleep(0.05)
    yield engine
    engine.kill()
    engine.wait()


def _dcgmi(tmp_path, case, *args, proc="/proc"):
    script = tmp_path / "dcgmi"
    script.write_text(standin_repo.DCGMI_SCRIPT)
    control = tmp_path / "control"
    control.mkdir(exist_ok=True)
    if case is not None:
        (control / "dcgm-diag").write_text(case + "\n")
    env = dict(os.environ, GPUFLEET_STANDIN_DCGM_CORPUS=os.path.join(FIXTURES, "dcgm"),
               GPUFLEET_STANDIN_CONTROL=str(control), GPUFLEET_STANDIN_PROC=proc)
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, env=env, check=False, timeout=30)


@pytest.mark.parametrize("case", sorted(standin_repo.DCGM_REPLAYS))
def test_the_standin_dcgmi_prints_a_corpus_document_byte_for_byte_with_dcgmis_exit_code(tmp_path, host_engine, case):
    del host_engine
    name, code, level = standin_repo.DCGM_REPLAYS[case]
    done = _dcgmi(tmp_path, case, "diag", "-r", str(level or 1), "-j", "--timeout", "300")
    with open(os.path.join(FIXTURES, "dcgm", name), "rb") as handle:
        assert done.stdout == handle.read()
    assert done.returncode == code and done.stderr == b""


def test_the_standin_dcgmi_without_its_host_engine_replays_the_runtime_error(tmp_path):
    (tmp_path / "proc").mkdir()  # a /proc of no process (a test cluster's nodes may run theirs on this kernel)
    done = _dcgmi(tmp_path, None, "diag", "-r", "1", "-j", proc=str(tmp_path / "proc"))
    with open(os.path.join(FIXTURES, "dcgm", standin_repo.DCGM_REPLAYS["runtime-error"][0]), "rb") as handle:
        assert done.stdout == handle.read() and done.returncode == 245


def test_the_standin_dcgmi_refuses_what_it_does_not_stand_in_for(tmp_path, host_engine):
    del host_engine
    assert _dcgmi(tmp_path, "pass", "discovery", "-l").returncode != 0
    unknown = _dcgmi(tmp_path, "a-document-nobody-captured", "diag", "-r", "1", "-j")
    assert unknown.returncode != 0 and unknown.stdout == b"" and b"no document" in unknown.stderr
    # A level-2 run's document is no answer to a level-1 run.
    other = _dcgmi(tmp_path, "memory-pcie-skipped", "diag", "-r", "1", "-j")
    assert other.returncode != 0 and other.stdout == b"" and b"is a level-2 run, asked for -r 1" in other.stderr


def test_the_stand_in_package_carries_the_corpus_documents_it_replays():
    files = {path: content for name, _version, found in standin_repo.PACKAGES
             if name == "datacenter-gpu-manager-4-core" for path, content in found.items()}
    for name, _code, _level in standin_repo.DCGM_REPLAYS.values():
        with open(os.path.join(FIXTURES, "dcgm", name)) as handle:
            assert files["%s/%s" % (standin_repo.DCGM_CORPUS, name)] == handle.read()


NVIDIA_SMI = os.path.join(HERE, "..", "cluster", "scripts", "nvidia_smi_standin.py")
SMI_CORPUS = os.path.join(FIXTURES, "nvidia_smi")


def _smi_capture(name):
    with open(os.path.join(SMI_CORPUS, name)) as handle:
        return handle.read()


def _h200_state(name):
    """The stand-in's state for the captured H200, each field's value as that capture printed it (units dropped)."""
    lines = _smi_capture(name).splitlines()
    row = lines[1] if lines[0].startswith("index") else lines[0]
    fields = [field for _key, field in gpu_health.HEALTH_FIELDS]
    values = [value.strip() for value in row.split(",")]
    values = [value.rsplit(" ", 1)[0] if value.rsplit(" ", 1)[-1] in ("%", "MiB", "W", "MHz") else value
              for value in values]
    gpu = dict(zip(fields, values))
    del gpu["index"]  # the stand-in numbers its GPUs in order, as nvidia-smi does
    return fields, {"driver": gpu.pop("driver_version"), "gpus": [gpu],
                    "processes": [{"gpu": 0, "pid": 615, "name": "python3", "memory": 1634}]}


def _standin_smi(tmp_path, state, *args):
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(state))
    return subprocess.run([sys.executable, NVIDIA_SMI, *args], capture_output=True, text=True, check=False,
                          env=dict(os.environ, GPUFLEET_STANDIN_GPUS=str(path)), timeout=30)


@pytest.mark.parametrize("capture, options", [("h200-query-health.csv", "csv,noheader,nounits"),
                                              ("h200-query-health-header.csv", "csv")])
def test_the_standin_nvidia_smi_prints_the_real_h200s_health_query_byte_for_byte(tmp_path, capture, options):
    fields, state = _h200_state(capture)
    done = _standin_smi(tmp_path, state, "--query-gpu=" + ",".join(fields), "--format=" + options)
    assert (done.stdout, done.returncode) == (_smi_capture(capture), 0)


def test_the_standin_nvidia_smi_prints_a_real_workstations_nvlink_status_byte_for_byte(tmp_path):
    """Three RTX A6000s, GPUs 0 and 1 bridged, GPU 2 without a bridge (each GPU's name and UUID from the capture)."""
    capture = _smi_capture("nvlink-status-rtx-a6000-one-gpu-unbridged.txt")
    heads = re.findall(r"^GPU \d+: (.+) \(UUID: (GPU-[0-9a-f-]+)\)$", capture, re.M)
    state = {"gpus": [{"name": name, "uuid": uuid} for name, uuid in heads],
             "nvlink": {"0": ["14.062 GB/s"] * 4, "1": ["14.062 GB/s"] * 4, "2": "all inactive"}}
    done = _standin_smi(tmp_path, state, "nvlink", "--status")
    assert (done.stdout, done.returncode) == (capture, 0)


@pytest.mark.parametrize("args, capture, code", [
    (["--query-compute-apps=gpu_bus_id,pid,process_name,used_memory", "--format=csv,noheader,nounits"],
     "h200-compute-apps.csv", 0),
    (["--query-compute-apps=gpu_bus_id,pid,process_name,used_memory", "--format=csv"],
     "h200-compute-apps-header.csv", 0),
    (["-L"], "h200-list.txt", 0),
    (["nvlink", "--status"], "h200-nvlink-status.txt", 0),
    (["--query-gpu=index,no.such.field", "--format=csv"], "h200-query-unknown-field.txt", 2),
    (["--query-gpu=persistence_mode", "--format=csv,noheader"], "h200-query-persistence.csv", 0),
])
def test_the_standin_nvidia_smi_answers_the_other_calls_as_the_real_h200_did(tmp_path, args, capture, code):
    _fields, state = _h200_state("h200-query-health.csv")
    state["gpus"][0]["memory.used"] = 1643  # as while the captured process held its memory
    done = _standin_smi(tmp_path, state, *args)
    assert (done.stdout, done.returncode) == (_smi_capture(capture), code)
