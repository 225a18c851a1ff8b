"""The *select* part of the fix loop: which rung of a ladder, which set of fixes, what is kept.

Pure: every function here reads measured trials and makes no run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from advisor.fixes import catalog
from advisor.fixes.loop.memory import for_memory
from advisor.fixes.loop.text import label_of, times
from advisor.fixes.loop.variant import FAILED, IMPROVED, OUTRUN, RAN, SKIPPED
from advisor.fixes.model import Trial, set_name
from advisor.fixes.stats import MIN_EFFECT


def collapse(trials: Sequence[Trial]) -> dict[str, Trial]:
    """One trial per fix: the best measured rung of a ladder, with the ladder in its reason."""
    by_fix: dict[str, list[Trial]] = {}
    for t in trials:
        by_fix.setdefault(t.fix, []).append(t)
    out: dict[str, Trial] = {}
    for fix, rungs in by_fix.items():
        if len(rungs) == 1:
            out[fix] = rungs[0]
            continue
        measured = [t for t in rungs if t.speedup is not None and t.verdict not in (FAILED, SKIPPED)]
        fits = [t for t in rungs if t.verdict == IMPROVED]
        if for_memory(rungs[0]) and fits:
            best = fits[0]  # NOTE: rungs come in ladder order: the first that fits holds the most per micro-batch
        elif measured:
            best = max(measured, key=lambda t: (t.verdict == IMPROVED, t.speedup or 0.0))
        else:
            best = rungs[0]
        rung = catalog.get(fix).rung_name
        ladder = ", ".join(f"{rung(t.params)}: {_rung_result(t)}" for t in rungs)
        out[fix] = replace(best, reason=f"{best.reason}; ladder {ladder}".lstrip("; "))
    return out


def _rung_result(t: Trial) -> str:
    """One rung's result in a ladder line: its speedup and verdict, and why it stopped when another rung outran it."""
    if t.speedup is None:
        return str(t.verdict)
    stopped = f", stopped after {t.repeats} pairs: a faster rung was decided" if OUTRUN in t.reason else ""
    return f"{t.speedup:.2f}x ({t.verdict}{stopped})"


@dataclass(frozen=True)
class Selection:
    """The fixes to combine, chosen from the measured trials (before the combined run).

    Attributes:
        chosen: The trials to measure together, in the order they were tried.
        notes: Why some improved fixes were left out (conflicts, a missing base).
        carried: Lines explaining a required rung carried into the set as a base.
        single: The answer when one trial is chosen (it is then not measured again).
    """

    chosen: list[Trial]
    notes: list[str]
    carried: list[str]
    single: Trial | None = None


def select_combination(
    trials: Sequence[Trial], on_top: frozenset[str] = frozenset(), min_effect: float = MIN_EFFECT,
) -> Selection:
    """Choose the improved fixes to measure together (pure: no run is made).

    Conflicting fixes (bf16 vs fp16) keep the faster one. An improved on-top fix (measured
    against a rung of the fix it requires, not the baseline) brings that rung into the set even
    when the rung was not a win by itself, unless the product of the tops of their intervals
    already says the set loses against the baseline.
    """
    fixes = catalog.get_fixes()
    notes: list[str] = []
    # NOTE: a fix whose objective is memory is kept for the memory it saves, not combined for
    # speed (it usually costs some): pick_memory decides it.
    improved = [t for t in trials if t.verdict == IMPROVED and not for_memory(t)]
    chosen: list[Trial] = []
    for t in sorted(improved, key=lambda t: -(t.speedup or 0.0)):
        conflicts = set(fixes[t.fix].conflicts)
        if any(c.fix in conflicts or t.fix in fixes[c.fix].conflicts for c in chosen):
            notes.append(f"{t.fix} conflicts with a faster kept fix; not combined")
            continue
        chosen.append(t)
    by_fix = {t.fix: t for t in trials}
    carried_why: list[str] = []
    for need in dict.fromkeys(fixes[t.fix].requires for t in chosen if t.fix in on_top):
        if need is None or any(c.fix == need for c in chosen):
            continue
        tops = [t for t in chosen if t.fix in on_top and fixes[t.fix].requires == need]
        base = by_fix.get(need)
        if base is None or base.verdict not in RAN:
            chosen = [t for t in chosen if t not in tops]
            notes.append(f"{', '.join(t.fix for t in tops)}: measured on top of {need}, which is "
                         "not available; not kept")
            continue
        what = (
            f"{base.fix} alone {base.verdict} ({times(base.speedup)}); with "
            + ", ".join(f"{t.fix} on top {times(t.speedup)} more" for t in tops)
        )
        # NOTE: the on-top speedups are relative to the rung, the rung's to the baseline: their
        # product estimates the set against the baseline. A set that cannot win even at the top
        # of each interval (workers 0.3x, cpu_threads 1.3x on top) is not worth the combined
        # runs, and would drag down the rest. The point estimates alone were not enough: on a
        # text classifier of ours workers 0.76x [0.59-0.91] and cpu_threads 1.30x [1.18-1.44]
        # on top made "about 0.99x", and the set, timed plainly, ran 1.56x faster.
        est = (base.speedup or 0.0) * math.prod(t.speedup or 0.0 for t in tops)
        best = _high(base) * math.prod(_high(t) for t in tops)
        if best < 1.0 + min_effect:
            chosen = [t for t in chosen if t not in tops]
            notes.append(f"{what}: about {est:.2f}x against the plain baseline together (at most "
                         f"{best:.2f}x at the top of each interval); not combined")
            continue
        chosen.append(base)
        carried_why.append(f"{what}: {label_of(base)} goes into the combination as their base")
    notes.extend(w + ", measured together against the plain baseline" for w in carried_why)
    order = [x.fix for x in trials]
    chosen.sort(key=lambda t: order.index(t.fix))
    # NOTE: an on-top fix always arrives with its required rung (kept or carried), so a single
    # chosen trial is a standalone one, measured against the plain baseline: it is the answer.
    return Selection(chosen, notes, carried_why, single=chosen[0] if len(chosen) == 1 else None)


def _high(t: Trial) -> float:
    """Return the top of a trial's interval (its median when it has none)."""
    return t.ci_high if t.ci_high is not None else (t.speedup or 0.0)


def pick_kept(
    combined: Trial, chosen: Sequence[Trial], on_top: frozenset[str] = frozenset(),
    min_effect: float = MIN_EFFECT,
) -> tuple[Trial | None, list[Trial], list[str]]:
    """Keep the combination, or the best standalone fix when the combination is not better.

    Returns:
        The combined trial to report (None when nothing is kept), the kept trials, and notes.
    """
    # NOTE: a fix measured on top of another has a speedup relative to that fix's run, not to
    # the baseline, and a carried rung was no win alone: neither competes with the combination
    # as a single fix. Only standalone wins do.
    standalone = [t for t in chosen if t.fix not in on_top and t.verdict == IMPROVED]
    best = max(standalone, key=lambda t: t.speedup or 0.0) if standalone else None
    label = combined.fix
    good = combined.verdict == IMPROVED
    if good and (best is None or (combined.speedup or 0.0) >= (best.speedup or 0.0) * (1 - min_effect)):
        return combined, list(chosen), []
    if good and best is not None and _proved_on_top(best, standalone, [t for t in chosen if t.fix in on_top]):
        return combined, list(chosen), []
    if best is None:
        return None, [], [
            f"the combination {label} measured {times(combined.speedup)} ({combined.verdict}) against "
            "the plain baseline: nothing kept"
        ]
    return combined, [best], [
        f"the combination {label} measured {times(combined.speedup)} ({combined.verdict}), "
        f"not better than {best.fix} alone ({times(best.speedup)}): keeping {best.fix} only"
    ]


def _proved_on_top(best: Trial, standalone: Sequence[Trial], tops: Sequence[Trial]) -> bool:
    """Whether every other fix of the set was decided faster on top of ``best``, the set's one standalone win.

    Such a fix was paired run by run with ``best``'s own runs between the same baselines: the
    direct answer to whether adding it helps. Comparing the set's ratio with ``best``'s from an
    earlier stage instead sets two measurements against each other across stages, the earlier
    one often stopped at its luckiest look: in the demo, dataloader_workers alone read 1.68x
    after 2 pairs, cpu_threads 1.16x [1.00-1.28] on top of it, the pair 1.53x, and the pair lost.
    """
    return len(standalone) == 1 and bool(tops) and all(
        t.verdict == IMPROVED and t.reference == label_of(best) for t in tops
    )


def best_alone(chosen: Sequence[Trial], on_top: frozenset[str]) -> tuple[Trial | None, list[Trial], list[str]]:
    """Keep the best standalone win when the budget cannot pay for measuring the combination."""
    standalone = [t for t in chosen if t.fix not in on_top and t.verdict == IMPROVED]
    names = set_name(t.fix for t in chosen)
    if not standalone:
        return None, [], [f"the combination {names} was not measured: the --budget ran out; nothing kept"]
    best = max(standalone, key=lambda t: t.speedup or 0.0)
    return best, [best], [
        f"the combination {names} was not measured: the --budget ran out; keeping {best.fix} alone"
    ]
