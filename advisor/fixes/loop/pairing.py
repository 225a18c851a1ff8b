"""How a variant's runs are paired: with the reference runs around them, or with its partner's run.

A fix measured on top of another (``cpu_threads`` on top of two DataLoader workers) runs in one
measurement against the plain baseline beside the run it builds on, its *partner*:
``A P V A V P A``. Its own effect is read against the partner's run of the same round
(:func:`~advisor.fixes.stats.round_ratios`): both lie between the same two baseline runs, and the
order within a round alternates, so a steady drift cancels over two rounds. The same runs give
the pair measured together against the plain baseline (``V`` against ``A``): the combination
the loop would otherwise measure in a stage of its own (docs/fix-loop.md, step 6).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from advisor.fixes.loop.variant import Variant
from advisor.fixes.stats import (
    Estimate,
    estimate,
    paired_estimate,
    reference_residuals,
    round_ratios,
)

PAIRED_NOTE = "each run paired with {label}'s run of the same round, both between the same two baseline runs"
"""A partnered trial's reason says how it was paired."""


def estimate_of(v: Variant, min_effect: float, alpha: float = 0.05) -> Estimate:
    """Return a variant's speedup estimate: against its partner's runs when it has one, else the references'.

    The noise floor pooled into the interval is the plain baseline's own scatter
    (:func:`~advisor.fixes.stats.reference_residuals` of its runs in this diagnose) either way.
    """
    if v.partner is None:
        return paired_estimate(v.ref_rates, v.rates, min_effect, alpha, history=v.ref_history)
    nulls = reference_residuals(v.ref_history if v.ref_history is not None else v.ref_rates)
    return estimate(round_ratios(v.partner.rates, v.rates), min_effect, alpha, nulls)


def against_partner(v: Variant) -> Variant:
    """Return the variant with its partner's runs in place of its references (itself without a partner).

    Its trial's "before" columns (rate, time to first step, peak memory) and the runs a
    disagreement is looked for in are then the partner's; :func:`estimate_of` still pairs by round.
    """
    p = v.partner
    if p is None:
        return v
    return replace(v, ref_rates=list(p.rates), ref_ttfs=list(p.ttfs), ref_peaks=list(p.peaks),
                   ref_facts=list(p.facts))


def still_running(running: Sequence[Variant]) -> list[Variant]:
    """Drop the anchors no variant still running is paired with, and the variants whose partner stopped.

    A partner that failed or was skipped leaves nothing to judge the fixes on top of it against.
    """
    left = [v for v in running if v.partner is None or v.partner.active]
    wanted = {id(v.partner) for v in left if v.partner is not None and not v.anchor}
    return [v for v in left if not v.anchor or (v.active and id(v) in wanted)]
