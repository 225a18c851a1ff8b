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
