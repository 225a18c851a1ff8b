"""When a variant's measurement ends before every round: another rung outran it, or it is worth more rounds.

Pure: these functions read the runs measured so far and make none (the sequential test's own
stop is :func:`advisor.fixes.stats.decides`).
"""

from __future__ import annotations

from collections.abc import Sequence

from advisor.fixes import catalog
from advisor.fixes.fix import Objective
from advisor.fixes.loop.pairing import against_partner, estimate_of
from advisor.fixes.loop.spread import disagree
from advisor.fixes.loop.variant import IMPROVED, NO_EFFECT, UNDECIDED, Variant


def worth_more_rounds(v: Variant, min_effect: float) -> bool:
    """Whether a variant still undecided after its planned rounds gets another round.

    Only a possible win is worth more runs: slower and no_effect are both dropped, and so are
    runs that disagree (more runs of a machine that changes under them would not decide it).
    """
    if disagree(against_partner(v)):
        return False
    est = estimate_of(v, min_effect)
    if est.speedup is None or est.verdict not in (NO_EFFECT, UNDECIDED):
        return False
    return est.speedup >= 1.0 + min_effect


def outrun_by(v: Variant, measured: Sequence[Variant], min_effect: float, alpha: float) -> Variant | None:
    """Return the rung of ``v``'s ladder that makes more runs of ``v`` pointless, or None.

    A speed ladder keeps its fastest improved rung (:func:`advisor.fixes.loop.select.collapse`).
    Once another rung's interval says *improved* (at the look's corrected ``alpha``) and ``v``
    measured less than it, more pairs of ``v`` could only change which rung is kept by noise:
    the demo's one-worker rung, at 1.03-1.15x beside two workers decided at 1.33x, ran three
    extra rounds (six runs, 12 s of a 60 s diagnose) to end "no effect". A memory ladder keeps
    the first rung that fits, whatever its speed, and a variant measured beside a partner
    belongs to no ladder of this measurement: neither is ever outrun.
    """
    if v.partner is not None or v.anchor or not v.active or catalog.get(v.fix).objective is Objective.MEMORY:
        return None
    mine = estimate_of(v, min_effect, alpha).speedup
    if mine is None:
        return None
    best: tuple[float, Variant] | None = None
    for s in measured:
        if s is v or s.fix != v.fix or s.label == v.label or s.partner is not None or s.anchor or not s.active:
            continue
        est = estimate_of(s, min_effect, alpha)
        if not disagree(s) and est.verdict == IMPROVED and est.speedup is not None and est.speedup > mine:
            if best is None or est.speedup > best[0]:
                best = (est.speedup, s)
    return None if best is None else best[1]


def stop_if_outrun(v: Variant, measured: Sequence[Variant], min_effect: float, alpha: float, pairs: int) -> bool:
    """Stop ``v`` after ``pairs`` pairs when another rung outran it (:func:`outrun_by`); say whether it stopped."""
    by = outrun_by(v, measured, min_effect, alpha)
    if by is None:
        return False
    v.early, v.outrun = pairs, f"{by.label} ({estimate_of(by, min_effect).speedup or 0.0:.2f}x)"
    return True
