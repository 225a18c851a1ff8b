"""The registry declares every metric the analysis writes, and the summary holds exactly its keys.

Checked on a recorded CPU trace (tests/data/cpu_small) and on a tiny GPU trace built here, so
both branches of every GPU-only family are seen without the real GPU traces.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.metrics.compute import analyze_path, compute_metrics
from advisor.metrics.registry import (
    BREAKDOWN_PARTS,
    FAMILIES,
    METRICS,
    SCOPES,
    STEP_KEYS,
    is_declared,
)
from advisor.metrics.steps import analyze_trace
from advisor.trace.load import load_traces

DATA = Path(__file__).resolve().parents[1] / "data"


def _gpu_trace(tmp_path: Path) -> Path:
    """Two profiler steps, each an aten::mm launching one kernel, one H2D copy, and a gloo all-reduce."""
    events = []
    for i, t0 in enumerate((0, 1000)):
        c = 10 * (i + 1)
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i + 1}", "pid": 1, "tid": 1, "ts": t0, "dur": 900},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t0 + 10, "dur": 100,
             "args": {"Input Dims": [[4, 4], [4, 4]], "Input type": ["float", "float"]}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t0 + 20, "dur": 5,
             "args": {"correlation": c}},
            {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": t0 + 50, "dur": 30,
             "args": {"correlation": c, "device": 0, "stream": 7}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": t0 + 200, "dur": 5,
             "args": {"correlation": c + 1}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,
             "ts": t0 + 210, "dur": 20, "args": {"correlation": c + 1, "device": 0, "stream": 7, "bytes": 4096}},
            {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 3, "ts": t0 + 300, "dur": 200},
        ]
    path = tmp_path / "gpu.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}]}))
    return path


@pytest.fixture(params=["cpu", "gpu"])
def metrics(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "cpu":
        return analyze_path(DATA / "cpu_small")
    traces = load_traces(_gpu_trace(tmp_path))
    assert analyze_trace(traces[0]).cls.has_gpu  # the GPU branch of every family runs
    return compute_metrics(traces)


def test_every_written_column_is_declared(metrics) -> None:
    undeclared = [c for c in metrics.steps.columns if c not in METRICS and c not in STEP_KEYS]
    assert not undeclared, f"declare these in advisor/metrics/registry.py: {undeclared}"
    rank_cols = [c for c in metrics.ranks.columns if c not in METRICS and c not in ("rank", "file")]
    assert not rank_cols, f"per-rank columns not declared: {rank_cols}"


def test_summary_holds_exactly_the_declared_metrics(metrics) -> None:
    assert list(metrics.summary) == list(METRICS)
    assert "comm_time_ms" in metrics.steps.columns


def test_step_columns_are_the_families_in_order(metrics) -> None:
    parts = [f"{p}_{unit}" for p in BREAKDOWN_PARTS for unit in ("frac", "ms")]
    family_cols = [name for names in FAMILIES.values() for name in names]
    cols = list(metrics.steps.columns)
    assert cols[: len(STEP_KEYS)] == list(STEP_KEYS)
    assert sorted(cols[len(STEP_KEYS):]) == sorted(["step_time_ms", *parts, *family_cols])
    assert [c for c in cols if c in family_cols] == family_cols


def test_families_and_scopes_are_declared() -> None:
    assert {spec.scope for spec in METRICS.values()} <= set(SCOPES)
    for family, names in FAMILIES.items():
        assert all(name in METRICS for name in names), family
    assert is_declared("comm_time_ms") and is_declared("comm_overlap_frac")


def test_gpu_families_have_values_on_gpu_and_none_on_cpu(tmp_path: Path) -> None:
    gpu = compute_metrics(load_traces(_gpu_trace(tmp_path))).summary
    cpu = analyze_path(DATA / "cpu_small").summary
    for name in (*FAMILIES["kernels"], *FAMILIES["copies"]):
        assert cpu[name] is None, name
    assert gpu["kernel_count"] == 1 and gpu["h2d_count"] == 1 and gpu["h2d_bytes"] == 4096


def test_cpu_communication_overlap_reaches_the_metrics(tmp_path: Path) -> None:
    """A gloo all-reduce on its own thread beside a CPU operator: the overlap share is measured."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 100, "dur": 300},
        {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 3, "ts": 300, "dur": 400},
    ]
    path = tmp_path / "cpu.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    steps = analyze_trace(load_traces(path)[0]).steps
    assert steps.loc[0, "comm_time_ms"] == pytest.approx(0.4)
    assert steps.loc[0, "comm_overlap_frac"] == pytest.approx(100 / 400)  # 300..400 of 300..700
