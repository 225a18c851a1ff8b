"""A CUDA run whose GPU went unseen: no kernels in its trace (CUPTI), or NVML failing."""

from __future__ import annotations

import pandas as pd
import pytest

from advisor.capture.model import RunCapture
from advisor.capture.records import Environment, UtilSummary
from advisor.engine.model import Diagnosis, Finding, Primary
from advisor.metrics.model import Metrics
from advisor.report.model import build_report


def _report(device: str, has_gpu: int, gpu_note: str | None = None, profiled: int = 3):
    metrics = Metrics(source="run", summary={"step_time_ms": 10.0, "has_gpu_flag": has_gpu}, steps=pd.DataFrame(),
                      ranks=pd.DataFrame())
    finding = Finding(code="DL001", name="dataloader-starved-step", category="data_loading", severity="warning",
                      message="m", evidence={}, impact_frac=0.6)
    diagnosis = Diagnosis(findings=(finding,), primary=Primary("data_loading", 0.6, 2.5), breakdown={})
    capture = RunCapture(run_dir="run", script="train.py", profiled_steps=profiled,
                         environment=Environment(device=device), gpu=UtilSummary(note=gpu_note))
    return build_report(metrics, diagnosis, capture=capture)


def test_a_cuda_run_without_kernels_is_warned_about_and_names_no_primary():
    r = _report("cuda", has_gpu=0)
    assert r.primary is None
    assert any("holds no GPU kernel" in w and "CUPTI" in w for w in r.warnings)
    assert [f.code for f in r.findings] == ["DL001"]  # the host's findings stay, as findings


def test_a_cuda_run_with_kernels_or_a_cpu_run_is_left_alone():
    for r in (_report("cuda", has_gpu=1), _report("cpu", has_gpu=0), _report("cuda", has_gpu=0, profiled=0)):
        assert r.primary is not None and r.primary.category == "data_loading"
        assert not any("holds no GPU kernel" in w for w in r.warnings)


def test_nvml_failing_on_a_cuda_run_is_a_warning_and_on_a_cpu_run_nothing():
    note = "GPU not sampled: NVML query failed (Driver Not Loaded)"
    assert any(w.startswith(note) for w in _report("cuda", has_gpu=1, gpu_note=note).warnings)
    assert not any(w.startswith("GPU not sampled") for w in _report("cpu", has_gpu=0, gpu_note=note).warnings)


def _stretched(device: str, timed_ms: float):
    """compute_bound on the H200 (2026-11-27), rounded: 7.0 ms profiled steps, 0.4 ms GPU compute, 0.07 ms copies."""
    from advisor.capture.records import TimedPhase

    parts = {"gpu_compute": 0.40, "h2d_copy": 0.07, "data_loading": 1.30, "optimizer": 1.70, "cpu_ops": 2.40,
             "gpu_idle": 1.13}
    step = sum(parts.values())
    rows = pd.DataFrame([{"rank": 0, "step": i, "step_time_ms": step, **{f"{p}_ms": v for p, v in parts.items()}}
                         for i in range(10)])
    metrics = Metrics(source="run", summary={"step_time_ms": step, "has_gpu_flag": 1, "gpu_busy_frac": 0.47 / step},
                      steps=rows, ranks=pd.DataFrame())
    diagnosis = Diagnosis(findings=(), primary=None, breakdown={})
    capture = RunCapture(run_dir="run", script="train.py", profiled_steps=10, environment=Environment(device=device),
                         timed=TimedPhase(step_times_ms=[timed_ms] * 20))
    return build_report(metrics, diagnosis, capture=capture)


def test_a_gpu_breakdown_keeps_the_devices_milliseconds_and_says_so_where_the_profiler_stretched_the_host():
    from advisor.report.figures import part_shares, profiled_shares
    from advisor.report.headline import breakdown_caption, part_ms

    r = _stretched("cuda", 2.38)
    [w] = [w for w in r.warnings if "profiled steps took" in w]
    assert "7 ms on average, 2.9x the timed steps' 2.38 ms" in w
    assert "the 0.47 ms per step they took in the profile (20% of a timed step, 7% of a profiled one)" in w
    shares = part_shares(r)
    assert shares["gpu_compute"] == pytest.approx(0.40 / 2.38) and sum(shares.values()) == pytest.approx(1.0)
    assert profiled_shares(r)["gpu_compute"] == pytest.approx(0.40 / 7.0)  # what compare reads
    assert part_ms(r)["gpu_compute"] == pytest.approx(0.40)
    assert "the GPU's parts at their ms" in breakdown_caption(r) and "2.9x" in breakdown_caption(r)


def test_a_small_stretch_or_a_cpu_run_is_left_as_it_was():
    from advisor.report.figures import part_shares

    assert not any("profiled steps took" in w for w in _stretched("cuda", 5.5).warnings)  # 1.3x: no warning
    assert part_shares(_stretched("cuda", 5.5))["gpu_compute"] == pytest.approx(0.40 / 5.5)  # still split
    assert not any("profiled steps took" in w for w in _stretched("cpu", 2.38).warnings)


def test_the_caption_keeps_gpu_in_capitals_in_markdown_and_html():
    from advisor.report.render import render

    r = _stretched("cuda", 2.38)
    for fmt in ("markdown", "html"):
        out = render(r, fmt)
        assert "Shares of the timed median step" in out and "gpu" not in out.split("Shares of the timed")[1][:200]
