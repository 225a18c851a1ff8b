"""Warnings for a CUDA run whose GPU went unseen: no kernels in its trace, or NVML that failed.

A CUDA run whose trace holds no kernel, copy or memset was profiled without device activity
(Kineto could not load CUPTI, or another profiler holds it): its breakdown reads 0% GPU time and
every category it names describes the host alone. Such a report carries the warning with the
likely cause and no primary category (:func:`gpu_unseen`), rather than a verdict built on time
the profiler never recorded. NVML failing on a CUDA run only costs the utilisation figures.
"""

from __future__ import annotations

from collections.abc import Mapping

from advisor.capture.model import RunCapture
from advisor.metrics.headline_scale import headline_ms

NO_KERNELS = (
    "this run used a CUDA device, but its trace holds no GPU kernel, copy or memset: the profiler "
    "recorded no device activity, most likely because Kineto could not load CUPTI (libcupti not on "
    "the library path, or another profiler such as Nsight holds it; torch.profiler.kineto_available() "
    "says whether Kineto is built in). GPU time reads 0%, so no primary bottleneck is named: fix the "
    "profiler and re-run"
)


def gpu_unseen(capture: RunCapture | None, summary: Mapping[str, float | None]) -> bool:
    """Whether a CUDA run's profiled steps recorded no GPU activity at all."""
    if capture is None or capture.environment.device != "cuda" or not capture.profiled_steps:
        return False
    return not summary.get("has_gpu_flag")


STRETCH_WARN = 1.5
"""Profiled over timed step time from which the breakdown's shares are said to lean to the host."""


def profiler_stretch(capture: RunCapture | None, summary: Mapping[str, float | None]) -> str | None:
    """Say how far the profiler stretched a CUDA run's steps, and what the GPU's share was unstretched."""
    if capture is None or capture.environment.device != "cuda" or not summary.get("has_gpu_flag"):
        return None
    step = headline_ms(capture.timed.step_times_ms)
    profiled, busy = summary.get("step_time_ms"), summary.get("gpu_busy_frac")
    if not step or not profiled or busy is None:
        return None
    ratio = profiled / step
    if ratio < STRETCH_WARN:
        return None
    gpu_ms = busy * profiled
    return (f"the profiled steps took {profiled:.3g} ms, {ratio:.1f}x the timed steps' {step:.3g} ms: the profiler "
            "slows the host (every operator and Python call recorded), not the GPU's kernels, so the breakdown "
            f"overstates the host's shares and understates the GPU's. The GPU was busy {gpu_ms:.3g} ms per profiled "
            f"step: about {min(1.0, gpu_ms / step):.0%} of a timed step, where the breakdown reads {busy:.0%}")


def device_warnings(capture: RunCapture | None, summary: Mapping[str, float | None]) -> tuple[str, ...]:
    """Return the report's warnings about a GPU the measurement could not see, or saw stretched."""
    out: list[str] = []
    if gpu_unseen(capture, summary):
        out.append(NO_KERNELS)
    stretch = profiler_stretch(capture, summary)
    if stretch:
        out.append(stretch)
    note = capture.gpu.note if capture is not None else None
    if capture is not None and capture.environment.device == "cuda" and note:
        out.append(f"{note}: GPU utilisation and memory were not sampled on this CUDA run (nvidia-ml-py "
                   "needs the driver's libnvidia-ml); the trace's figures stand")
    return tuple(out)
