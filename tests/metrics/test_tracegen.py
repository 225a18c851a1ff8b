"""The synthetic trace generator writes traces advisor loads like real ones, with the figures it was told."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import tracegen

from advisor.metrics.compute import analyze_path
from advisor.trace.load import load_trace

GPU_SMALL = tracegen.Path(__file__).resolve().parents[1] / "data" / "gpu_small" / "worker0.pt.trace.json.gz"


def test_committed_gpu_small_trace_is_what_the_generator_makes(tmp_path):
    fresh = tracegen.small_model().write(tmp_path / "worker0.pt.trace.json.gz")
    assert gzip.decompress(fresh.read_bytes()) == gzip.decompress(GPU_SMALL.read_bytes()), (
        "tests/data/gpu_small is stale: run .venv/bin/python tests/data/gpu_small/make.py"
    )


def test_gpu_small_loads_with_kernels_launches_shapes_and_modules():
    ev = load_trace(GPU_SMALL).events
    cats = ev["cat"].astype(str)
    kernels = ev[cats == "kernel"]
    launches = ev[(cats == "cuda_runtime") & (ev["name"].astype(str) == "cudaLaunchKernel")]
    assert len(kernels) == 2 * 5 and len(launches) == 2 * 5
    # every kernel pairs with its launch through the correlation id, and starts after it ends
    paired = kernels.merge(launches, on="correlation", suffixes=("", "_rt"))
    assert len(paired) == len(kernels)
    assert (paired["ts"] >= paired["end_rt"] - 1e-6).all()
    addmm = ev[ev["name"].astype(str) == "aten::addmm"]
    assert set(addmm["input_dims"].astype(str)) == {"[[4096],[512,1024],[1024,4096],[],[]]",
                                                    "[[1001],[512,4096],[4096,1001],[],[]]"}
    names = set(ev.loc[cats == "python_function", "name"].astype(str))
    assert {"nn.Module: MLP_0", "nn.Module: Linear_1", "dataset.py(21): __getitem__"} <= names


def test_generated_step_figures_match_what_the_scenario_says(tmp_path):
    path = tracegen.preprocess_in_main_process(steps=3, preprocess_us=8000.0).write(tmp_path / "t.pt.trace.json")
    m = analyze_path(path)
    assert m.summary["step_count"] == 3
    # 6 GEMMs of 200 us per step; the GPU idles at least the 8 ms of preprocessing
    assert m.summary["kernel_count"] == 6
    assert m.summary["gpu_max_gap_ms"] >= 8.0
    busy_ms = m.summary["gpu_busy_frac"] * m.summary["step_time_ms"]
    assert busy_ms == pytest.approx(1.2, rel=1e-9)


def test_launch_bound_scenario_has_thousands_of_tiny_kernels(tmp_path):
    path = tracegen.launch_bound(steps=2, kernels=2000).write(tmp_path / "t.pt.trace.json.gz")
    m = analyze_path(path)
    assert m.summary["kernel_count"] == 2000
    assert m.summary["small_kernel_frac"] == 1.0
    assert np.isclose(m.summary["kernel_median_us"], 2.0)
