#!/usr/bin/python3
"""A stand-in `nvidia-smi` for the test cluster's nodes, driven by a JSON file a test writes (the node has no GPU).

It answers the calls gpufleet makes, in nvidia-smi's own output formats (nvidia-smi(1): --query-gpu and
--query-compute-apps with --format=csv[,noheader][,nounits]; `nvlink --status`; -L), from the state in
/etc/gpufleet-test/gpus.json (or $GPUFLEET_STANDIN_GPUS):

    {"driver": "580.95.05",
     "gpus": [{"pci.bus_id": "00000000:18:00.0", "state": "ok"|"lost"|"reset", "<query field>": value, ...}],
     "processes": [{"gpu": 0, "pid": 4242, "name": "python3", "memory": 10240}],
     "nvlink": {"0": ["26.562 GB/s", "<inactive>"], "1": "all inactive"}}

A GPU's fields default to an idle, healthy H100 SXM (below). "lost": nvidia-smi cannot reach it, as a GPU that has
fallen off the bus ("Unable to determine the device handle for GPU0000:18:00.0: Unknown Error", exit 15, "GPU is
lost" in nvidia-smi(1)'s return values); "reset": its fields read "[GPU requires reset]". A field nvidia-smi does
not know is refused as nvidia-smi refuses it. What this does not do: anything a GPU does; its figures are the file's.

Its formats are a real nvidia-smi's (tests/fixtures/nvidia_smi/h200-*, captured on an H200 with driver 580.159.04):
the header's names and units, the units after values, the refusal's empty line, no output from `nvlink --status` for
a GPU without NVLink; and `nvlink --status` as a workstation's nvidia-smi printed it (nvlink-status-rtx-a6000-*:
a tab and a space before each link, the line in place of the links of a GPU with none up).
tests/unit/test_fixture_sources.py checks that, given those GPUs' values, it prints those captures byte for byte.
"""

import json
import os
import sys

STATE = os.environ.get("GPUFLEET_STANDIN_GPUS", "/etc/gpufleet-test/gpus.json")
# An idle H100 SXM5 80GB as nvidia-smi reports it (units dropped with nounits): 1980 MHz maximum SM clock, PCIe
# Gen5 x16, the GPU-idle clock event reason (0x1) set.
DEFAULTS = {
    "name": "NVIDIA H100 80GB HBM3", "temperature.gpu": 31, "utilization.gpu": 0, "memory.used": 0,
    "memory.total": 81559, "power.draw": 69.52, "clocks.sm": 345, "clocks.max.sm": 1980,
    "clocks_event_reasons.active": "0x0000000000000001", "ecc.errors.uncorrected.volatile.total": 0,
    # Hopper remaps rows and retires no pages: "[N/A]", as the H200 capture has it.
    "retired_pages.pending": "[N/A]", "remapped_rows.pending": "No", "remapped_rows.failure": "No",
    "pcie.link.width.current": 16, "pcie.link.width.max": 16, "persistence_mode": "Enabled",
    # No NVLink fabric and no recovery action pending, as the H200 capture (a GPU without a fabric) prints them.
    "fabric.state": "N/A", "fabric.status": "N/A", "gpu_recovery_action": "None",
}
ALIASES = {"clocks_throttle_reasons.active": "clocks_event_reasons.active", "gpu_name": "name",
           "gpu_bus_id": "pci.bus_id", "gpu_uuid": "uuid"}
UNITS = {"memory.used": " MiB", "memory.total": " MiB", "power.draw": " W", "clocks.sm": " MHz",
         "clocks.max.sm": " MHz", "utilization.gpu": " %", "used_memory": " MiB"}
APP_FIELDS = ("gpu_bus_id", "gpu_uuid", "pid", "process_name", "name", "used_memory")
# How the header names a field where it is not the field's own name (the H200 capture), before its unit.
HEADER_NAMES = {"clocks.sm": "clocks.current.sm", "used_memory": "used_gpu_memory"}


def header(fields: list) -> str:
    names = []
    for field in fields:
        name = ALIASES.get(field, field) if field not in APP_FIELDS else field
        unit = UNITS.get(name, "").strip()
        names.append(HEADER_NAMES.get(field, field) + (" [%s]" % unit if unit else ""))
    return ", ".join(names)


def refuse(field: str) -> int:
    print('Field "%s" is not a valid field to query.\n' % field)
    return 2


def load() -> dict:
    try:
        with open(STATE) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return {"gpus": [{}]}


def gpus(state: dict) -> list:
    found = []
    for index, gpu in enumerate(state.get("gpus") or []):
        values = dict(DEFAULTS, index=index, uuid="GPU-%08d-0000-0000-0000-000000000000" % index,
                      **{"pci.bus_id": "00000000:%02X:00.0" % (0x18 + index), "driver_version": state.get("driver", "580.95.05")})
        values.update(gpu)
        found.append(values)
    return found


def fmt(options: str, field: str, value) -> str:
    text = str(value)
    return text if "nounits" in options or field not in UNITS else text + UNITS[field]


def query_gpu(fields: list, options: str, state: dict) -> int:
    known = set(DEFAULTS) | set(ALIASES) | {"index", "uuid", "pci.bus_id", "driver_version", "count"}
    for field in fields:
        if field not in known:
            return refuse(field)
    if "noheader" not in options:
        print(header(fields))
    code = 0
    for gpu in gpus(state):
        if gpu.get("state") == "lost":
            print("Unable to determine the device handle for GPU%s: Unknown Error" % gpu["pci.bus_id"][4:])
            code = 15
            continue
        row = []
        for field in fields:
            name = ALIASES.get(field, field)
            if gpu.get("state") == "reset" and name not in ("index", "uuid", "pci.bus_id", "name"):
                row.append("[GPU requires reset]")
            else:
                row.append(fmt(options, name, gpu.get(name, "[N/A]")))
        print(", ".join(row))
    return code


def query_apps(fields: list, options: str, state: dict) -> int:
    for field in fields:
        if field not in APP_FIELDS:
            return refuse(field)
    by_index = {gpu["index"]: gpu for gpu in gpus(state)}
    if "noheader" not in options:
        print(header(fields))
    for process in state.get("processes") or []:
        gpu = by_index[process.get("gpu", 0)]
        values = {"gpu_bus_id": gpu["pci.bus_id"], "gpu_uuid": gpu["uuid"], "pid": process["pid"],
                  "process_name": process.get("name", "python3"), "name": process.get("name", "python3"),
                  "used_memory": process.get("memory", 1024)}
        print(", ".join(fmt(options, field, values[field]) for field in fields))
    return 0


# What nvidia-smi prints in place of the links of a GPU none of whose links is up ("all inactive" in the state).
ALL_INACTIVE = "NVML: Unable to retrieve NVLink information as all links are inActive"


def nvlink_status(state: dict) -> int:
    for gpu in gpus(state):
        links = (state.get("nvlink") or {}).get(str(gpu["index"]), [])
        if links:  # a GPU without NVLink gets no line at all
            print("GPU %d: %s (UUID: %s)" % (gpu["index"], gpu["name"], gpu["uuid"]))
        if links == "all inactive":
            print(ALL_INACTIVE)
            continue
        for number, link in enumerate(links):
            print("\t Link %d: %s" % (number, link))
    return 0


def main(argv: list) -> int:
    state = load()
    options = next((arg.split("=", 1)[1] for arg in argv if arg.startswith("--format=")), "csv")
    for arg in argv:
        if arg.startswith("--query-gpu="):
            return query_gpu(arg.split("=", 1)[1].split(","), options, state)
        if arg.startswith("--query-compute-apps="):
            return query_apps(arg.split("=", 1)[1].split(","), options, state)
    if argv[:1] == ["nvlink"] and ("--status" in argv or "-s" in argv):
        return nvlink_status(state)
    if argv[:1] in (["-L"], ["--list-gpus"]):
        for gpu in gpus(state):
            print("GPU %d: %s (UUID: %s)" % (gpu["index"], gpu["name"], gpu["uuid"]))
        return 0
    print("nvidia-smi stand-in: %s is not answered here" % " ".join(argv), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
