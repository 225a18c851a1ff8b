"""The report's headline numbers, the same in every format: step time, its breakdown, throughput.

* **Step time** is the median of the *timed* steps (run without the profiler) when the run has
  them: that is the script's real speed. The profiled steps are slower (the profiler records
  every op, with shapes and stacks), so their median is used only for a bare trace.
* **Breakdown**: the shares come from the profiled steps (only they are broken down); their
  milliseconds are the shares of the headline step, so the parts add up to the number shown
  above them, and the caption says which steps the shares come from.
* **Throughput** is in samples/s only when the capture counted samples (DataLoader batches);
  otherwise it is steps/s (a loop that samples its own batches has no sample count).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from advisor.report import style as s
from advisor.report import (
    text as _text,  # NOTE: a module reference: text.py imports this module too
)
from advisor.report.model import Report


@dataclass(frozen=True)
class StepTime:
    """The headline step time.

    Attributes:
        ms: Median step time (None when unknown).
        steps: How many steps the median is over.
        basis: ``timed`` (no profiler) or ``profiled``.
    """

    ms: float | None
    steps: int
    basis: str

    def caption(self) -> str:
        """Say which steps the median covers, e.g. ``median of 20 timed steps (no profiler)``."""
        plural = "s" if self.steps != 1 else ""
        if self.basis == "timed":
            return f"median of {self.steps} timed step{plural} (no profiler)"
        return f"median of {self.steps} profiled step{plural}"


def _profiled_steps(report: Report) -> int:
    return report.run.steps_measured or len({(r.get("rank"), r.get("step")) for r in report.steps})


def step_time(report: Report) -> StepTime:
    """Return the headline step time: the timed steps' median, else the profiled steps'."""
    timed = [t for t in (s.finite(x) for x in report.run.timed_step_times_ms) if t is not None and t > 0]
    if timed:
        return StepTime(statistics.median(timed), len(timed), "timed")
    return StepTime(_text.median_step_ms(report), _profiled_steps(report), "profiled")


def part_ms(report: Report) -> dict[str, float | None]:
    """Milliseconds per breakdown part: its share of the headline step (the mean over profiled steps without timed steps)."""
    headline = step_time(report)
    if headline.basis != "timed" or headline.ms is None:
        return _text.mean_part_ms(report)
    return {part: share * headline.ms for part, share in _text.part_shares(report).items()}


def breakdown_caption(report: Report) -> str:
    """Say where the breakdown's shares and milliseconds come from."""
    profiled = _profiled_steps(report)
    plural = "s" if profiled != 1 else ""
    if step_time(report).basis == "timed":
        return f"shares of the {profiled} profiled step{plural}; ms are those shares of the timed median step"
    return f"mean share of a step's wall time over the {profiled} profiled step{plural}"


def rate_unit(report: Report) -> str:
    """Return ``samples/s`` when the run counted samples, else ``steps/s``."""
    counted = report.run.samples_per_s is not None or any(x for x in report.run.timed_samples)
    return "samples/s" if counted else "steps/s"


def rate(report: Report) -> tuple[float | None, str]:
    """Return the run's throughput and its unit (samples/s when samples are known, else steps/s)."""
    if rate_unit(report) == "samples/s":
        return _text.throughput(report), "samples/s"
    timed = [t for t in (s.finite(x) for x in report.run.timed_step_times_ms) if t is not None and t > 0]
    return (len(timed) / (sum(timed) / 1e3) if timed else None), "steps/s"
