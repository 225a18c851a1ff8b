"""The report's headline numbers, the same in every format: step time, its breakdown, throughput.

* **Step time** is the median of the *timed* steps (run without the profiler) when the run has
  them: that is the script's real speed. Only their steady part counts (:mod:`advisor._steady`):
  steps still warming up at the window's start are left out and counted in the caption, which
  also gives the spread (p10-p90) and says when the window was not steady. The profiled steps
  are slower (the profiler records every op, with shapes and stacks), so their median is used
  only for a bare trace.
* **Breakdown**: the shares come from the profiled steps (only they are broken down); their
  milliseconds are the shares of the headline step, so the parts add up to the number shown
  above them, and the caption says which steps the shares come from.
* **Throughput** is in samples/s only when the capture counted samples (DataLoader batches);
  otherwise it is steps/s (a loop that samples its own batches has no sample count).
* **Whole run**: the projection of the full run (:mod:`advisor.metrics.periodic`), when the
  capture knew the run's length: its steps, start-up and the share of work between steps.
* **Kept, whole run**: the kept fixes' measured step speedup set in that projection (or, without
  a length, beside the periodic work): start-up moved by the trials' change in time to the first
  step, periodic work as the capture measured it (:mod:`advisor.metrics.whole`): what a user
  timing the whole script will see.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from advisor._num import finite
from advisor._steady import assess, steady_times
from advisor.metrics.model import StepBasis
from advisor.metrics.whole import WholeScope
from advisor.report import style as s
from advisor.report.figures import (
    mean_part_ms,
    median_step_ms,
    part_shares,
    step_clocks,
    throughput,
)
from advisor.report.model import Report


@dataclass(frozen=True)
class StepTime:
    """The headline step time.

    Attributes:
        ms: Median step time (None when unknown).
        steps: How many steps the median is over (per rank for profiled steps).
        basis: ``timed`` (no profiler) or ``profiled``.
        ranks: Ranks whose profiled steps the median pools (1 for one process).
    """

    ms: float | None
    steps: int
    basis: StepBasis
    ranks: int = 1
    p10_ms: float | None = None
    p90_ms: float | None = None
    skipped: int = 0
    steady: bool = True

    def caption(self) -> str:
        """Say which steps the median covers, e.g. ``median of 20 timed steps (no profiler), p10-p90 ...``."""
        plural = "s" if self.steps != 1 else ""
        if self.basis != StepBasis.TIMED:
            return f"median of {_steps_text(self.steps, self.ranks)}"
        what = "steady timed" if self.skipped else "timed"
        text = f"median of {self.steps} {what} step{plural} (no profiler"
        if self.p10_ms is not None and self.p90_ms is not None and self.steps >= 5:
            text += f"; p10–p90 {s.ms(self.p10_ms).removesuffix(' ms')}–{s.ms(self.p90_ms)}"
        text += ")"
        if self.skipped:
            text += f"; the {self.skipped} before them were still warming up"
        return text if self.steady else text + "; not steady"


def _steps_text(steps: int, ranks: int) -> str:
    """``8 profiled steps``, or ``1 profiled step × 256 ranks`` when ranks are pooled."""
    text = f"{steps} profiled step{'s' if steps != 1 else ''}"
    return f"{text} × {ranks} ranks" if ranks > 1 else text


def _profiled(report: Report) -> tuple[int, int]:
    """(profiled steps per rank, ranks) of the report's step rows."""
    # NOTE: a job's rows hold each rank's steps; counting (rank, step) pairs read "256 profiled
    # steps" for one step of 256 ranks.
    ranks = len({r.get("rank") for r in report.steps}) or 1
    steps = len({r.get("step") for r in report.steps})
    if ranks == 1:
        return report.run.steps_measured or steps, 1
    return steps, ranks


def step_time(report: Report) -> StepTime:
    """Return the headline step time: the timed steps' median, else the profiled steps'."""
    times = report.run.timed_step_times_ms
    if all(s.finite(x) is not None and x > 0 for x in times) and times:
        verdict = assess(times)
        return StepTime(
            verdict.median_ms, verdict.used, StepBasis.TIMED, p10_ms=verdict.p10_ms, p90_ms=verdict.p90_ms,
            skipped=verdict.start, steady=verdict.steady,
        )
    timed = [t for t in (s.finite(x) for x in times) if t is not None and t > 0]
    if timed:
        return StepTime(statistics.median(timed), len(timed), StepBasis.TIMED)
    steps, ranks = _profiled(report)
    return StepTime(median_step_ms(report), steps, StepBasis.PROFILED, ranks)


def part_ms(report: Report) -> dict[str, float | None]:
    """Milliseconds per breakdown part: its share of the headline step (the mean over profiled steps without timed steps)."""
    headline = step_time(report)
    if headline.basis != StepBasis.TIMED or headline.ms is None:
        return mean_part_ms(report)
    return {part: share * headline.ms for part, share in part_shares(report).items()}


def breakdown_caption(report: Report) -> str:
    """Say where the breakdown's shares and milliseconds come from."""
    profiled = _steps_text(*_profiled(report))
    c = step_clocks(report)
    if step_time(report).basis == StepBasis.TIMED and c is not None and c.split:
        return (f"shares of the timed median step, estimated: the GPU's parts at their ms in the {profiled}, "
                f"the host's sharing the rest as they did there (the profiled steps ran {c.profiled_ms / c.headline_ms:.1f}x "
                "longer: the profiler slows the host, not the GPU)")
    if step_time(report).basis == StepBasis.TIMED:
        return f"shares of the {profiled}; ms are those shares of the timed median step"
    return f"mean share of a step's wall time over the {profiled}"


def rate_unit(report: Report) -> str:
    """Return ``samples/s`` when the run counted samples, else ``steps/s``."""
    counted = report.run.samples_per_s is not None or any(x for x in report.run.timed_samples)
    return "samples/s" if counted else "steps/s"


def rate(report: Report) -> tuple[float | None, str]:
    """Return the run's throughput and its unit (samples/s when samples are known, else steps/s)."""
    if rate_unit(report) == "samples/s":
        return throughput(report), "samples/s"
    timed = [t for t in (s.finite(x) for x in steady_times(report.run.timed_step_times_ms)) if t is not None and t > 0]
    return (len(timed) / (sum(timed) / 1e3) if timed else None), "steps/s"


def timed_scale(report: Report) -> float:
    """Return the factor that puts a profiled step's milliseconds on the headline step's scale.

    The profiled steps run slower than the timed ones (the profiler records every op); a figure
    measured in them (a source line's time per step) is shown as the same share of the headline
    step, as the breakdown's parts are, so the report holds one step time. 1.0 when the headline
    is the profiled median itself or either median is unknown.
    """
    headline = step_time(report)
    profiled = median_step_ms(report)
    if headline.basis != StepBasis.TIMED or not headline.ms or not profiled:
        return 1.0
    c = step_clocks(report)
    if c is not None and c.split:
        return c.host  # NOTE: line figures are host time: the host's factor, as its breakdown parts
    return headline.ms / profiled


def whole_run(report: Report) -> tuple[str, str] | None:
    """``("9.4 s", "480 steps, 2.7 s start-up, 6.8% between steps")``; None without a projection."""
    summary = report.summary or {}
    total, steps = finite(summary.get("projected_run_s")), finite(summary.get("projected_steps_count"))
    if total is None or not steps:
        return None
    parts = [f"{int(steps):,} steps"]
    startup = finite(summary.get("startup_s"))
    if startup is not None:
        parts.append(f"{startup:.1f} s start-up")
    end = finite(summary.get("run_end_s"))
    parts.append(f"{_seconds(end)} exit" if end else "exit not timed")
    between = (finite(summary.get("periodic_work_frac")) or 0.0) + (finite(summary.get("epoch_change_frac")) or 0.0)
    if between:
        parts.append(f"{s.pct(between)} between steps")
    return f"{total:.1f} s", ", ".join(parts)


def _seconds(value: float) -> str:
    """``3.3 s``, ``0.044 s``: two significant figures below a second."""
    return f"{value:.1f} s" if value >= 1.0 else f"{value:.2g} s"


def kept_whole(report: Report) -> tuple[str, str] | None:
    """Return the kept fixes over the whole run (:mod:`advisor.metrics.whole`), or None without one.

    ``("12.7 s → 8.7 s projected, 1.46× [1.31–1.58]", "start-up 3.3 s → 3.6 s; evaluate every 25 steps, ...")``
    """
    w = report.kept_whole
    if w is None or s.finite(w.ratio) is None:
        return None
    ratio = f"{s.times(w.ratio)} {s.ci(w.low, w.high)}".strip()
    parts = []
    if w.scope == WholeScope.RUN:
        head = f"{w.before_s:.1f} s → {w.after_s:.1f} s projected, {ratio}"
        before, after = w.startup_before_s, w.startup_after_s
        if before is not None and after is not None:
            same = abs(after - before) < 0.05
            parts.append(f"start-up {_seconds(before)}" + (", the same in the trials" if same else f" → {_seconds(after)}"))
        parts.append(f"exit {_seconds(w.end_s)}, held" if w.end_s else "exit not timed")
    else:
        head = f"{ratio} over the steps with their periodic work (the run's length is unknown)"
    if w.epoch_changes is not None and w.epoch_change_before_s is not None and w.epoch_change_after_s is not None:
        parts.append(f"the epoch change {_seconds(w.epoch_change_before_s)} → {_seconds(w.epoch_change_after_s)} "
                     f"beyond a step, {w.epoch_changes} time{'s' if w.epoch_changes != 1 else ''}, as the trial's "
                     "runs timed it (held at both ends of the interval)")
    if w.gain_steps is not None:
        parts.append(f"its speedup counted on the first {w.gain_steps:,} steps only: after them the baseline "
                     "had nothing left for the fix to gain (its finding says why)")
    for c in w.periodic:
        text = f"{c.function} every {c.period} steps, {_seconds(c.cost_s)} each, as measured without them"
        if c.seen_s is not None and not 0.8 <= c.seen_s / max(c.cost_s, 1e-9) <= 1.25:
            n = f"{c.seen} occurrence{'s' if c.seen != 1 else ''}"
            text += f" (the kept fixes' profiled run timed {_seconds(c.seen_s)} in {n}: too few to project)"
        parts.append(text)
    return head, "; ".join(parts)
