"""Per-step milliseconds on the headline step's scale, for the rules' messages and thresholds.

A run's headline step time is the steady median of its *timed* steps (no profiler); the trace's
per-step milliseconds come from the *profiled* steps, which the profiler slows (every op
recorded). The report shows the breakdown's parts as shares of the headline step; a finding that
printed the trace's own milliseconds beside it put a second step time in the report ("72% of
each step (227.7 ms ...)" under a 389 ms headline whose data-loading part read 278.9 ms). The
rules therefore see host-clock per-step times scaled by ``headline / profiled median``; the
stored metrics keep the trace's values, which the report scales the same way when it renders.

The profiler stretches the host, not the GPU: it records every operator and Python call, while a
kernel runs as long as it would unprofiled. On the H200 (2026-11-27) the launch-bound examples'
profiled steps took 2.8-2.9x their timed ones, and one factor for every part read compute_bound's
GPU busy 5.8% of a step it kept busy about 17% of. So on a GPU trace whose device parts fit in the
headline step (:class:`Clocks`), the device parts keep their profiled milliseconds and the host's
parts share the rest of the headline step in their profiled proportions; the shares of the step
(the breakdown's ``<part>_frac``, ``gpu_busy_frac``, the GPU-idle classes) follow. That is an
estimate, and the report says so; without device parts, or where they do not fit, one factor
scales everything as before.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from advisor._num import finite
from advisor._steady import assess
from advisor.metrics.model import Metrics
from advisor.metrics.registry import BREAKDOWN_PARTS

HOST_STEP_MS = ("step_time_ms", "dataloader_wait_ms", "input_assembly_ms", "sync_ms", *(f"{p}_ms" for p in BREAKDOWN_PARTS))
"""Per-step times on the step's wall clock, which a slower profiled step stretches with it.

Not the longest GPU gap nor communication time: single device-side spans, not parts of the
host's step."""


DEVICE_PARTS = ("gpu_compute", "communication", "h2d_copy", "d2h_copy")
"""Breakdown parts on the device's clock: the GPU runs kernels, collectives or copies."""

IDLE_SHARES = (
    "idle_frac", "idle_sync_frac", "idle_data_loading_frac", "idle_preprocess_frac", "idle_launch_frac",
    "idle_host_frac", "idle_unattributed_frac",
)
"""Shares of the step in which the GPU idles: host time."""


@dataclass(frozen=True)
class Clocks:
    """How a profiled step's milliseconds map onto the headline step.

    Attributes:
        device: Factor for device-clock milliseconds (1.0 when the clocks are told apart).
        host: Factor for host-clock milliseconds.
        profiled_ms: The profiled step the shares are of.
        headline_ms: The headline (timed) step.
        device_ms: The profiled step's milliseconds on the device's clock (:data:`DEVICE_PARTS`).
    """

    device: float
    host: float
    profiled_ms: float
    headline_ms: float
    device_ms: float = 0.0

    @property
    def split(self) -> bool:
        """Whether the device and the host are scaled apart (else one factor for every part)."""
        return self.device != self.host

    def share(self, frac: float, device: bool) -> float:
        """Return a share of the profiled step as a share of the headline step."""
        return frac * self.profiled_ms * (self.device if device else self.host) / self.headline_ms


def clocks(profiled_ms: float | None, device_ms: float, headline: float | None) -> Clocks | None:
    """Return the factors for a profiled step of ``profiled_ms`` with ``device_ms`` on the device's clock.

    Split only where the profiler stretched the step and the device's time fits in the headline
    step; else one factor (``headline / profiled``). None when either step time is unknown.
    """
    if not profiled_ms or not headline or profiled_ms <= 0 or headline <= 0:
        return None
    if 0 < device_ms < headline < profiled_ms:
        return Clocks(1.0, (headline - device_ms) / (profiled_ms - device_ms), profiled_ms, headline, device_ms)
    k = headline / profiled_ms
    return Clocks(k, k, profiled_ms, headline, device_ms)


def split_shares(shares: Mapping[str, float], c: Clocks | None) -> dict[str, float]:
    """Return the breakdown's ``shares`` of the profiled step as shares of the headline step."""
    if c is None or not c.split:
        return dict(shares)
    return {p: c.share(v, p in DEVICE_PARTS) for p, v in shares.items()}


def headline_ms(timed_step_times_ms: Sequence[float | None]) -> float | None:
    """Return the headline step time: as the report's headline, the steady median when every timed step is valid."""
    times = [t for t in timed_step_times_ms if t is not None and math.isfinite(t) and t > 0]
    if not times:
        return None
    return assess(times).median_ms if len(times) == len(timed_step_times_ms) else statistics.median(times)


def summary_clocks(summary: Mapping[str, float | None], timed_step_times_ms: Sequence[float | None]) -> Clocks | None:
    """Return the clocks of a metrics summary: its profiled median step and its device parts' milliseconds."""
    device = sum(v for p in DEVICE_PARTS if (v := finite(summary.get(f"{p}_ms"))) is not None)
    return clocks(summary.get("step_time_ms"), device, headline_ms(timed_step_times_ms))


def rows_clocks(rows: Iterable[Mapping[str, Any]], timed_step_times_ms: Sequence[float | None]) -> Clocks | None:
    """Return the clocks of per-step rows (``step_time_ms`` and ``<part>_ms``): their mean step and device time."""
    steps = [r for r in rows if finite(r.get("step_time_ms")) is not None]
    if not steps or not timed_step_times_ms:
        return None
    profiled = sum(float(r["step_time_ms"]) for r in steps) / len(steps)
    device = sum(v for r in steps for p in DEVICE_PARTS if (v := finite(r.get(f"{p}_ms"))) is not None) / len(steps)
    return clocks(profiled, device, headline_ms(timed_step_times_ms))


def metrics_clocks(metrics: Metrics, timed_step_times_ms: Sequence[float | None]) -> Clocks | None:
    """Return the clocks the rules' metrics are put on the headline step with.

    Split as the report splits its breakdown (the profiled steps' mean, :mod:`advisor.report.figures`);
    else one factor as before, from the profiled median.
    """
    cols = [c for c in ("step_time_ms", *(f"{p}_ms" for p in DEVICE_PARTS)) if c in metrics.steps.columns]
    rows = metrics.steps[cols].to_dict("records") if "step_time_ms" in cols else []
    split = rows_clocks(rows, timed_step_times_ms)
    return split if split is not None and split.split else summary_clocks(metrics.summary, timed_step_times_ms)


def headline_factor(metrics: Metrics, timed_step_times_ms: Sequence[float | None]) -> float:
    """Return the factor for host-clock milliseconds (``headline / profiled median`` unless the clocks are split)."""
    c = metrics_clocks(metrics, timed_step_times_ms)
    return 1.0 if c is None else c.host


def on_headline_scale(metrics: Metrics, timed_step_times_ms: Sequence[float | None]) -> Metrics:
    """Return ``metrics`` with :data:`HOST_STEP_MS` on the headline step's scale.

    Where the clocks are split, the step's shares (:data:`BREAKDOWN_PARTS`' fractions,
    ``gpu_busy_frac``, :data:`IDLE_SHARES`) move with them.
    """
    summary = metrics.summary
    c = metrics_clocks(metrics, timed_step_times_ms)
    if c is None or (c.device == 1.0 and c.host == 1.0):
        return metrics
    device_ms = {f"{p}_ms" for p in DEVICE_PARTS}
    scaled: dict[str, float] = {}
    for name in HOST_STEP_MS:
        v = summary.get(name)
        if v is not None:
            scaled[name] = c.headline_ms if name == "step_time_ms" else v * (c.device if name in device_ms else c.host)
    if c.split:
        for p in BREAKDOWN_PARTS:
            if (v := summary.get(f"{p}_frac")) is not None:
                scaled[f"{p}_frac"] = c.share(v, p in DEVICE_PARTS)
        if (v := summary.get("gpu_busy_frac")) is not None:
            scaled["gpu_busy_frac"] = min(1.0, c.share(v, True))
        for name in IDLE_SHARES:
            if (v := summary.get(name)) is not None:
                scaled[name] = c.share(v, False)
    return replace(metrics, summary={**summary, **scaled})
