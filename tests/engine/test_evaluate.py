"""diagnose(): findings, the primary category with its Amdahl speedup, breakdown, suppression."""

from __future__ import annotations

import pytest

from advisor.engine.evaluate import (
    BREAKDOWN_TO_CATEGORY,
    MAX_SHARE,
    category_breakdown,
    choose_primary,
    diagnose,
    pick_locations,
)
from advisor.engine.model import CATEGORIES, EngineConfig, Finding, ImpactBasis
from advisor.engine.rules import default_rules
from advisor.metrics.model import SourceLocation
from advisor.metrics.registry import BREAKDOWN_PARTS

from .conftest import make_metrics


def f(code: str, category: str, impact: float, severity: str = "warning") -> Finding:
    return Finding(code=code, name=code.lower(), category=category, severity=severity, message="",
                   evidence={}, impact_frac=impact)


def test_primary_is_category_with_most_recoverable_time():
    findings = [f("DL001", "data_loading", 0.4), f("HD001", "host_to_device", 0.01),
                f("CO002", "compute", 0.3), f("CO003", "compute", 0.0)]
    primary = choose_primary(findings)
    assert primary.category == "data_loading"
    assert primary.share == pytest.approx(0.4)
    assert primary.estimated_speedup == pytest.approx(1 / 0.6, rel=1e-3)


def test_category_share_is_the_max_not_the_sum():
    # SY001 and SY002 describe the same lost time; adding them would double count.
    findings = [f("SY001", "sync", 0.2), f("SY002", "sync", 0.2), f("DL001", "data_loading", 0.3)]
    assert choose_primary(findings).category == "data_loading"


def test_no_primary_without_recoverable_time():
    assert choose_primary([]) is None
    assert choose_primary([f("ME001", "memory", 0.0), f("CM004", "communication", 0.0)]) is None


def test_share_is_capped_for_amdahl():
    primary = choose_primary([f("SK001", "small_kernels", 1.0)])
    assert primary.share == MAX_SHARE
    assert primary.estimated_speedup == pytest.approx(1 / (1 - MAX_SHARE))


def test_ties_go_to_the_first_category():
    primary = choose_primary([f("SY001", "sync", 0.2), f("DL001", "data_loading", 0.2)])
    assert primary.category == "data_loading"


def test_breakdown_maps_every_part_to_a_category():
    assert set(BREAKDOWN_TO_CATEGORY) == set(BREAKDOWN_PARTS)
    assert set(BREAKDOWN_TO_CATEGORY.values()) <= {*CATEGORIES, "idle", "other"}
    values = {"data_loading_frac": 0.3, "h2d_copy_frac": 0.05, "d2h_copy_frac": 0.01,
              "sync_wait_frac": 0.04, "communication_frac": 0.0, "gpu_compute_frac": 0.4,
              "optimizer_frac": 0.05, "cpu_ops_frac": 0.05, "gpu_idle_frac": 0.1, "other_frac": 0.0}
    out = category_breakdown(values)
    assert out == pytest.approx({"data_loading": 0.3, "host_to_device": 0.06, "sync": 0.04,
                                 "communication": 0.0, "compute": 0.5, "idle": 0.1, "other": 0.0})
    assert sum(out.values()) == pytest.approx(1.0)
    assert category_breakdown({}) == {}


def test_locations_filtered_by_kind_and_ranked_by_cost():
    locs = (
        SourceLocation(kind="sync", file="a.py", line=1, time_ms=1.0),
        SourceLocation(kind="item", file="b.py", line=2, time_ms=5.0),
        SourceLocation(kind="h2d", file="c.py", line=3, time_ms=50.0),
        SourceLocation(kind="sync", file="b.py", line=2, time_ms=0.5, source="pstats"),
        *(SourceLocation(kind="sync", file="d.py", line=i, count=i) for i in range(10, 20)),
        SourceLocation(kind="sync", file="~", line=0, time_ms=99.0),
        SourceLocation(kind="sync", file="<frozen runpy>", line=88, time_ms=99.0),
    )
    picked = pick_locations(locs, ("sync", "item"))
    assert [(p.file, p.line) for p in picked][:2] == [("b.py", 2), ("a.py", 1)]
    assert len(picked) == 5 and ("c.py", 3) not in [(p.file, p.line) for p in picked]
    assert pick_locations(locs, ()) == ()


def test_a_place_of_no_time_run_less_than_once_a_step_is_not_a_findings_place():
    locs = (
        SourceLocation(kind="data_loading", file="t.py", line=13, function="__len__", count=0.1, time_ms=0.0),
        SourceLocation(kind="item", file="t.py", line=41, count=6.0, time_ms=0.0001),  # every step: kept
        SourceLocation(kind="memory", file="t.py", line=30, count=0.4, time_ms=0.0),  # a share of the peak: kept
    )
    assert [p.line for p in pick_locations(locs, ("data_loading", "item", "memory"))] == [41, 30]


def test_diagnose_end_to_end_on_a_loader_bound_run():
    metrics = make_metrics(
        {"data_loading_frac": 0.4, "gpu_compute_frac": 0.5, "gpu_idle_frac": 0.02, "cpu_ops_frac": 0.08,
         "dataloader_num_workers": 0, "dataloader_pin_memory_flag": 0, "has_gpu_flag": 1,
         "h2d_pageable_bytes": 19267584, "h2d_pageable_frac": 1.0, "h2d_copy_frac": 0.01},
        [{"kind": "data_loading", "file": "train.py", "line": 30, "time_ms": 60.0}],
    )
    d = diagnose(metrics)
    assert d.primary.category == "data_loading"
    assert [x.code for x in d.findings] == ["DL001", "HD001"]
    assert d.findings[0].locations[0].line == 30
    assert d.findings[0].evidence["dataloader_num_workers"] == 0
    assert d.rules_evaluated == len(default_rules())
    assert d.warnings == () and d.suppressed == ()


def test_ignored_rules_that_would_fire_are_reported_as_suppressed():
    metrics = make_metrics({"data_loading_frac": 0.4, "h2d_pageable_bytes": 19267584, "h2d_pageable_frac": 1.0})
    d = diagnose(metrics, EngineConfig(ignore=("DL", "XX999")))
    assert [x.code for x in d.findings] == ["HD001"]
    assert d.suppressed == ("DL001",)
    assert d.warnings and d.warnings[0].startswith("unknown rule code 'XX999' in ignore")


def test_findings_sorted_by_severity_then_code():
    metrics = make_metrics({"has_gpu_flag": 1, "sync_count": 3, "item_count": 0, "sync_wait_frac": 0.0,
                            "memory_used_frac": 0.95, "dataparallel_flag": 1})
    d = diagnose(metrics)
    assert [(x.severity, x.code) for x in d.findings] == [
        ("warning", "CM004"), ("warning", "ME001"), ("info", "SY002")]


def test_numpy_and_nan_values_are_cleaned():
    np = pytest.importorskip("numpy")
    metrics = make_metrics({"data_loading_frac": np.float64(0.3), "dataloader_num_workers": float("nan")})
    d = diagnose(metrics, EngineConfig(select=("DL001",)))
    assert d.findings[0].evidence == {
        "cpu_count": None, "data_loading_frac": 0.3, "dataloader_num_workers": None,
        "dataloader_persistent_workers_flag": None, "dataloader_pin_memory_flag": None,
        "dataloader_wait_ms": None, "input_assembly_ms": None}
    assert type(d.findings[0].evidence["data_loading_frac"]) is float


# --- our CPU examples' shapes (hand-built from measured step figures) -------------------------

HEALTHY_CPU = {  # batch 128, width 1024 MLP on this machine: 75 ops in 22.65 ms, 94% inside ops
    "has_gpu_flag": 0, "step_time_ms": 22.65, "cpu_op_count": 75, "flops_per_step": 3.229e9, "cpu_op_median_us": 4.9,
    "cpu_op_small_frac": 0.6, "data_loading_frac": 0.01, "sync_wait_frac": 0.0, "cpu_ops_frac": 0.86,
    "optimizer_frac": 0.08, "other_frac": 0.05, "gpu_compute_frac": 0.0, "item_count": 1, "sync_count": 0,
    "memory_used_frac": 0.05, "dataloader_num_workers": 0,
    # 3.229 GFLOP in 22.65 ms against the 0.1153 TFLOP/s float32 peak measured here (2 threads)
    "matmul_peak_tflops": 0.1153, "achieved_run_tflops": 0.1426, "peak_share_frac": 1.237,
}
TINY_CPU = {**HEALTHY_CPU, "step_time_ms": 0.35, "flops_per_step": 212000, "cpu_op_median_us": 1.1, "cpu_op_small_frac": 0.98,
            "cpu_ops_frac": 0.6, "other_frac": 0.3, "achieved_run_tflops": 0.000606, "peak_share_frac": 0.0052}
# The small GPT trainer: busy in big-enough ops (196,000 FLOPs each) at 6e-5 TFLOP/s.
SLOW_ARITHMETIC_CPU = {**HEALTHY_CPU, "cpu_op_count": 1000, "flops_per_step": 196e6, "step_time_ms": 3267.0,
                       "achieved_run_tflops": 6e-5, "peak_share_frac": 0.00052, "contention_flag": 0}


def test_healthy_compute_bound_cpu_example_has_only_compute_advice():
    d = diagnose(make_metrics(HEALTHY_CPU))
    assert [x.code for x in d.findings] == ["CO001"]
    assert d.primary.category == "compute"
    assert not {x.category for x in d.findings} & {"data_loading", "sync", "small_kernels"}


def test_busy_but_slow_arithmetic_is_not_compute_bound():
    d = diagnose(make_metrics(SLOW_ARITHMETIC_CPU))
    codes = {x.code for x in d.findings}
    assert "CO001" not in codes and "SK005" in codes
    assert d.primary.category == "small_kernels"


def test_tiny_model_cpu_example_is_small_kernels():
    d = diagnose(make_metrics(TINY_CPU))
    assert d.primary.category == "small_kernels"
    assert "CO001" not in {x.code for x in d.findings}


# --- a measured share counts whole, a bound half (advisor-bench's and tiny_model's patterns) ----

# advisor-bench's GRU with a CPU transform in __getitem__ (c024): per-timestep ops make the per-op
# overhead bound claim up to 90% while the DataLoader wait measured 39% of the step.
GRU_LOADING_CPU = {**HEALTHY_CPU, "cpu_op_count": 400, "flops_per_step": 4e6, "step_time_ms": 6.0,
                   "data_loading_frac": 0.39, "dataloader_wait_ms": 2.3, "cpu_ops_frac": 0.5, "other_frac": 0.08,
                   "achieved_run_tflops": 5e-3, "peak_share_frac": 0.004, "contention_flag": 0}


def measured(code: str, category: str, impact: float, severity: str = "warning") -> Finding:
    return Finding(code=code, name=code.lower(), category=category, severity=severity, message="",
                   evidence={}, impact_frac=impact, impact_basis=ImpactBasis.MEASURED)


def test_a_bound_counts_for_half_against_a_measured_share():
    primary = choose_primary([measured("DL001", "data_loading", 0.5), f("SK005", "small_kernels", 0.9)])
    assert primary.category == "data_loading" and primary.share == pytest.approx(0.5)
    # tiny_model on a quiet machine: an 8.7% collate measured, a 47% per-op bound (the step is per-op overhead)
    primary = choose_primary([measured("DL001", "data_loading", 0.087), f("SK003", "small_kernels", 0.474)])
    assert primary.category == "small_kernels" and primary.share == pytest.approx(0.474)
    # among bounds alone the largest still wins, and between measured shares the largest too
    assert choose_primary([f("CO002", "compute", 0.2), f("SK005", "small_kernels", 0.9)]).category == "small_kernels"
    assert choose_primary([measured("DL001", "data_loading", 0.2), measured("SY001", "sync", 0.3),
                           f("SK005", "small_kernels", 0.5)]).category == "sync"


def test_an_info_measurement_does_not_outrank_a_bound():
    # A 0.6% sync wait noted as info (the H100 BERT trace) says nothing against a 60% overhead bound.
    primary = choose_primary([measured("SY002", "sync", 0.006, "info"), f("SK001", "small_kernels", 0.6)])
    assert primary.category == "small_kernels"


def test_a_warning_outranks_an_info_bound_of_any_size():
    # advisor-bench c009 (LM, injected tiny ops, 13% of the step by plain timing): SK007 measured a
    # 9% warning, CO001's "compute-bound" info ceiling was 24% (12% at half weight).
    findings = [measured("SK007", "small_kernels", 0.09), f("CO001", "compute", 0.238, "info")]
    primary = choose_primary(findings)
    assert primary.category == "small_kernels" and primary.share == pytest.approx(0.09)
    # with no warning at all, the info bound is still the primary (a healthy compute-bound step)
    assert choose_primary([f("CO001", "compute", 0.238, "info")]).category == "compute"


def test_gru_with_slow_loading_reads_data_loading_not_per_op_overhead():
    d = diagnose(make_metrics(GRU_LOADING_CPU))
    basis = {x.code: x.impact_basis for x in d.findings}
    assert basis["DL001"] == ImpactBasis.MEASURED and basis["SK003"] == ImpactBasis.BOUND
    sk = next(x for x in d.findings if x.code == "SK003")
    assert sk.impact_frac > 0.39  # the bound is the larger number, and still loses
    assert d.primary.category == "data_loading"


def test_eight_threads_on_two_cores_read_compute_not_small_kernels():
    # advisor-bench's MLP with torch.set_num_threads(8) on 2 cores (c018): 90% of the step lost.
    metrics = {**SLOW_ARITHMETIC_CPU, "cpu_count": 2, "intra_op_threads_count": 8, "runnable_threads_count": 8,
               "cpu_demand_ratio": 4.0}
    d = diagnose(make_metrics(metrics))
    codes = {x.code for x in d.findings}
    assert "CO005" in codes and "SK005" not in codes
    assert d.primary.category == "compute"
    # the same step with threads to match the cores: SK005's reading stands
    d = diagnose(make_metrics({**metrics, "intra_op_threads_count": 2, "runnable_threads_count": 2,
                               "cpu_demand_ratio": 1.0}))
    assert {x.code for x in d.findings} >= {"SK005"} and d.primary.category == "small_kernels"


def test_message_shows_locations_as_the_report_lines_do(tmp_path, monkeypatch):
    # GPU run (2026-11-27): SY002 said "Found at: /work/main/examples/attention_lm.py:139 (main)"
    # while its location lines said "examples/attention_lm.py:139 (main)".
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "examples" / "train.py"
    metrics = make_metrics(
        {"has_gpu_flag": 1, "sync_count": 3, "item_count": 0, "sync_wait_frac": 0.01},
        [{"kind": "sync", "file": str(script), "line": 18, "count": 1, "function": "main"},
         {"kind": "item", "file": "/elsewhere/lib.py", "line": 7, "count": 1}],
    )
    sy002 = next(x for x in diagnose(metrics).findings if x.code == "SY002")
    assert "Found at: examples/train.py:18 (main), /elsewhere/lib.py:7." in sy002.message
    assert sy002.locations[0].file == str(script)  # the finding keeps the full path; only the text is shortened
