"""compare_reports: speedup and its basis, per-part deltas, findings gone/new, what is not comparable."""

from __future__ import annotations

import dataclasses
import json

import pytest
from report_fixtures import make_after_report, make_gpu_trace_report, make_report

from advisor.report.compare import compare_reports, device_kind
from advisor.report.compare_render import COMPARISON_RENDERERS, render_comparison
from advisor.report.compare_stats import noise_from_values


def test_before_after_fix() -> None:
    cmp = compare_reports(make_report(), make_after_report())
    assert cmp.metric == "samples_per_s"
    assert cmp.speedup == pytest.approx(1290.7 / 812.4)
    assert cmp.verdict == "no measurable effect"  # 1.59x: within the default noise band of single runs
    assert cmp.ci_low is None and cmp.ci_high is None  # one run a side: no interval from its steps
    assert cmp.noise_band is not None
    assert cmp.not_comparable == ()
    assert {f.code for f in cmp.disappeared} == {"CPU003", "DL001"}
    assert {f.code for f in cmp.appeared} == {"CM001"}
    assert {f.code for f in cmp.persisting} == {"SY002"}
    dl = next(p for p in cmp.parts if p.part == "data_loading")
    assert dl.delta_ms == pytest.approx(1.24 - 16.9, abs=0.05)
    assert dl.delta_frac < -0.35
    data = json.loads(render_comparison(cmp, "json"))
    assert data["parts"][0]["delta_ms"] == pytest.approx(dl.delta_ms)


def test_gpu_trace_vs_cpu_capture_is_not_comparable() -> None:
    cmp = compare_reports(make_gpu_trace_report(), make_report())
    assert device_kind(make_gpu_trace_report()) == "gpu" and device_kind(make_report()) == "cpu"
    assert cmp.speedup is None and cmp.ci_low is None
    assert cmp.verdict == "not comparable"
    assert any(x.startswith("devices differ (Tesla V100-DGXS-32GB vs CPU)") for x in cmp.not_comparable)
    one_sided = next(x for x in cmp.not_comparable if x.startswith("breakdown parts measured on one side only"))
    assert "GPU compute" in one_sided and "Data loading" not in one_sided
    md = render_comparison(cmp, "markdown")
    assert "> **Not comparable**" in md and "**no speedup: the two sides are not comparable" in md


def test_step_time_fallback_compares_single_runs_without_an_interval() -> None:
    before = dataclasses.replace(make_report(), summary={**make_report().summary, "samples_per_s": None})
    before = dataclasses.replace(before, run=dataclasses.replace(before.run, samples_per_s=None))
    after = dataclasses.replace(make_after_report(), summary={**make_after_report().summary, "samples_per_s": None})
    after = dataclasses.replace(after, run=dataclasses.replace(after.run, samples_per_s=None))
    cmp = compare_reports(before, after)
    assert cmp.metric == "step_time_ms"
    assert cmp.speedup == pytest.approx(cmp.step_time_before_ms / cmp.step_time_after_ms)
    assert cmp.ci_low is None
    assert cmp.verdict == "no measurable effect"  # 1.75x: within the default band of single runs
    assert compare_reports(before, after, noise=noise_from_values([100.0, 101.0, 99.5], "x")).verdict == "faster"
    same = compare_reports(before, before)
    assert same.speedup == pytest.approx(1.0) and same.verdict == "no measurable effect"


def test_step_time_with_different_batch_sizes_gives_no_ratio() -> None:
    a = dataclasses.replace(make_report(), summary={**make_report().summary, "samples_per_s": None, "samples_per_step": 32})
    a = dataclasses.replace(a, run=dataclasses.replace(a.run, samples_per_s=None))
    b = dataclasses.replace(a, summary={**a.summary, "samples_per_step": 64})
    cmp = compare_reports(a, b)
    assert cmp.speedup is None and cmp.verdict == "not comparable"
    assert any("samples per step differ (32 vs 64)" in x for x in cmp.not_comparable)


@pytest.mark.parametrize("fmt", sorted(COMPARISON_RENDERERS))
def test_every_comparison_format_renders(fmt: str) -> None:
    out = render_comparison(compare_reports(make_report(hostile=True), make_after_report()), fmt)
    assert out.endswith("\n")
    if fmt in ("html", "markdown"):
        assert "<img" not in out.replace("`", "")  or fmt == "markdown"


@pytest.mark.parametrize(("fmt", "name"), [("text", "compare.txt"), ("markdown", "compare.md")])
def test_comparison_golden(fmt: str, name: str, golden) -> None:
    golden(name, render_comparison(compare_reports(make_report(), make_after_report()), fmt))


def test_not_comparable_golden(golden) -> None:
    golden("compare_not_comparable.md", render_comparison(compare_reports(make_gpu_trace_report(), make_report()), "markdown"))


def _with_ops(report, rows):
    return dataclasses.replace(report, tables={**report.tables, "operators": tuple(rows)})


def _op(name, self_ms, calls=1.0):
    return {"operator": name, "calls": calls, "self_ms": self_ms, "total_ms": self_ms, "self_frac": None}


def test_operators_that_changed_most_are_listed_largest_change_first() -> None:
    before = _with_ops(make_report(), [_op("aten::convolution_backward", 4.0, 2), _op("aten::cat", 0.3), _op("aten::addmm", 0.12)])
    after = _with_ops(make_after_report(), [_op("aten::convolution_backward", 11.0, 2), _op("aten::addmm", 0.04),
                                           _op("AddmmBackward0", 0.42)])
    cmp = compare_reports(before, after)
    assert [o.operator for o in cmp.operators] == ["aten::convolution_backward", "AddmmBackward0", "aten::cat", "aten::addmm"]
    conv, backward, cat, addmm = cmp.operators
    assert conv.delta_ms == pytest.approx(7.0) and conv.before_calls == conv.after_calls == 2
    # listed on one side only: unknown on the other (below its table), never a change from zero
    assert (backward.before_ms, backward.delta_ms) == (None, None) and (cat.after_ms, cat.delta_ms) == (None, None)
    assert addmm.delta_ms == pytest.approx(-0.08)
    data = json.loads(render_comparison(cmp, "json"))
    assert data["operators"][0]["delta_ms"] == pytest.approx(7.0) and data["operators"][1]["delta_ms"] is None
    for fmt in ("text", "markdown", "html"):
        out = render_comparison(cmp, fmt)
        assert "Operators that changed most" in out and "+7.00 ms" in out, fmt


def test_no_operator_section_without_both_tables() -> None:
    only_before = _with_ops(make_report(), [_op("aten::addmm", 1.0)])
    cmp = compare_reports(only_before, make_after_report())
    assert cmp.operators == ()
    assert "Operators that changed most" not in render_comparison(cmp, "text")


def test_compare_prints_each_run_s_own_headline_step_time() -> None:
    # One step time: compare shows the timed median each report prints, never the profiled steps'
    # median (an A/A pair of tiny_model read "12.9 ms -> 3.32 ms" beside headlines of 1.22 and 1.03 ms).
    from advisor.report.headline import step_time

    before, after = make_report(), make_after_report()
    assert step_time(before).ms != before.summary["step_time_ms"]  # the two really differ here
    cmp = compare_reports(before, after)
    assert cmp.step_time_before_ms == pytest.approx(step_time(before).ms)
    assert cmp.step_time_after_ms == pytest.approx(step_time(after).ms)
