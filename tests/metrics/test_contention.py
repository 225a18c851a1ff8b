"""Threads against cores, and other work on the machine (advisor.metrics.contention)."""

from __future__ import annotations

import pytest

from advisor.capture.model import DataLoaderInfo, Environment, RunCapture, UtilSummary
from advisor.metrics.contention import contention_metrics, contention_warnings


def _capture(threads: int | None = 2, workers: int = 0, cores: int = 2, **cpu: float) -> RunCapture:
    return RunCapture(
        environment=Environment(cpu_count=cores, intra_op_threads=threads),
        dataloaders=(DataLoaderInfo(num_workers=workers),) if workers else (),
        cpu=UtilSummary(**cpu),
    )


def test_quiet_machine_counts_the_runs_own_threads() -> None:
    m = contention_metrics(_capture(2, workers=4, load_avg_mean=5.5, other_util_frac=0.02))
    assert m["intra_op_threads_count"] == 2 and m["runnable_threads_count"] == 6
    # load 5.5 is the run's own 6 threads: no other work, no contention
    assert m["cpu_demand_ratio"] == pytest.approx((6 + 0.04) / 2)
    assert m["contention_flag"] == 0.0


def test_other_work_is_the_larger_of_its_cpu_use_and_the_load_beyond_the_run() -> None:
    m = contention_metrics(_capture(2, load_avg_mean=11.0, other_util_frac=0.6))
    assert m["cpu_demand_ratio"] == pytest.approx((2 + 9.0) / 2)  # load 11 - own 2 > 0.6 x 2 cores
    assert m["contention_flag"] == 1.0 and m["load_avg"] == 11.0 and m["other_cpu_util_frac"] == 0.6
    m = contention_metrics(_capture(2, load_avg_mean=1.0, other_util_frac=0.3))
    assert m["cpu_demand_ratio"] == pytest.approx((2 + 0.6) / 2) and m["contention_flag"] == 1.0


def test_unknown_without_a_capture_or_samples() -> None:
    assert set(contention_metrics(None).values()) == {None}
    m = contention_metrics(_capture(None))
    assert m["runnable_threads_count"] is None and m["cpu_demand_ratio"] is None and m["contention_flag"] is None


def test_warning_names_the_load_and_the_primary_it_puts_in_doubt() -> None:
    summary = {"contention_flag": 1.0, "load_avg": 8.8, "cpu_count": 2.0, "other_cpu_util_frac": 0.88,
               "cpu_util_frac": 0.12}
    (text,) = contention_warnings(summary, "small_kernels")
    assert "load average 8.8 on 2 cores" in text and "other processes used 88% of the CPU" in text
    assert "this run got 12%" in text and "primary category (small_kernels)" in text
    (no_primary,) = contention_warnings(summary, None)
    assert "primary" not in no_primary
    assert contention_warnings({**summary, "contention_flag": 0.0}, "compute") == ()
    assert contention_warnings({}, "compute") == ()
