"""A CUDA run whose GPU went unseen: no kernels in its trace (CUPTI), or NVML failing."""

from __future__ import annotations

import pandas as pd

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


def _stretched(device: str, timed_ms: float, profiled_ms: float = 6.99, busy: float = 0.058):
    from advisor.capture.records import TimedPhase

    metrics = Metrics(source="run", summary={"step_time_ms": profiled_ms, "has_gpu_flag": 1, "gpu_busy_frac": busy},
                      steps=pd.DataFrame(), ranks=pd.DataFrame())
    diagnosis = Diagnosis(findings=(), primary=None, breakdown={})
    capture = RunCapture(run_dir="run", script="train.py", profiled_steps=10, environment=Environment(device=device),
                         timed=TimedPhase(step_times_ms=[timed_ms] * 20))
    return build_report(metrics, diagnosis, capture=capture).warnings


def test_profiled_steps_much_slower_than_timed_ones_say_the_gpus_share_is_understated():
    # compute_bound on the H200 (2026-11-27): 6.99 ms profiled, 2.38 ms timed, the GPU busy 5.8% profiled
    [w] = [w for w in _stretched("cuda", 2.38, profiled_ms=6.99, busy=0.058) if "profiled steps took" in w]
    assert "2.9x the timed steps' 2.38 ms" in w and "busy 0.405 ms" in w and "about 17% of a timed step" in w
    assert "reads 6%" in w
    assert not any("profiled steps took" in w for w in _stretched("cuda", 10.0))  # 1.3x: left alone
    assert not any("profiled steps took" in w for w in _stretched("cpu", 2.38))
