"""The rules see per-step milliseconds on the headline step's scale: one step time in a report."""

from __future__ import annotations

import pytest

from advisor.engine.evaluate import diagnose
from advisor.metrics.headline_scale import headline_factor, on_headline_scale

from .conftest import make_metrics

# The demo's shape: 72% of a 317 ms profiled step in the DataLoader, a 389 ms timed headline.
PROFILED = {
    "step_time_ms": 317.0, "data_loading_frac": 0.717, "data_loading_ms": 0.717 * 317.0,
    "dataloader_wait_ms": 227.7, "dataloader_num_workers": 0.0, "cpu_count": 2.0, "gpu_max_gap_ms": 4.0,
}
TIMED = [389.0] * 20


def test_host_step_times_move_to_the_headline_and_device_spans_do_not():
    m = make_metrics(PROFILED)
    k = headline_factor(m, TIMED)
    assert k == pytest.approx(389.0 / 317.0)
    scaled = on_headline_scale(m, TIMED).summary
    assert scaled["step_time_ms"] == pytest.approx(389.0)
    assert scaled["data_loading_ms"] == pytest.approx(0.717 * 389.0)  # the breakdown's own figure
    assert scaled["dataloader_wait_ms"] == pytest.approx(227.7 * k)
    assert scaled["gpu_max_gap_ms"] == 4.0 and scaled["data_loading_frac"] == 0.717
    assert m.summary["step_time_ms"] == 317.0  # the stored metrics keep the trace's values


def test_without_timed_steps_nothing_moves():
    m = make_metrics(PROFILED)
    assert on_headline_scale(m, ()) is m
    assert headline_factor(make_metrics({"step_time_ms": None}), TIMED) == 1.0


def test_a_finding_prints_the_milliseconds_of_the_headline_step():
    d = diagnose(on_headline_scale(make_metrics(PROFILED), TIMED))
    dl = next(f for f in d.findings if f.code == "DL001")
    assert f"{227.7 * 389.0 / 317.0:.1f} ms per step" in dl.message
    assert "227.7 ms" not in dl.message


def _gpu_metrics() -> tuple:
    """compute_bound on the H200 (2026-11-27), rounded: 7.0 ms profiled steps of which 0.4 ms GPU
    compute and 0.07 ms copies; 2.38 ms timed."""
    import pandas as pd

    parts = {"gpu_compute": 0.40, "h2d_copy": 0.07, "data_loading": 1.30, "optimizer": 1.70, "cpu_ops": 2.40,
             "gpu_idle": 1.13}
    step = sum(parts.values())
    rows = pd.DataFrame([{"step": i, "step_time_ms": step, **{f"{p}_ms": v for p, v in parts.items()}} for i in range(10)])
    summary = {"step_time_ms": step, "has_gpu_flag": 1.0, "gpu_busy_frac": 0.47 / step, "idle_frac": 1 - 0.47 / step,
               "idle_launch_frac": 0.5, "dataloader_wait_ms": 1.5,
               **{f"{p}_ms": v for p, v in parts.items()}, **{f"{p}_frac": v / step for p, v in parts.items()}}
    m = make_metrics(summary)
    return type(m)(source=m.source, summary=m.summary, steps=rows, ranks=m.ranks), parts, step


def test_on_a_gpu_the_device_keeps_its_milliseconds_and_the_host_fills_the_rest():
    m, parts, step = _gpu_metrics()
    timed = [2.38] * 20
    scaled = on_headline_scale(m, timed).summary
    host = (2.38 - 0.47) / (step - 0.47)
    assert scaled["step_time_ms"] == pytest.approx(2.38)
    assert scaled["gpu_compute_ms"] == pytest.approx(0.40) and scaled["h2d_copy_ms"] == pytest.approx(0.07)
    assert scaled["cpu_ops_ms"] == pytest.approx(2.40 * host) and scaled["dataloader_wait_ms"] == pytest.approx(1.5 * host)
    assert scaled["gpu_compute_frac"] == pytest.approx(0.40 / 2.38)  # 17% of the timed step, not 5.7%
    assert sum(scaled[f"{p}_frac"] for p in parts) == pytest.approx(1.0)
    assert scaled["gpu_busy_frac"] == pytest.approx(0.47 / 2.38)
    assert scaled["idle_frac"] == pytest.approx(1 - 0.47 / 2.38)
    assert scaled["idle_launch_frac"] == pytest.approx(0.5 * step * host / 2.38)
    assert headline_factor(m, timed) == pytest.approx(host)


def test_device_time_that_does_not_fit_the_headline_step_scales_with_one_factor():
    m, parts, step = _gpu_metrics()
    for timed in ([0.3] * 20, [step * 1.2] * 20):  # shorter than the GPU's own time; slower than profiled
        scaled = on_headline_scale(m, timed).summary
        k = timed[0] / step
        assert scaled["gpu_compute_ms"] == pytest.approx(0.40 * k) and scaled["gpu_compute_frac"] == pytest.approx(0.40 / step)
