"""Fixes whose objective is memory: their verdict is on peak memory, and one of them is kept apart.

Pure: no run is made here (the out-of-memory path that runs them is in :mod:`.stages`).
"""

from __future__ import annotations

from collections.abc import Sequence

from advisor.fixes import catalog
from advisor.fixes.fix import MIN_MEMORY_SAVING, Objective
from advisor.fixes.loop.text import mib, times
from advisor.fixes.loop.variant import IMPROVED, NO_EFFECT, UNDECIDED
from advisor.fixes.model import Trial, Verdict
from advisor.fixes.stats import Estimate


def over_budget(peak: int | None, budget: int | None) -> str | None:
    """Say why a run whose own peak went over the memory budget failed (None when it kept within it).

    The watchdog reads the run's memory ten times a second: a peak between two reads ends the
    run normally, and the run's own maximum shows it.
    """
    if not budget or (peak or 0) <= budget:
        return None
    return f"its peak {mib(peak)} went over the {mib(budget)} memory budget between two of the watchdog's reads"


def for_memory(t: Trial) -> bool:
    """Tell whether a trial measures one fix whose objective is memory (its verdict is on memory)."""
    fix = catalog.get_fixes().get(t.fix)
    return len(t.fixes) == 1 and fix is not None and fix.objective is Objective.MEMORY


def judge_memory(peak: int | None, base_peak: int | None, speed: Estimate) -> tuple[Verdict, str]:
    """Decide a memory fix's verdict on its peak memory; the speed it costs goes in the reason.

    ``improved`` when the peak falls by :data:`~advisor.fixes.fix.MIN_MEMORY_SAVING` or more,
    ``no_effect`` when it does not; ``undecided`` when no peak was recorded.
    """
    cost = "n/a" if speed.speedup is None else f"{speed.speedup:.2f}x"
    if speed.ci_low is not None and speed.ci_high is not None:
        cost += f" [{speed.ci_low:.2f}, {speed.ci_high:.2f}]"
    cost = f"its speed: {cost} ({speed.verdict})"
    if not peak or not base_peak:
        return UNDECIDED, f"objective memory: no peak memory was recorded; {cost}"
    saved = 1.0 - peak / base_peak
    change = f"peak {mib(base_peak)} -> {mib(peak)} ({saved:.0%} less)" if saved > 0 else (
        f"peak {mib(base_peak)} -> {mib(peak)} ({-saved:.0%} more)")
    if saved >= MIN_MEMORY_SAVING:
        return IMPROVED, f"objective memory: {change}; {cost}"
    return NO_EFFECT, f"objective memory: {change}, under the {MIN_MEMORY_SAVING:.0%} that counts as a saving; {cost}"


def pick_memory(trials: Sequence[Trial]) -> tuple[Trial | None, list[str]]:
    """Keep the memory fix that saves memory at the least speed cost (one: they were not measured together)."""
    savers = [t for t in trials if for_memory(t) and t.verdict == IMPROVED]
    if not savers:
        return None, []
    best = max(savers, key=lambda t: (t.speedup or 0.0, -(t.memory_ratio or 1.0)))
    notes = [f"{best.fix} is kept for the memory it saves (its objective), not combined with the speed fixes"]
    others = [t for t in savers if t is not best]
    if others:
        notes.append(
            "also saves memory, not kept (the memory fixes were each measured alone, not together): "
            + ", ".join(f"{t.fix} ({times(t.speedup)}, memory {times(t.memory_ratio)})" for t in others)
        )
    return best, notes

