"""compare's per-part table of GPU runs shows what each run's own breakdown shows."""

from __future__ import annotations

import pandas as pd
import pytest

from advisor.capture.model import RunCapture
from advisor.capture.records import Environment, TimedPhase
from advisor.engine.model import Diagnosis
from advisor.metrics.model import Metrics, StepBasis
from advisor.report.compare import compare_reports
from advisor.report.compare_render import render_comparison
from advisor.report.figures import part_shares
from advisor.report.headline import part_ms
from advisor.report.model import build_report


def _gpu_run(host_ms: dict[str, float], timed_ms: float):
    """A GPU run: 0.47 ms of device parts per profiled step, ``host_ms`` of host parts, ``timed_ms`` timed."""
    parts = {"gpu_compute": 0.40, "h2d_copy": 0.07, **host_ms}
    step = sum(parts.values())
    rows = pd.DataFrame([{"rank": 0, "step": i, "step_time_ms": step, **{f"{p}_ms": v for p, v in parts.items()}}
                         for i in range(10)])
    metrics = Metrics(source="run", summary={"step_time_ms": step, "has_gpu_flag": 1}, steps=rows, ranks=pd.DataFrame())
    capture = RunCapture(run_dir="run", script="train.py", profiled_steps=10, environment=Environment(device="cuda"),
                         timed=TimedPhase(step_times_ms=[timed_ms] * 20, samples=[64] * 20, samples_per_s=64e3 / timed_ms))
    return build_report(metrics, Diagnosis(findings=(), primary=None, breakdown={}), capture=capture)


def test_gpu_runs_are_compared_on_their_timed_steps_as_their_reports_show_them():
    before = _gpu_run({"data_loading": 1.30, "optimizer": 1.70, "cpu_ops": 2.40, "gpu_idle": 1.13}, 2.38)
    after = _gpu_run({"data_loading": 0.10, "optimizer": 1.70, "cpu_ops": 2.40, "gpu_idle": 1.13}, 2.0)
    cmp = compare_reports(before, after)
    assert cmp.parts_basis == StepBasis.TIMED
    gpu = next(p for p in cmp.parts if p.part == "gpu_compute")
    assert gpu.before_frac == pytest.approx(part_shares(before)["gpu_compute"]) == pytest.approx(0.40 / 2.38)
    assert gpu.before_ms == pytest.approx(part_ms(before)["gpu_compute"]) == pytest.approx(0.40)
    assert gpu.after_ms == pytest.approx(0.40)  # the device's time, unchanged by the host's fix
    assert "timed median step" in render_comparison(cmp, "text")
