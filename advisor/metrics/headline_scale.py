"""Per-step milliseconds on the headline step's scale, for the rules' messages and thresholds.

A run's headline step time is the steady median of its *timed* steps (no profiler); the trace's
per-step milliseconds come from the *profiled* steps, which the profiler slows (every op
recorded). The report shows the breakdown's parts as shares of the headline step; a finding that
printed the trace's own milliseconds beside it put a second step time in the report ("72% of
each step (227.7 ms ...)" under a 389 ms headline whose data-loading part read 278.9 ms). The
rules therefore see host-clock per-step times scaled by ``headline / profiled median``; the
stored metrics keep the trace's values, which the report scales the same way when it renders.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import replace

from advisor._steady import assess
from advisor.metrics.model import Metrics
from advisor.metrics.registry import BREAKDOWN_PARTS

HOST_STEP_MS = ("step_time_ms", "dataloader_wait_ms", "input_assembly_ms", "sync_ms", *(f"{p}_ms" for p in BREAKDOWN_PARTS))
"""Per-step times on the step's wall clock, which a slower profiled step stretches with it.

Not the longest GPU gap nor communication time: single device-side spans, not parts of the
host's step."""


def headline_ms(timed_step_times_ms: Sequence[float | None]) -> float | None:
    """Return the headline step time: as the report's headline, the steady median when every timed step is valid."""
    times = [t for t in timed_step_times_ms if t is not None and math.isfinite(t) and t > 0]
    if not times:
        return None
    return assess(times).median_ms if len(times) == len(timed_step_times_ms) else statistics.median(times)


def headline_factor(metrics: Metrics, timed_step_times_ms: Sequence[float | None]) -> float:
    """Return ``headline / profiled median`` step time (1.0 when either is unknown)."""
    profiled = metrics.summary.get("step_time_ms")
    headline = headline_ms(timed_step_times_ms)
    return headline / profiled if headline and profiled else 1.0


def on_headline_scale(metrics: Metrics, timed_step_times_ms: Sequence[float | None]) -> Metrics:
    """Return ``metrics`` with :data:`HOST_STEP_MS` on the headline step's scale."""
    k = headline_factor(metrics, timed_step_times_ms)
    if k == 1.0:
        return metrics
    scaled = {name: metrics.summary[name] * k for name in HOST_STEP_MS if metrics.summary.get(name) is not None}
    return replace(metrics, summary={**metrics.summary, **scaled})
