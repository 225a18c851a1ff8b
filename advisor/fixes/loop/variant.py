"""One candidate run under measurement (:class:`Variant`), and the verdict names the loop's parts share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from advisor.capture.model import FixRequest
from advisor.fixes.agreement import RunFacts
from advisor.fixes.model import Verdict

# The verdicts under short names (advisor.fixes.model.Verdict).
IMPROVED, NO_EFFECT, SLOWER, FAILED, SKIPPED, ADVICE = (
    Verdict.IMPROVED, Verdict.NO_EFFECT, Verdict.SLOWER, Verdict.FAILED, Verdict.SKIPPED, Verdict.ADVICE
)
UNDECIDED = Verdict.UNDECIDED  # measured, but the interval is too wide to tell (advisor.fixes.stats)
UNMEASURABLE = Verdict.UNMEASURABLE  # runs of one setting disagreed and the range could not tell
OUTRUN = "was decided faster"
"""What the reason of a rung stopped because another rung outran it says (the ladder line shows it)."""

# Verdicts of a workers trial that measured something (its best rung can carry on-top fixes).
RAN = (IMPROVED, NO_EFFECT, UNDECIDED, UNMEASURABLE, SLOWER)


@dataclass
class Variant:
    """One candidate under measurement (mutable bookkeeping, turned into a :class:`Trial`)."""

    label: str
    fix: str
    safety: str
    requests: tuple[FixRequest, ...]
    loss_rtol: float
    params: dict[str, Any] = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)
    fixes: tuple[str, ...] = ()
    rates: list[float | None] = field(default_factory=list)
    ttfs: list[float] = field(default_factory=list)
    peaks: list[int] = field(default_factory=list)
    loss_diffs: list[float] = field(default_factory=list)
    failure: str | None = None
    skip: str | None = None
    note: str = ""
    reference: str = ""
    ref_note: str = ""
    ref_rates: list[float | None] = field(default_factory=list)
    ref_history: list[float | None] | None = None  # every run of the reference's setting so far
    ref_ttfs: list[float] = field(default_factory=list)
    ref_peaks: list[int] = field(default_factory=list)
    facts: list[RunFacts] = field(default_factory=list)  # what each measured run recorded
    ref_facts: list[RunFacts] = field(default_factory=list)
    memory_kind: str | None = None
    early: int = 0  # pairs after which the measurement stopped before its planned rounds
    cut: bool = False  # stopped by the budget rather than by a decided interval
    outrun: str = ""  # stopped because this rung of the ladder, decided improved, measured faster
    # NOTE: measured against the plain baseline beside the run it builds on (advisor.fixes.loop.pairing):
    # judged against that partner's run of each round. An anchor is such a partner: its runs
    # serve the others, and it runs as long as one of them does.
    partner: Variant | None = field(default=None, compare=False, repr=False)
    anchor: bool = False
    loaders: tuple[Any, ...] = ()  # the DataLoaders its first measured run recorded

    @property
    def active(self) -> bool:
        """Whether it is still measured (it has neither failed nor been skipped)."""
        return self.failure is None and self.skip is None


def describe(v: Variant) -> str:
    """Begin a measured variant's reason with what it ran on top of, its runtime note, an early stop."""
    parts = []
    if v.reference:
        parts.append(f"on top of {v.reference}")
    if v.ref_note:
        parts.append(v.ref_note)
    if v.note:
        parts.append(v.note)
    if v.early and v.cut:
        parts.append(f"stopped after {v.early} pairs: the --budget ran out")
    elif v.early and v.outrun:
        parts.append(f"stopped after {v.early} pairs: the rung {v.outrun} {OUTRUN}, and more pairs "
                     "of this one could only change the rung kept by noise")
    elif v.early:
        parts.append(f"decided after {v.early} pairs (sequential test, Bonferroni-corrected looks)")
    return "; ".join(parts)
