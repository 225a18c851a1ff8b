"""``advisor compare``'s per-part table: each breakdown part before and after, on one basis for both sides.

A CPU run's parts are the profiled steps' shares and mean milliseconds (the table's basis
``StepBasis.PROFILED``). On a GPU run the report's breakdown shows shares of the timed median step, with
the device's parts at their profiled milliseconds and the host's sharing the rest
(:mod:`advisor.metrics.headline_scale`); where either side is such a run, both sides are put on
that basis (``StepBasis.TIMED``), so the table shows what each run's own report shows.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.metrics.model import StepBasis
from advisor.report import style as s
from advisor.report.figures import mean_part_ms, part_shares, profiled_shares, step_clocks
from advisor.report.headline import part_ms
from advisor.report.model import Report


class MsDelta:
    """A row with ``before_ms`` and ``after_ms``: its change per step."""

    before_ms: float | None
    after_ms: float | None

    @property
    def delta_ms(self) -> float | None:
        """After minus before, in ms per step (None when either side lacks it)."""
        return _minus(self.after_ms, self.before_ms)


@dataclass(frozen=True)
class PartDelta(MsDelta):
    """One breakdown part before and after (fractions of the step, and ms per step: :func:`part_deltas` says of which steps)."""

    part: str
    before_frac: float | None
    after_frac: float | None
    before_ms: float | None
    after_ms: float | None

    @property
    def delta_frac(self) -> float | None:
        """After minus before, as a share of step time."""
        return _minus(self.after_frac, self.before_frac)


def _minus(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


def part_deltas(a: Report, b: Report) -> tuple[tuple[PartDelta, ...], StepBasis]:
    """Return the per-part rows of ``a`` against ``b`` and the steps they are of."""
    split = any(c is not None and c.split for c in (step_clocks(a), step_clocks(b)))
    if split:
        sa, sb = part_shares(a), part_shares(b)
        ma, mb = part_ms(a), part_ms(b)
    else:
        sa, sb = profiled_shares(a), profiled_shares(b)
        ma, mb = mean_part_ms(a), mean_part_ms(b)
    out = []
    for p in s.ordered_parts({**sa, **sb}):
        fa, fb = sa.get(p), sb.get(p)
        if (fa or 0) <= 0 and (fb or 0) <= 0:
            continue
        out.append(PartDelta(p, fa, fb, ma.get(p), mb.get(p)))
    return tuple(out), StepBasis.TIMED if split else StepBasis.PROFILED
