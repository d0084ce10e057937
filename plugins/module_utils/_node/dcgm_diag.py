# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read ``dcgmi diag -r N -j`` into one result per GPU.

The document's keys are DCGM's own (NVIDIA/DCGM nvvs/include/NvvsJsonStrings.h): DCGM 4 writes
{"DCGM Diagnostic": {"test_categories": [{"category", "tests": [{"name", "results": [{"entity_group": "GPU",
"entity_id": 0, "status": "Pass", "warnings": [{"warning", "error_id", ...}]}], "test_summary": {"status"}}]}]},
"entity_groups": [{"entity_group": "GPU", "entities": [{"entity_id", "serial_num", "device_id"}]}],
"metadata": {"version", "Driver Version Detected"}}; DCGM 3 named the top "DCGM GPU Diagnostic" and its results
"gpu_id"/"gpu_ids". A run that could not start writes "runtime_error". Statuses are Pass, Fail, Skip and Not Run;
any other word is kept as it is and never read as a pass.

dcgmi writes a warning as "Fail" in its JSON (dcgmi/Diag.cpp, HelperDisplayDiagResult with its default
DDR_NO_DISPLAY_WARN; only the table view writes "Warn"), so a result's "Fail" is read from DCGM's own severity of
each of its errors ("error_severity", dcgmErrorSeverity_t in dcgmlib/dcgm_errors.h, the same numbers in DCGM 3 and 4):
where every error is one DCGM says the GPU can still work with (MONITOR, CONFIG), the result is a warning; any other
severity (ISOLATE, RESET, TRIAGE, UNKNOWN), or a "Fail" without one, is a failure. The corpus it is tested against,
with each document's source: tests/fixtures/dcgm/README.md.
"""

from __future__ import annotations

import json
import signal
import subprocess
from typing import Any

TOPS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")
KNOWN = {"pass": "Pass", "fail": "Fail", "warn": "Warn", "skip": "Skip", "not run": "Not Run"}
# A GPU's result is the worst of its tests' (an unknown word counts as a failure: it is no evidence of health).
ORDER = ("Fail", "Warn", "Pass", "Skip", "Not Run")
NO_SERIAL = "<<<NOT_SUPPORTED>>>"
# dcgmErrorSeverity_t (dcgmlib/dcgm_errors.h, DCGM 3.3 to 4.6): 1 "can perform workload, but needs to be monitored",
# 2 "cannot perform workload. GPU should be isolated", 5 "this error can be configured", 6 "drain and reset GPU".
SEVERITIES = {0: "NONE", 1: "MONITOR", 2: "ISOLATE", 3: "UNKNOWN", 4: "TRIAGE", 5: "CONFIG", 6: "RESET"}
# The severities after which DCGM says the GPU can still run a workload: a "Fail" made only of these is a warning.
WARNING_SEVERITIES = frozenset((1, 5))


def _document(output: str) -> dict[str, Any] | None:
    """The JSON object in dcgmi's output (DCGM 3 printed a line before it)."""
    start = output.find("{")
    if start < 0:
        return None
    try:
        value = json.loads(output[start:])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _status(raw: Any) -> str:
    return KNOWN.get(str(raw or "").strip().lower(), str(raw or "").strip() or "unknown")


def _entities(result: dict[str, Any]) -> list[tuple[str, int | None]]:
    """The entities a result is for: ("GPU", 0), another group's ("NvSwitch", 0), or ("node", None) for none."""
    group = str(result.get("entity_group") or "GPU")
    for key in ("entity_id", "gpu_id", "gpu_ids"):
        if key in result:
            parts = [part.strip() for part in str(result[key]).split(",") if part.strip()]
            ids = [int(part) for part in parts if part.isdigit()]
            return [("GPU" if group.upper() == "GPU" else group, number) for number in ids]
    return [("node", None)]


def _warnings(result: dict[str, Any]) -> list[Any]:
    warnings = result.get("warnings") or []
    return [warnings] if isinstance(warnings, dict) else list(warnings)


def _messages(result: dict[str, Any]) -> list[str]:
    out = []
    for warning in _warnings(result):
        text = warning.get("warning") if isinstance(warning, dict) else warning
        if text:
            out.append(" ".join(str(text).split()))
    return out


def _severities(result: dict[str, Any]) -> list[int | None]:
    """DCGM's severity of each of a result's errors (None where the error carries none)."""
    found: list[int | None] = []
    for warning in _warnings(result):
        value = warning.get("error_severity") if isinstance(warning, dict) else None
        found.append(value if isinstance(value, int) and not isinstance(value, bool) else None)
    return found


def _judged(status: str, result: dict[str, Any]) -> tuple[str, str]:
    """A result's status as DCGM means it, and the label of a test it did not pass ("warn: CONFIG", "fail: RESET",
    "fail"): dcgmi's "Fail" is a warning where each of its errors has a severity DCGM can still work with."""
    severities = _severities(result)
    names = ", ".join(sorted({SEVERITIES.get(s, str(s)) for s in severities if s is not None}))
    if status == "Fail" and severities and all(s in WARNING_SEVERITIES for s in severities):
        status = "Warn"
    word = status.lower()
    return status, "%s: %s" % (word, names) if names and status in ("Fail", "Warn") else word


def _worst(statuses: list[str]) -> str:
    unknown = [s for s in statuses if s not in ORDER]
    if unknown:
        return unknown[0]
    return min(statuses, key=ORDER.index) if statuses else "Not Run"


def _serials(document: dict[str, Any]) -> dict[int, str]:
    serials = {}
    for group in document.get("entity_groups") or []:
        if str(group.get("entity_group", "")).upper() != "GPU":
            continue
        for entity in group.get("entities") or []:
            serial = str(entity.get("serial_num") or "")
            if str(entity.get("entity_id", "")).isdigit() and serial and serial != NO_SERIAL:
                serials[int(entity["entity_id"])] = serial
    return serials


def _tests(top: dict[str, Any]) -> list[dict[str, Any]]:
    tests = []
    for category in top.get("test_categories") or []:
        tests.extend(test for test in category.get("tests") or [] if isinstance(test, dict))
    return tests


def parse(output: str, rc: int = 0) -> dict[str, Any]:
    """{'version', 'driver', 'gpus': [{'gpu', 'entity', 'serial', 'result', 'failed', 'messages', 'skipped'}],
    'error'}: one entry per GPU ('entity' "GPU 1"), then per other entity DCGM tested ("NvSwitch 0", 'gpu' None), then
    "node" for results that name none. 'skipped' names the tests DCGM did not run there (Skip, Not Run: DCGM runs a
    level's hardware tests only on the GPU models its diag-skus.yaml allows them for, and gives no reason in the
    document). 'error' says why there is no result (not JSON, runtime error)."""
    document = _document(output)
    answer: dict[str, Any] = {"version": None, "driver": None, "gpus": [], "error": None}
    if document is None:
        text = " ".join(output.split())[-400:] or "no output"
        answer["error"] = "dcgmi diag printed no JSON result (exit %d): %s" % (rc, text)
        return answer
    top = next((document[name] for name in TOPS if isinstance(document.get(name), dict)), {})
    metadata = document.get("metadata") or {}
    answer["version"] = metadata.get("version") or top.get("version")
    answer["driver"] = metadata.get("Driver Version Detected") or top.get("Driver Version Detected")
    runtime = top.get("runtime_error") or document.get("runtime_error")
    if runtime:
        answer["error"] = "dcgmi diag could not run: %s" % " ".join(str(runtime).split())
        return answer
    found: dict[tuple[str, int | None], dict[str, Any]] = {}
    for test in _tests(top):
        name = str(test.get("name") or "?")
        results = [r for r in test.get("results") or [] if isinstance(r, dict)]
        summary = test.get("test_summary") or {}
        if not results and summary.get("status"):
            results = [{"status": summary["status"], "warnings": summary.get("warnings")}]
        for result in results:
            status, label = _judged(_status(result.get("status")), result)
            for entity in _entities(result):
                entry = found.setdefault(entity, {"statuses": [], "failed": [], "messages": [], "skipped": []})
                entry["statuses"].append(status)
                if status in ("Skip", "Not Run"):
                    if name not in entry["skipped"]:
                        entry["skipped"].append(name)
                elif status != "Pass":
                    entry["failed"].append("%s (%s)" % (name, label))
                    entry["messages"].extend(_messages(result))
    serials = _serials(document)
    for group, number in sorted(found, key=lambda e: (e[0] != "GPU", e[0] == "node", e[0], e[1] or 0)):
        entry = found[(group, number)]
        gpu = number if group == "GPU" else None
        answer["gpus"].append({"gpu": gpu, "entity": "%s %s" % (group, number) if number is not None else group,
                               "serial": serials.get(gpu) if gpu is not None else None,
                               "result": _worst(entry["statuses"]), "failed": entry["failed"],
                               "messages": entry["messages"], "skipped": entry["skipped"]})
    if not answer["gpus"]:
        answer["error"] = "dcgmi diag returned no test result (exit %d)" % rc
    return answer


# dcgmi's own --timeout (DCGM 3.3.9 and 4: "Specify a timeout in seconds for the execution of the diagnostic",
# dcgmi/CommandLineParser.cpp): past it dcgmi stops the diagnostic itself and writes a runtime error (RunDiagOnce,
# DCGM_ST_TIMEOUT). Only where dcgmi does not end by then is it sent SIGTERM, on which it stops the launched
# diagnostic (ExecuteDiagOnServer: dcgmStopDiagnostic, or AbortDiag, waiting up to 25 s), and SIGKILL last.
STOP_GRACE_S = 30
# What dcgmi's argument parser (TCLAP) says of an option this dcgmi does not know (DCGM before 3.3.9 had no --timeout).
_UNKNOWN_OPTION = "Couldn't find match for argument"


def _communicate(command: list[str], wait_s: float, grace_s: float) -> tuple[int | None, str, str]:
    """Run dcgmi: its exit code (None where it had to be stopped), standard output and error."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = process.communicate(timeout=wait_s)
        return process.returncode, out, err
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)
        try:
            out, err = process.communicate(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
        return None, out, err


def run(dcgmi: str, level: int, timeout: int, grace_s: float = STOP_GRACE_S) -> dict[str, Any]:
    """``dcgmi diag -r LEVEL -j --timeout TIMEOUT`` read into parse()'s answer; where dcgmi outlives its own timeout
    by grace_s it is stopped (SIGTERM, then SIGKILL) and the answer's error says so."""
    base = [dcgmi, "diag", "-r", str(level), "-j"]
    code, out, err = _communicate(base + ["--timeout", str(timeout)], timeout + grace_s, grace_s)
    if code not in (0, None) and _UNKNOWN_OPTION in out + err:
        code, out, err = _communicate(base, timeout + grace_s, grace_s)
    if code is None:
        return {"version": None, "driver": None, "gpus": [],
                "error": "dcgmi diag -r %d did not finish within %d s and was stopped" % (level, timeout)}
    return parse(out + ("\n" + err if not out.strip() else ""), code)
