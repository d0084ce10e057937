"""The report of the nodes' GPU samples (plugin_utils/_postmortem/gpu_report.py): per-node figures, likely stragglers, gpus.png.
The CSVs are written here in gpu_watch.py's columns (its own tests check that it writes them so)."""

import csv
import struct

from ansible_collections.gpufleet.cluster.plugins.module_utils._runtime.gpu_watch import SAMPLE_COLUMNS
from ansible_collections.gpufleet.cluster.plugins.plugin_utils._postmortem import gpu_report

XID = "node1 GPU 1 (0000:19:00.0): XID 79, GPU has fallen off the bus"


def write(folder, host, samples, gpus=2, start=1764064800.0, period=10.0):
    """samples: (utilisation, memory MiB, SM clock, event reasons) per moment, the same on each of the node's GPUs."""
    with open(folder / ("%s.gpus.csv" % host), "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(SAMPLE_COLUMNS)
        for moment, (util, memory, clock, reasons) in enumerate(samples):
            for index in range(gpus):
                writer.writerow([start + moment * period, host, index, "00000000:%02X:00.0" % (0x18 + index), util,
                                 memory, 81559, 400.0, 60 + moment, clock, 1980, reasons])


def png_size(path):
    with open(path, "rb") as handle:
        head = handle.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_per_node_figures_and_the_picture(tmp_path):
    write(tmp_path, "node0", [(0, 1000, 1980, 1), (90, 30000, 1980, 0), (95, 40000, 1980, 0), (95, 40000, 1980, 0)])
    write(tmp_path, "node1", [(0, 1000, 1980, 1), (90, 30000, 1980, 0), (95, 42000, 1980, 0x40), (0, 0, 300, 0)])
    results = [{"host": "node0"}, {"host": "node1", "gpu_fault": XID, "gpu_fault_at": 1764064825.0},
               {"host": "node2"}]  # node2: no GPU, no samples
    found = gpu_report.job_gpus(str(tmp_path), results)
    assert found["lines"] == [
        "node0: 2 GPUs, mean utilisation 70%, peak memory 39.1 GiB, max 63 C, never throttled",
        "node1: 2 GPUs, mean utilisation 46%, peak memory 41.0 GiB, max 63 C, 10 s throttled (HW thermal slowdown); "
        + XID,
        "node1 is a likely straggler: its clocks were held down 25% of the run (HW thermal slowdown)"]
    assert found["picture"] == str(tmp_path / "gpus.png")
    assert png_size(found["picture"]) == (1000, 600)


def test_a_node_whose_clocks_run_slow_under_load_is_named():
    fast = gpu_report.summarize("node0", [
        {"time": "1", "utilization": "95", "memory_used": "1", "temperature": "60", "sm_clock": "1980",
         "event_reasons": "0"}])
    slow = gpu_report.summarize("node1", [
        {"time": "1", "utilization": "95", "memory_used": "1", "temperature": "60", "sm_clock": "1400",
         "event_reasons": "0"}])
    assert gpu_report.stragglers([fast, slow]) == [
        "node1 is a likely straggler: its SM clock under load averaged 1400 MHz, 71% of the fastest node's 1980 MHz"]
    assert gpu_report.stragglers([fast]) == []


def test_no_samples_no_lines_and_no_picture(tmp_path):
    assert gpu_report.job_gpus(str(tmp_path), [{"host": "node0"}]) == {"lines": [], "stragglers": [], "picture": "",
                                                                        "nodes": []}
    assert not (tmp_path / "gpus.png").exists()


def node_pixels(figure, color):
    """How many pixels of the node's colour each axes of the drawn figure has, outside its legend."""
    import numpy  # pylint: disable=import-outside-toplevel

    figure.canvas.draw()
    image = numpy.asarray(figure.canvas.buffer_rgba())[:, :, :3].astype(int)
    height = image.shape[0]
    close = (abs(image - numpy.array(color)).sum(axis=2) < 60)
    counts = []
    for axes in figure.axes:
        inside = numpy.zeros_like(close)
        box = axes.get_window_extent()
        inside[int(height - box.y1):int(height - box.y0), int(box.x0):int(box.x1)] = True
        if axes.get_legend() is not None:
            legend = axes.get_legend().get_window_extent()
            rows = slice(int(height - legend.y1) - 1, int(height - legend.y0) + 1)
            inside[rows, int(legend.x0) - 1:int(legend.x1) + 1] = False
        counts.append(int((close & inside).sum()))
    return counts


FIRST_COLOUR = (0x1F, 0x77, 0xB4)  # matplotlib's first line colour (C0), node0's


def test_a_job_of_a_few_seconds_draws_its_single_samples(tmp_path, monkeypatch):
    """One sample per node (a 7-second job's): a line through one point draws nothing, so each sample is marked."""
    write(tmp_path, "node0", [(80, 30000, 1980, 0)])
    write(tmp_path, "node1", [(60, 20000, 1980, 0)], start=1764064801.0)
    samples = gpu_report.read_samples(str(tmp_path), ["node0", "node1"])
    figure = gpu_report.draw(samples, {})
    assert all(count > 10 for count in node_pixels(figure, FIRST_COLOUR)), node_pixels(figure, FIRST_COLOUR)
    assert figure.axes[1].get_xlabel() == "seconds since the first sample"
    monkeypatch.setattr(gpu_report, "MARKED_SAMPLES", 0)  # the same without markers: nothing of node0 is drawn
    assert node_pixels(gpu_report.draw(samples, {}), FIRST_COLOUR) == [0, 0]
    found = gpu_report.job_gpus(str(tmp_path), [{"host": "node0"}, {"host": "node1"}])
    assert png_size(found["picture"]) == (1000, 600)


def test_a_week_long_job_is_drawn_in_hours_without_markers(tmp_path):
    write(tmp_path, "node0", [(90, 30000, 1980, 0)] * 200, period=3024.0)  # 200 samples over a week
    figure = gpu_report.draw(gpu_report.read_samples(str(tmp_path), ["node0"]), {})
    assert figure.axes[1].get_xlabel() == "hours since the first sample"
    assert figure.axes[0].lines[0].get_marker() in ("None", None, "")
    assert max(figure.axes[0].lines[0].get_xdata()) == 199 * 3024.0 / 3600
