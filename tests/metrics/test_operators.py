"""Operator view: calls, self and total host time per operator and step, from the cpu_op events."""

from __future__ import annotations

import numpy as np
import pytest
import tracegen

from advisor.metrics.compute import analyze_path


def _build(tmp_path):
    """Two steps of linear(addmm(empty)) and a recursive to(_to_copy(to)), plus an op before the steps."""
    b = tracegen.TraceBuilder()
    with b.op("aten::zeros"):  # before the first step: not counted
        b.cpu(500)
    for n in (1, 2):
        with b.step(n):
            b.cpu(5)
            with b.op("aten::linear"):
                b.cpu(4)
                with b.op("aten::addmm"):
                    b.cpu(6)
                    with b.op("aten::empty"):
                        b.cpu(2)
                    b.cpu(20)
                b.cpu(3)
            with b.op("aten::to"):
                b.cpu(1)
                with b.op("aten::_to_copy"):
                    b.cpu(1)
                    with b.op("aten::to"):
                        b.cpu(8)
                    b.cpu(1)
                b.cpu(1)
            b.cpu(10)
    path = tmp_path / "ops.pt.trace.json"
    b.write(path)
    return analyze_path(path)


def test_self_times_take_children_out_and_add_up(tmp_path):
    m = _build(tmp_path)
    rows = {r["operator"]: r for r in m.extra["operators"]}
    assert set(rows) == {"aten::linear", "aten::addmm", "aten::empty", "aten::to", "aten::_to_copy"}
    # per step: linear 35 us (4 + 3 of its own), addmm 28 (26 own), empty 2
    assert rows["aten::linear"]["self_ms"] == pytest.approx(0.007)
    assert rows["aten::addmm"]["self_ms"] == pytest.approx(0.026)
    assert rows["aten::empty"]["self_ms"] == pytest.approx(0.002)
    assert rows["aten::linear"]["total_ms"] == pytest.approx(0.035)
    assert all(r["calls"] == 1.0 for n, r in rows.items() if n != "aten::to")
    # the recursive to: 2 calls per step, self 2 + 8, total counted once from the outer call (12)
    assert rows["aten::to"]["calls"] == 2.0
    assert rows["aten::to"]["self_ms"] == pytest.approx(0.010)
    assert rows["aten::to"]["total_ms"] == pytest.approx(0.012)
    assert rows["aten::_to_copy"]["self_ms"] == pytest.approx(0.002)
    # the self times add up to the time operators ran (35 + 12 us per step), shares to 1
    assert sum(r["self_ms"] for r in rows.values()) == pytest.approx(0.047)
    assert sum(r["self_frac"] for r in rows.values()) == pytest.approx(1.0)
    # largest self time first
    assert [r["operator"] for r in m.extra["operators"]][:2] == ["aten::addmm", "aten::to"]


def test_operators_table_reaches_every_report_format(tmp_path):
    from advisor.api import analyze_report
    from advisor.report.render import render

    _build(tmp_path)
    report = analyze_report(tmp_path / "ops.pt.trace.json")
    assert report.tables["operators"][0]["operator"] == "aten::addmm"
    for fmt in ("text", "markdown", "html"):
        out = render(report, fmt)
        assert "Time per operator" in out and "addmm" in out, fmt


def test_real_gpu_trace_operators(shared_traces):
    m = analyze_path(shared_traces / "kineto" / "resnet50_num_workers_0")
    rows = m.extra["operators"]
    assert len(rows) == 20 and rows[0]["self_ms"] >= rows[-1]["self_ms"] > 0
    names = {r["operator"] for r in rows}
    assert "aten::cudnn_convolution" in names  # ResNet-50's convolutions on cuDNN
    assert all(r["total_ms"] >= r["self_ms"] - 1e-9 for r in rows)


def _brute_self(tid, ts, end):
    """Reference: one event at a time with a stack of the open operators of its thread."""
    order = sorted(range(len(ts)), key=lambda i: (tid[i], ts[i], -end[i]))
    children = [0.0] * len(ts)
    stack: list[int] = []
    for i in order:
        while stack and (tid[stack[-1]] != tid[i] or end[stack[-1]] <= ts[i]):
            stack.pop()
        if stack:
            children[stack[-1]] += min(end[i], end[stack[-1]]) - ts[i]
        stack.append(i)
    return [max(end[i] - ts[i] - children[i], 0.0) for i in range(len(ts))]


def _random_forest(rng, n_roots=30):
    """Properly nested intervals on three threads, some zero-length, some touching end to start."""
    tid, ts, end = [], [], []

    def grow(t, lo, hi, depth):
        cursor = lo
        while cursor < hi and rng.random() < 0.7:
            start = cursor + float(rng.integers(0, 3))
            stop = min(hi, start + float(rng.integers(0, 40)))
            if start > hi:
                break
            tid.append(t), ts.append(start), end.append(stop)
            if depth < 6 and stop > start:
                grow(t, start, stop, depth + 1)
            cursor = stop  # the next sibling may start exactly where this one ended

    for t in (0, 1, 2):
        for r in range(n_roots):
            grow(t, r * 100.0, r * 100.0 + 90.0, 0)
    return np.array(tid), np.array(ts), np.array(end)


def test_vectorised_self_time_matches_a_stack_walk():
    from advisor.metrics.operators import _self_time

    rng = np.random.default_rng(7)
    for _ in range(20):
        tid, ts, end = _random_forest(rng)
        assert len(ts) > 50
        np.testing.assert_allclose(_self_time(tid, ts, end), _brute_self(tid, ts, end), atol=1e-9)


def test_total_counts_nested_calls_of_one_name_once():
    from advisor.metrics.operators import _union_per_group

    # name 0: [0,10) with [2,5) nested inside and [20,30) later; name 1 on another thread overlapping
    codes = np.array([0, 0, 0, 1, 1])
    tid = np.array([0, 0, 0, 1, 1])
    ts = np.array([0.0, 2.0, 20.0, 0.0, 5.0])
    end = np.array([10.0, 5.0, 30.0, 8.0, 6.0])
    assert _union_per_group(codes, tid, ts, end).tolist() == [20.0, 8.0]
