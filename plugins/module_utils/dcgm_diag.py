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
"gpu_id"/"gpu_ids". A run that could not start writes "runtime_error". Statuses are Pass, Fail, Warn, Skip and
Not Run (dcgmi's Diag.cpp); any other word is kept as it is and never read as a pass.
"""

from __future__ import annotations

import json
from typing import Any

TOPS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")
KNOWN = {"pass": "Pass", "fail": "Fail", "warn": "Warn", "skip": "Skip", "not run": "Not Run"}
# A GPU's result is the worst of its tests' (an unknown word counts as a failure: it is no evidence of health).
ORDER = ("Fail", "Warn", "Pass", "Skip", "Not Run")
NO_SERIAL = "<<<NOT_SUPPORTED>>>"


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


def _messages(result: dict[str, Any]) -> list[str]:
    warnings = result.get("warnings") or []
    if isinstance(warnings, dict):
        warnings = [warnings]
    out = []
    for warning in warnings:
        text = warning.get("warning") if isinstance(warning, dict) else warning
        if text:
            out.append(" ".join(str(text).split()))
    return out


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
    """{'version', 'driver', 'gpus': [{'gpu', 'entity', 'serial', 'result', 'failed', 'messages'}], 'error'}: one
    entry per GPU ('entity' "GPU 1"), then per other entity DCGM tested ("NvSwitch 0", 'gpu' None), then "node" for
    results that name none. 'error' says why there is no result (not JSON, runtime error)."""
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
            status = _status(result.get("status"))
            for entity in _entities(result):
                entry = found.setdefault(entity, {"statuses": [], "failed": [], "messages": []})
                entry["statuses"].append(status)
                if status not in ("Pass", "Skip", "Not Run"):
                    entry["failed"].append("%s (%s)" % (name, status.lower()))
                    entry["messages"].extend(_messages(result))
    serials = _serials(document)
    for group, number in sorted(found, key=lambda e: (e[0] != "GPU", e[0] == "node", e[0], e[1] or 0)):
        entry = found[(group, number)]
        gpu = number if group == "GPU" else None
        answer["gpus"].append({"gpu": gpu, "entity": "%s %s" % (group, number) if number is not None else group,
                               "serial": serials.get(gpu) if gpu is not None else None,
                               "result": _worst(entry["statuses"]), "failed": entry["failed"],
                               "messages": entry["messages"]})
    if not answer["gpus"]:
        answer["error"] = "dcgmi diag returned no test result (exit %d)" % rc
    return answer
