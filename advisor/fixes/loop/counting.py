"""Whether a trial run counted its steps and samples as its reference did, so that their rates compare.

A trial's speedup is its samples/s over its reference's, each counted by the capture: steps at
the boundaries of one kind (optimizer steps, backward calls, ...), samples from the batches the
step consumed. When a fix changes what the capture sees rather than how fast the script runs,
the ratio measures the counting. On pytorch/examples' word language model, ``torch.compile``
hid the model's calls from the capture's hooks, the loss module's 700 rows were counted as the
step's samples against the baseline's 35, and the fix was kept at 18x where the plain script
ran no faster. A fix that leaves the batches alone must leave the samples per step where they
were; those that change the batch say so (``Fix.changes_samples``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from advisor._num import median
from advisor.capture.model import RunCapture
from advisor.fixes import catalog

SAMPLES_TOLERANCE = 1.25
"""How far a run's median samples per step may be from its reference's (either way) and still compare.

The last batch of an epoch is smaller, and text batches vary in length; a changed count is a
whole factor (the 700 against 35 above)."""


@dataclass(frozen=True)
class Counting:
    """How a reference run counted: its step source and its median samples per timed step."""

    source: str | None = None
    samples_per_step: float | None = None

    @classmethod
    def of(cls, cap: RunCapture) -> Counting:
        """Read the counting of one finished run."""
        counted = [float(s) for s in cap.timed.samples if s]
        return cls(cap.step_source, median(counted) if counted else None)

    def mismatch(self, cap: RunCapture, fixes: Sequence[str]) -> str | None:
        """Say why ``cap``, run with ``fixes``, does not compare with this reference; None when it does."""
        if self.source and cap.step_source and cap.step_source != self.source:
            return (f"steps were counted from {cap.step_source} boundaries here but from {self.source} "
                    "boundaries in the baseline: the throughputs are not comparable")
        mine = Counting.of(cap).samples_per_step
        if not self.samples_per_step or not mine or any(_changes_samples(f) for f in fixes):
            return None
        if 1 / SAMPLES_TOLERANCE <= mine / self.samples_per_step <= SAMPLES_TOLERANCE:
            return None
        return (f"{mine:,.0f} samples were counted per step here against {self.samples_per_step:,.0f} in the "
                "baseline, and the fix does not change the batch: the capture counted something else, "
                "so the throughputs are not comparable")


def _changes_samples(fix_id: str) -> bool:
    fix = catalog.get_fixes().get(fix_id)
    return fix is None or fix.changes_samples
