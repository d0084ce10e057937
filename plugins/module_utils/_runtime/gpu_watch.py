# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A node's GPUs while its part of a job runs: the kernel log followed for new XIDs (a new hardware or driver XID
is this node's failure, with its own reason), and the GPUs sampled every sample_s into gpus.csv in the job folder.

The supervisor polls it once a turn of its loop; nothing here blocks: a sample is one `nvidia-smi --query-gpu`
started in the background and read on a later turn (a GPU that has fallen off the bus can hang nvidia-smi for
minutes), the kernel log is read without waiting. On a node without nvidia-smi it says "no GPU" once and costs
nothing. Shipped with the supervisor; standard library only, Python 3.8+.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gpu_health import (
    _INVALID_FIELD,
    FIELD_ALIASES,
    _gpu_row,
    boot_time,
    bus_key,
    parse_xid,
    short_bus,
)

GPU_SAMPLES_FILE = "gpus.csv"
# The fields of one sample, as nvidia-smi names them and as the CSV's columns name them (after time and host).
SAMPLE_FIELDS = (("index", "index"), ("bus_id", "pci.bus_id"), ("utilization", "utilization.gpu"),
                 ("memory_used", "memory.used"), ("memory_total", "memory.total"), ("power", "power.draw"),
                 ("temperature", "temperature.gpu"), ("sm_clock", "clocks.sm"), ("sm_clock_max", "clocks.max.sm"),
                 ("event_reasons", "clocks_event_reasons.active"))
SAMPLE_COLUMNS = ("time", "host") + tuple(key for key, _field in SAMPLE_FIELDS)


class KernelFollower:
    """The kernel log's records from now on: /dev/kmsg read from its end, or a file in its format (the tests')
    read from its size when opened. ``error`` says why it cannot be read ('' when it can)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd: int | None = None
        self.offset = 0
        self.error = ""
        try:
            if os.path.isfile(path):
                self.offset = os.path.getsize(path)
            else:
                self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
                os.lseek(self.fd, 0, os.SEEK_END)
        except OSError as exc:
            self.error = "%s: %s" % (path, exc.strerror or exc)

    def new_records(self) -> list[str]:
        if self.error:
            return []
        if self.fd is None:
            return self._file_records()
        records = []
        while True:
            try:
                chunk = os.read(self.fd, 8192)
            except BlockingIOError:
                return records
            except BrokenPipeError:
                continue  # records overwritten before they were read: go on with the next
            except OSError as exc:
                self.error = "%s: %s" % (self.path, exc.strerror or exc)
                return records
            if not chunk:
                return records
            records.append(chunk.decode("utf-8", "replace"))

    def _file_records(self) -> list[str]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except OSError:
            return []
        complete = data[:data.rfind(b"\n") + 1]  # a line still being written waits for the next read
        self.offset += len(complete)
        return complete.decode("utf-8", "replace").splitlines()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class GpuWatch:
    """The supervisor's watch over its node's GPUs for one run of a job."""

    def __init__(self, job_dir: str, host: str, sample_s: float, kernel_log: str) -> None:
        self.job_dir = job_dir
        self.host = host
        self.sample_s = max(float(sample_s or 0), 0.0)
        self.kernel_log = kernel_log
        self.enabled = False
        self.kernel: KernelFollower | None = None
        self.sampler: subprocess.Popen | None = None
        self.sampler_started = 0.0
        self.next_sample = 0.0
        self.gpus: dict[tuple[int, int, int], int] = {}  # bus -> index, from the samples
        self.fields = list(SAMPLE_FIELDS)  # less what this driver does not know (asked by an older name, or not)
        self.fault: tuple[str, float] | None = None  # the reason and time of the first new hardware XID
        self.booted = 0.0

    def start(self) -> str:
        """Begin watching; the line the supervisor logs about it."""
        if not shutil.which("nvidia-smi"):
            return "GPU watch: no GPU on this node (no nvidia-smi); nothing is sampled"
        self.enabled = True
        self.booted = boot_time()
        self.kernel = KernelFollower(self.kernel_log)
        said = ["GPU watch: sampled every %g s into %s" % (self.sample_s, GPU_SAMPLES_FILE) if self.sample_s
                else "GPU watch: not sampled (gpu_sample_s=0)"]
        said.append("XIDs not watched (%s)" % self.kernel.error if self.kernel.error
                    else "new XIDs in %s stop the job" % self.kernel_log)
        return "; ".join(said)

    def poll(self, now: float | None = None) -> tuple[str, float] | None:
        """One look: a new hardware or driver XID's reason and time (the first one, then always it), else None;
        a sample collected or started when one is due."""
        if not self.enabled:
            return None
        now = time.time() if now is None else now
        self._collect(now)
        if self.sample_s and now >= self.next_sample and self.sampler is None:
            self._start_sample(now)
        if self.fault is None and self.kernel is not None:
            for record in self.kernel.new_records():
                event = parse_xid(record.partition(";")[2] or record)
                if event is not None and event["class"] == "hardware":
                    self.fault = (self._reason(event), now)
                    break
        return self.fault

    def _reason(self, event: dict) -> str:
        index = self.gpus.get(bus_key(event["bus_id"]))
        gpu = "GPU %d (%s)" % (index, short_bus(event["bus_id"])) if index is not None else (
            "GPU at %s" % short_bus(event["bus_id"]))
        return "%s %s: XID %d, %s" % (self.host, gpu, event["xid"], event["meaning"])

    def _start_sample(self, now: float) -> None:
        query = ",".join(field for _key, field in self.fields)
        try:
            self.sampler = subprocess.Popen(  # pylint: disable=consider-using-with
                ["nvidia-smi", "--query-gpu=" + query, "--format=csv,noheader,nounits"], stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
        except OSError:
            self.sampler = None
        self.sampler_started = now
        self.next_sample = now + self.sample_s

    def _collect(self, now: float) -> None:
        """A finished sample's rows appended to the CSV; one that has run past three periods is ended (our own
        child, by its PID) and skipped."""
        sampler = self.sampler
        if sampler is None:
            return
        if sampler.poll() is None:
            if now - self.sampler_started > 3 * max(self.sample_s, 1.0):
                sampler.kill()
                sampler.communicate()
                self.sampler = None
            return
        out = sampler.communicate()[0] or ""
        self.sampler = None
        names = [key for key, _field in self.fields]
        rows = [_gpu_row(names, line) for line in out.splitlines() if line.count(",") == len(names) - 1]
        invalid = _INVALID_FIELD.search(out)
        if invalid and not rows:
            self._drop_field(invalid.group(1))
            self.next_sample = now  # again at once, without it
        if not rows:
            return
        path = os.path.join(self.job_dir, GPU_SAMPLES_FILE)
        fresh = not os.path.exists(path)
        with open(path, "a", newline="") as handle:
            writer = csv.writer(handle)
            if fresh:
                writer.writerow(SAMPLE_COLUMNS)
            for row in rows:
                self.gpus[bus_key(str(row["bus_id"]))] = int(row["index"])
                writer.writerow([round(self.sampler_started, 3), self.host] + [
                    "" if row.get(key) is None else row[key] for key in SAMPLE_COLUMNS[2:]])

    def _drop_field(self, field: str) -> None:
        """A field the driver refused: asked by its older name from now on, else left out."""
        for position, (key, known) in enumerate(self.fields):
            if known == field:
                alias = FIELD_ALIASES.get(field)
                if alias:
                    self.fields[position] = (key, alias)
                else:
                    del self.fields[position]
                return

    def close(self) -> None:
        """Stop watching: a sample still running is ended (our own child), the kernel log closed."""
        if self.sampler is not None:
            self.sampler.kill()
            self.sampler.communicate()
            self.sampler = None
        if self.kernel is not None:
            self.kernel.close()
