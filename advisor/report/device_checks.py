"""Warnings for a CUDA run whose GPU went unseen: no kernels in its trace, or NVML that failed.

A CUDA run whose trace holds no kernel, copy or memset was profiled without device activity
(Kineto could not load CUPTI, or another profiler holds it): its breakdown reads 0% GPU time and
every category it names describes the host alone. Such a report carries the warning with the
likely cause and no primary category (:func:`gpu_unseen`), rather than a verdict built on time
the profiler never recorded. NVML failing on a CUDA run only costs the utilisation figures.

The profiler slows the host (every operator and, with stacks, every Python call is recorded) but
not the GPU's kernels: on the H200 (2026-11-27) the launch-bound examples' profiled steps took
2.8-2.9x their timed ones, and shares of the profiled step read compute_bound's GPU busy 5.8% of
a step it kept busy about 17% of. The breakdown now keeps the device's parts at their
milliseconds (:mod:`advisor.metrics.headline_scale`); :func:`profiler_stretch` says so, with the
figures, where the stretch is large.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from advisor.capture.model import RunCapture
from advisor.metrics.headline_scale import rows_clocks

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
"""Profiled over timed step time from which the report says how it rescaled the breakdown."""


def profiler_stretch(capture: RunCapture | None, steps: Sequence[Mapping[str, Any]]) -> str | None:
    """Say how far the profiler stretched a CUDA run's steps, and how the breakdown was put on the timed step."""
    if capture is None or capture.environment.device != "cuda":
        return None
    c = rows_clocks(steps, capture.timed.step_times_ms)
    if c is None or not c.split or c.profiled_ms / c.headline_ms < STRETCH_WARN:
        return None
    return (f"the profiled steps took {c.profiled_ms:.3g} ms on average, {c.profiled_ms / c.headline_ms:.1f}x the timed "
            f"steps' {c.headline_ms:.3g} ms: the profiler slows the host (every operator and Python call recorded), not "
            f"the GPU. The breakdown keeps the GPU's parts at the {c.device_ms:.3g} ms per step they took in the profile "
            f"({c.device_ms / c.headline_ms:.0%} of a timed step, {c.device_ms / c.profiled_ms:.0%} of a profiled one) and "
            "shares the rest among the host's parts as the profile did: an estimate")


def device_warnings(capture: RunCapture | None, summary: Mapping[str, float | None],
                    steps: Sequence[Mapping[str, Any]] = ()) -> tuple[str, ...]:
    """Return the report's warnings about a GPU the measurement could not see, or saw stretched."""
    out: list[str] = []
    if gpu_unseen(capture, summary):
        out.append(NO_KERNELS)
    stretch = profiler_stretch(capture, steps)
    if stretch:
        out.append(stretch)
    note = capture.gpu.note if capture is not None else None
    if capture is not None and capture.environment.device == "cuda" and note:
        out.append(f"{note}: GPU utilisation and memory were not sampled on this CUDA run (nvidia-ml-py "
                   "needs the driver's libnvidia-ml); the trace's figures stand")
    return tuple(out)
