"""GPU-idle attribution on generated traces, against hand calculations from the scenarios."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tracegen

from advisor.api import analyze_report
from advisor.metrics.compute import analyze_path
from advisor.metrics.idle import IDLE_CLASSES, Spans, is_preprocessing


def _analyze(builder: tracegen.TraceBuilder, path):
    """Write and analyse ``builder``'s trace; also return its first step's length (us)."""
    builder.write(path)
    steps = [e["dur"] for e in builder.events if e["name"].startswith("ProfilerStep#")]
    return analyze_path(path), steps[0]


def test_spans_algebra_matches_brute_force():
    a = Spans.of(np.array([0.0, 5.0, 20.0]), np.array([10.0, 12.0, 30.0]))  # [0,12) [20,30)
    b = Spans.of(np.array([8.0, 25.0]), np.array([21.0, 26.0]))
    assert (a & b).length.sum() == pytest.approx(4 + 1 + 1)  # [8,12) [20,21) [25,26)
    assert (a - b).length.sum() == pytest.approx(22 - 6)
    assert a.measure(np.array([-5.0, 11.0]), np.array([100.0, 22.0])).tolist() == [22.0, 3.0]


def test_spans_overlapping_matches_brute_force_and_the_intersection_it_keeps():
    rng = np.random.default_rng(3)
    s = rng.uniform(0, 100, 12)
    gaps = Spans.of(s, s + rng.uniform(0, 6, 12))
    start = np.r_[rng.uniform(-5, 105, 400), gaps.start, gaps.end, gaps.start - 1]  # touching ones too
    end = np.r_[start[:400] + rng.uniform(0, 4, 400), gaps.start + 0.5, gaps.end + 1, gaps.start]
    want = [any(a < e and b > st for a, b in zip(gaps.start, gaps.end, strict=True)) for st, e in zip(start, end, strict=True)]
    near = gaps.overlapping(start, end)
    assert near.tolist() == want
    every = Spans.of(start, end)
    few = Spans.of(start[near], end[near])
    for got, full in (((gaps & few), (gaps & every)), ((gaps - few), (gaps - every))):
        assert got.start.tolist() == full.start.tolist() and got.end.tolist() == full.end.tolist()
    assert not Spans.of(np.zeros(0), np.zeros(0)).overlapping(start, end).any()


def test_preprocessing_frames_are_recognised_and_mappings_are_not():
    assert is_preprocessing("transformers/models/llava/processing_video.py(88): __call__")
    assert is_preprocessing("PIL/Image.py(2200): resize")
    assert is_preprocessing("transformers/tokenization_utils_base.py(2800): __call__")
    assert is_preprocessing("dataset.py(21): __getitem__")
    assert not is_preprocessing("<frozen os>(709): __getitem__")
    assert not is_preprocessing("transformers/utils/generic.py(430): __getitem__")
    assert not is_preprocessing("logging/__init__.py(1100): emit")


def test_preprocessing_on_the_main_process_is_data_loading_with_the_function_named(tmp_path):
    path = tmp_path / "t.pt.trace.json"
    m, step = _analyze(tracegen.preprocess_in_main_process(steps=3, preprocess_us=8000.0), path)
    # 8000 us of preprocessing frames before the first GEMM is launched: all GPU-idle
    assert m.summary["idle_preprocess_frac"] == pytest.approx(8000.0 / step, rel=1e-9)
    assert m.summary["idle_data_loading_frac"] == pytest.approx(8000.0 / step, rel=1e-9)
    # PIL resize runs 75% of it, the processor's own code the rest (self time, no double count)
    table = {r["function"]: r for r in m.extra["idle_functions"]}
    assert table["PIL/Image.py(2200): resize"]["idle_ms"] == pytest.approx(6.0)
    assert table["transformers/models/llava/processing_video.py(88): __call__"]["idle_ms"] == pytest.approx(2.0)
    # the classes partition the idle time
    parts = sum(m.summary[f"idle_{c}_frac"] for c in IDLE_CLASSES)
    assert parts == pytest.approx(m.summary["idle_frac"], rel=1e-9)

    report = analyze_report(path)
    assert report.primary is not None and report.primary.category == "data_loading"
    dl = next(f for f in report.findings if f.code == "DL003")
    assert "PIL/Image.py:2200 (resize)" in dl.message
    assert "processing_video.py:88" in dl.message
    assert not any(f.code in ("SK001", "SK002", "HB001") for f in report.findings)


def test_thousands_of_tiny_kernels_are_launch_bound(tmp_path):
    b = tracegen.launch_bound(steps=2, kernels=2000, kernel_us=2.0, overhead_us=6.0)
    path = b.write(tmp_path / "t.pt.trace.json.gz")
    m = analyze_path(path)
    # per kernel: 6 us of op overhead + 4 us launch on the CPU, 2 us on the GPU -> 8 us gaps
    assert m.summary["idle_gap_median_us"] == pytest.approx(8.0)
    assert m.summary["idle_long_gap_frac"] == pytest.approx(0.0)
    assert m.summary["idle_host_frac"] == 0.0 and m.summary["idle_preprocess_frac"] == 0.0
    assert m.summary["idle_launch_frac"] == pytest.approx(m.summary["idle_frac"] - m.summary["idle_sync_frac"])
    assert m.summary["idle_launch_frac"] > 0.75
    report = analyze_report(path)
    assert report.primary is not None and report.primary.category == "small_kernels"
    codes = {f.code for f in report.findings}
    assert "SK001" in codes and not codes & {"HB001", "DL003"}


def test_long_gaps_in_logging_are_host_bound_with_the_function_named(tmp_path):
    path = tmp_path / "t.pt.trace.json"
    m, step = _analyze(tracegen.host_bound_logging(steps=3, log_us=6000.0), path)
    assert m.summary["idle_host_frac"] == pytest.approx(6000.0 / step, rel=1e-3)
    assert m.summary["idle_long_gap_frac"] > 0.99
    report = analyze_report(path)
    assert report.primary is not None and report.primary.category == "host"
    hb = next(f for f in report.findings if f.code == "HB001")
    assert "logging/__init__.py:1100 (emit)" in hb.message
    assert not any(f.code in ("SK001", "SK002") for f in report.findings)


def test_advisors_own_hooks_are_never_named_their_time_goes_to_the_users_line(tmp_path):
    # the H200 (2026-11-27): HB001 named advisor/capture/hooks.py:483 (wrapper) as the user's work
    b = tracegen.TraceBuilder()
    with b.python("train.py(10): main"):
        for s in range(3):
            with b.step(s + 1):
                for _ in range(8):
                    b.linear(2048, 2048, 2048, kernel_us=400.0)
                b.sync()
                with b.python("train.py(31): report"):
                    with b.python("/opt/venv/lib/python3.12/site-packages/advisor/capture/hooks.py(483): wrapper"):
                        with b.python("/opt/venv/lib/python3.12/site-packages/advisor/capture/hooks.py(101): find"):
                            with b.python("/opt/venv/lib/python3.12/site-packages/advisor/capture/hooks.py(114): _is_user"):
                                b.cpu(3000.0)
    path = tmp_path / "t.pt.trace.json"
    b.write(path)
    report = analyze_report(path)
    hb = next(f for f in report.findings if f.code == "HB001")
    assert "train.py:31 (report)" in hb.message and "hooks.py" not in hb.message
    functions = [r["function"] for r in analyze_path(path).extra["idle_functions"]]
    assert functions[0] == "train.py(31): report" and not any("advisor/" in f for f in functions)


def test_committed_gpu_small_trace_splits_idle_between_loader_and_checkpoint():
    path = tracegen.Path(__file__).resolve().parents[1] / "data" / "gpu_small" / "worker0.pt.trace.json.gz"
    m = analyze_path(path)
    table = {(r["function"], r["idle_class"]): r["idle_ms"] for r in m.extra["idle_functions"]}
    assert table[("dataset.py(21): __getitem__", "data_loading")] == pytest.approx(1.2)
    assert table[("torch/serialization.py(600): save", "host")] == pytest.approx(2.0)
    json.dumps(m.extra["idle_functions"])  # JSON-able for reports


def test_bert_trace_is_launch_bound_in_short_gaps(shared_traces):
    path = next((shared_traces / "tracelens").rglob("*.json.gz"))
    m = analyze_path(path)
    assert m.summary["idle_launch_frac"] > 0.8
    assert m.summary["idle_long_gap_frac"] == 0.0
    names = [r["function"] for r in m.extra["idle_functions"]]
    assert "torch/nn/modules/linear.py(124): forward" in names[:3]
    # other threads' frames (a profiler thread's wait) are not blamed
    assert not any("threading.py" in n for n in names)


def test_without_python_stacks_host_time_is_named_by_operator(shared_traces):
    # HTA's event-sync example: aten::ones (a first CUDA allocation) holds the CPU for 2.2 ms
    # while the GPU has nothing queued
    m = analyze_path(next((shared_traces / "hta").rglob("*.json.gz")))
    (row,) = [r for r in m.extra["idle_functions"] if r["idle_class"] == "host"]
    assert row["function"] == "aten::ones (operator)" and row["idle_ms"] > 2.0
