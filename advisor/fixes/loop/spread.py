"""Runs of one setting that disagreed, in a trial: whether they did, and the reason's words for it.

See :mod:`advisor.fixes.agreement` for the test and :func:`advisor.fixes.stats.range_estimate`
for the verdict such runs get.
"""

from __future__ import annotations

from advisor.fixes.agreement import disagreement, explain
from advisor.fixes.loop.variant import Variant


def disagree(v: Variant) -> bool:
    """Whether the baseline's runs or the variant's disagree among themselves (:mod:`advisor.fixes.agreement`)."""
    return disagreement(v.ref_rates) is not None or disagreement(v.rates) is not None


def spread_reason(v: Variant, unit: str) -> str:
    """Say which runs disagreed, by how much, and what the slow ones shared (when anything did)."""
    parts = []
    for who, rates, facts in (("the baseline", v.ref_rates, v.ref_facts), ("the fix", v.rates, v.facts)):
        span = disagreement(rates)
        if span is None:
            continue
        lo, hi = span
        why = explain(facts)
        parts.append(
            f"runs of {who} disagreed, {rate_text(lo)} to {rate_text(hi)} {unit} ({hi / lo:.1f}x apart"
            + (f": {why})" if why else "; nothing they recorded explains it)")
        )
    if not parts:
        return ""
    return "; ".join(parts) + "; so the verdict compares every run with every other"


def rate_text(value: float) -> str:
    """Return a run's rate as the reasons print it: whole numbers from 100 up, three figures below."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
