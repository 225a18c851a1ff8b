"""The achieved matmul rate against the device's peak (advisor.metrics.peak_share)."""

from __future__ import annotations

import pytest

from advisor.capture.model import Environment, RunCapture, TimedPhase
from advisor.capture.peak import MatmulPeak
from advisor.metrics.peak_share import peak_share, peak_share_metrics


def _capture(times: tuple[float, ...] = (), peaks: tuple[MatmulPeak, ...] = ()) -> RunCapture:
    return RunCapture(timed=TimedPhase(step_times_ms=times), environment=Environment(matmul_peaks=peaks))


PEAKS = (MatmulPeak("fp32", 2, 0.1), MatmulPeak("bf16", 2, 0.001))


def test_cpu_share_uses_the_measured_peak_and_the_timed_median() -> None:
    cap = _capture((10.0, 20.0, 30.0), PEAKS)
    share = peak_share({"flops_per_step": 1e9, "has_gpu_flag": 0.0, "achieved_tflops": 0.01}, cap, "fp32", None)
    assert share is not None
    assert share.achieved_tflops == pytest.approx(0.05)  # 1 GFLOP in the 20 ms timed median
    assert share.share == pytest.approx(0.5)
    assert (share.source, share.step_basis, share.dtype) == ("measured", "timed", "fp32")


def test_cpu_share_picks_the_dtype_and_falls_back_to_fp32() -> None:
    # bf16 measured a hundred times slower than fp32 (a CPU without native bf16): the device
    # still does fp32's rate, so that is the peak (against bf16's, 1 GFLOP in 20 ms was 5000%)
    cap = _capture((20.0,), PEAKS)
    bf16 = peak_share({"flops_per_step": 1e9, "has_gpu_flag": 0.0}, cap, "bf16", None)
    fp16 = peak_share({"flops_per_step": 1e9, "has_gpu_flag": 0.0}, cap, "fp16", None)
    assert bf16 is not None and (bf16.peak_tflops, bf16.dtype) == (0.1, "fp32")
    assert bf16.share == pytest.approx(0.5)
    assert fp16 is not None and (fp16.peak_tflops, fp16.dtype) == (0.1, "fp32")
    # a CPU whose bf16 is the faster (AMX): its own rate
    amx = _capture((20.0,), (MatmulPeak("fp32", 2, 0.1), MatmulPeak("bf16", 2, 0.4)))
    fast = peak_share({"flops_per_step": 1e9, "has_gpu_flag": 0.0}, amx, "bf16", None)
    assert fast is not None and (fast.peak_tflops, fast.dtype) == (0.4, "bf16")


def test_without_timed_steps_the_profiled_rate_is_used() -> None:
    share = peak_share({"flops_per_step": 1e9, "has_gpu_flag": 0.0, "achieved_tflops": 0.02}, _capture((), PEAKS), "fp32", None)
    assert share is not None and share.step_basis == "profiled" and share.share == pytest.approx(0.2)


def test_gpu_share_uses_the_datasheet_peak() -> None:
    share = peak_share({"flops_per_step": 1e12, "has_gpu_flag": 1.0, "achieved_tflops": 39.0}, None, "bf16", 312.0)
    assert share is not None and share.source == "datasheet" and share.share == pytest.approx(0.125)


@pytest.mark.parametrize(
    ("summary", "capture", "datasheet"),
    [
        ({"flops_per_step": None, "has_gpu_flag": 0.0}, _capture((10.0,), PEAKS), None),  # no FLOPs
        ({"flops_per_step": 1e9, "has_gpu_flag": 0.0, "achieved_tflops": 0.1}, None, None),  # bare CPU trace
        ({"flops_per_step": 1e9, "has_gpu_flag": 1.0, "achieved_tflops": 0.1}, None, None),  # unknown GPU
    ],
)
def test_unknown_share_is_none(summary, capture, datasheet) -> None:
    share = peak_share(summary, capture, "fp32", datasheet)
    assert share is None
    assert peak_share_metrics(share) == {"matmul_peak_tflops": None, "achieved_run_tflops": None, "peak_share_frac": None}
