"""How fast the step's arithmetic ran, as a share of how fast the device can do it.

``peak_share_frac`` is the one number the compute-bound judgement reads, whatever the peak's
source:

* a CPU run: the matmul rate advisor measured on the machine that ran the capture
  (:mod:`advisor.capture.peak`, recorded in ``capture.environment.matmul_peaks``) for the
  trace's dominant matmul dtype and the script's thread count, or fp32's where that dtype
  was not measured or measured slower (the device does at least its fp32 rate);
* a GPU run: the datasheet peak of the device for that dtype (``mfu_frac``'s peak,
  :data:`advisor.metrics.flops.PEAK_TFLOPS`), or any other peak a later module supplies
  through ``peak_tflops``.

The achieved rate is the profiled steps' matmul/conv FLOPs divided by the *timed* steps' median
time when a capture has timed steps (the profiler's own overhead slows the profiled steps, most of
all steps made of many tiny ops), else by the profiled steps' time (``achieved_tflops``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from advisor._num import finite
from advisor.capture.model import RunCapture
from advisor.capture.peak import peak_for
from advisor.metrics.model import StepBasis


@dataclass(frozen=True)
class PeakShare:
    """The achieved matmul rate against the device's peak.

    Attributes:
        achieved_tflops: FLOPs per step / step time (TFLOP/s).
        peak_tflops: The peak it is compared with.
        share: achieved / peak (0..1; above 1 only when the peak was measured low, e.g. on a
            machine busy during the probe).
        source: ``measured`` (this machine's CPU, benchmarked) or ``datasheet`` (GPU table).
        dtype: The dtype whose peak was used (``fp32`` for a slower dtype's run on CPU).
        step_basis: ``timed`` or ``profiled``: which steps' time the rate divides by.
    """

    achieved_tflops: float
    peak_tflops: float
    share: float
    source: str
    dtype: str
    step_basis: StepBasis


def _measured_peak(capture: RunCapture | None, dtype: str) -> tuple[float | None, str]:
    """Return the capture's measured CPU matmul peak for ``dtype`` and the dtype it was measured in."""
    if capture is None:
        return None, dtype
    return peak_for(capture.environment.matmul_peaks, dtype)


def peak_share(
    summary: Mapping[str, float | None],
    capture: RunCapture | None,
    dominant_dtype: str | None,
    datasheet_tflops: float | None,
) -> PeakShare | None:
    """Achieved matmul TFLOP/s and its share of the device's peak, or None when either is unknown.

    Args:
        summary: The metric summary so far (``flops_per_step``, ``step_time_ms``,
            ``achieved_tflops``, ``has_gpu_flag``).
        capture: The run's capture (measured CPU peak, timed step times), or None for a bare trace.
        dominant_dtype: The dtype doing most matmul/conv FLOPs (``fp32``, ``bf16``, ...).
        datasheet_tflops: The GPU's peak for that dtype, when the trace has a known GPU.
    """
    flops = finite(summary.get("flops_per_step"))
    if flops is None or flops <= 0:
        return None
    dtype = dominant_dtype or "fp32"
    on_gpu = (finite(summary.get("has_gpu_flag")) or 0.0) >= 1.0
    if on_gpu:
        peak, source = datasheet_tflops, "datasheet"
    else:
        (peak, dtype), source = _measured_peak(capture, dtype), "measured"
    if not peak or peak <= 0:
        return None
    timed = [t for t in (capture.timed.step_times_ms if capture is not None else ()) if t and t > 0]
    if timed:
        achieved, basis = flops / (float(np.median(timed)) * 1e9), StepBasis.TIMED  # flops / ms * 1e-9 = TFLOP/s
    else:
        achieved, basis = finite(summary.get("achieved_tflops")), StepBasis.PROFILED
        if achieved is None:
            return None
    return PeakShare(achieved, float(peak), achieved / float(peak), source, dtype, basis)


def peak_share_metrics(share: PeakShare | None) -> dict[str, float | None]:
    """Return the declared metrics for a :class:`PeakShare` (all None when it is unknown)."""
    if share is None:
        return {"matmul_peak_tflops": None, "achieved_run_tflops": None, "peak_share_frac": None}
    return {
        "matmul_peak_tflops": share.peak_tflops,
        "achieved_run_tflops": share.achieved_tflops,
        "peak_share_frac": share.share,
    }
