"""How much a fix could possibly gain, before it runs: Amdahl bounds on the measured breakdown.

A fix that declares the step-time categories it shortens (``Fix.shrinks``) cannot make a step
faster than removing those categories entirely would: if they hold a share ``s`` of the measured
step, its speedup is at most ``1 / (1 - s)``. When that bound is below ``1 + min_effect`` no
measurement could call the fix a win, so the loop skips it unrun and says so with the bound
(a loader fix on a run that spends 1% of its step waiting for data is at most 1.01x).

The same bounds order the fixes when the loop has a time budget (``--budget``): the largest
possible gain is measured first. A fix that declares no categories (batch size, compile,
threads: their gain is not confined to one part of the step) is never skipped on a bound; for
ordering it takes the largest recoverable share the diagnosis gave the findings that suggested
it, and it goes last when there is none.

On a GPU run a fix that only makes kernels faster (``Fix.kernel_bound``: precision, layout,
cuDNN's algorithm choice) is also bounded by the share of the step the GPU is busy. The
breakdown's ``compute`` holds the CPU's op time too, and on a GPU that waits for the CPU most of
the step faster kernels change little: on the H200 (2026-11-27) a char-level GPT's GPU was busy
16% of a step whose compute share was 84%, and bf16 was offered "at most 6.47x".

Pure: no run is made, nothing is imported beyond the catalog.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from advisor.fixes import catalog

MAX_SHARE = 0.95
"""Largest share a bound takes (1 / 0.05 = 20x), as the engine caps a category's share."""


@dataclass(frozen=True)
class GainBound:
    """The largest speedup a fix could bring, and where the figure comes from.

    Attributes:
        fix: The fix id.
        speedup: ``1 / (1 - share)``; None when nothing bounds it.
        share: The share of the step the bound is taken from (None with ``speedup``).
        strict: True when the share is the fix's own categories on the measured breakdown: a
            true upper bound, which may skip the fix. False for a findings' estimate, which
            only orders fixes under a budget.
        why: One phrase naming the share, e.g. ``data_loading is 1.2% of the step``.
    """

    fix: str
    speedup: float | None = None
    share: float | None = None
    strict: bool = False
    why: str = ""

    def cannot_reach(self, min_effect: float) -> bool:
        """Whether even the bound stays below the minimum effect (only a strict bound says so)."""
        return self.strict and self.speedup is not None and self.speedup < 1.0 + min_effect

    def skip_reason(self, min_effect: float) -> str:
        """Return the reason a skipped fix's trial gives."""
        return (
            f"not run: at most {self.speedup:.3f}x by Amdahl's law ({self.why}), below the "
            f"{min_effect:.0%} minimum effect"
        )


def gain_bounds(
    wanted: Sequence[str], breakdown: Mapping[str, float] | None, impacts: Mapping[str, float] | None = None,
    gpu_busy: float | None = None,
) -> dict[str, GainBound]:
    """Bound each wanted fix's gain from the breakdown (category -> share of the step).

    Args:
        wanted: Fix ids.
        breakdown: The diagnosis's ``category -> fraction of step time`` (empty or None: no
            strict bounds).
        impacts: Fix id -> the largest ``impact_frac`` among the findings that suggested it
            (the diagnosis's estimate of recoverable time; used for ordering only).
        gpu_busy: On a GPU run, the share of the step the GPU is busy (None: not a GPU run).

    Returns:
        One :class:`GainBound` per wanted fix.
    """
    shares = {k: float(v) for k, v in (breakdown or {}).items() if v is not None}
    fixes = catalog.get_fixes()
    out: dict[str, GainBound] = {}
    for fix_id in wanted:
        cats = fixes[fix_id].shrinks if fix_id in fixes else ()
        known = [c for c in cats if c in shares]
        if known:
            share = min(max(sum(shares[c] for c in known), 0.0), MAX_SHARE)
            why = f"{' + '.join(known)} {'is' if len(known) == 1 else 'are'} {share:.1%} of the step"
            if gpu_busy is not None and fixes[fix_id].kernel_bound and gpu_busy < share:
                share = max(gpu_busy, 0.0)
                why = f"the GPU is busy {share:.1%} of the step"
            out[fix_id] = GainBound(fix_id, 1.0 / (1.0 - share), share, True, why)
            continue
        impact = (impacts or {}).get(fix_id)
        if impact and impact > 0:
            share = min(float(impact), MAX_SHARE)
            out[fix_id] = GainBound(
                fix_id, 1.0 / (1.0 - share), share, False, f"its findings claim {share:.1%} of the step",
            )
        else:
            out[fix_id] = GainBound(fix_id)
    return out


def by_gain(wanted: Sequence[str], bounds: Mapping[str, GainBound]) -> list[str]:
    """``wanted`` with the largest possible gain first (unbounded last, ties in the given order)."""
    order = {f: i for i, f in enumerate(wanted)}

    def key(f: str) -> tuple[float, int]:
        b = bounds.get(f)
        return (-(b.speedup if b is not None and b.speedup is not None else 0.0), order[f])

    return sorted(wanted, key=key)
