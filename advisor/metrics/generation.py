"""Generation without a KV cache and one-sample inference inside periodic work, per line of the user's code.

The capture classifies the model calls of each occurrence of work between steps by their input
shapes (:mod:`advisor.capture.generation`). Here the occurrences of one periodic function are
merged per line (the one that called the model most) and pattern: the cost of one occurrence is the median over the best-measured ones
(unprofiled, after the first step, as :func:`advisor.metrics.periodic.project` costs the whole
function), and so are its calls and tokens. :mod:`advisor.metrics.periodic` scales the cost by
the function's occurrences into a share of the projected run.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from advisor.capture.between import BetweenWork
from advisor.capture.generation import CallPattern

NAMED = (CallPattern.GENERATION_NO_CACHE, CallPattern.ONE_SAMPLE)
"""The patterns that cost something a remedy recovers (a cached generation is already right)."""


@dataclass(frozen=True)
class RepeatedCalls:
    """One line's repeated model calls in a periodic function, per occurrence of it.

    Attributes:
        pattern: :data:`NAMED` pattern of the calls.
        file, function, line: The line of the model call and the user's function holding it.
        cost_s: Seconds of one occurrence's calls (from the first call's start to the last's end).
        calls: Model calls per occurrence; tokens: tokens generated per occurrence (calls x batch).
        positions: Mean positions each call ran over (generation only: a KV cache runs one).
    """

    pattern: CallPattern
    file: str
    function: str
    line: int
    cost_s: float
    calls: int
    tokens: int
    positions: float


def repeated_calls(works: Sequence[BetweenWork]) -> tuple[RepeatedCalls, ...]:
    """Merge the classified lines of one periodic function's occurrences (see the module docstring)."""
    chosen: list[BetweenWork] = []
    for pick in (lambda w: not w.profiled and w.step > 0, lambda w: not w.profiled, lambda w: True):
        chosen = [w for w in works if pick(w)]
        if chosen:
            break
    groups: dict[tuple[CallPattern, str, str, int], list] = {}
    for w in chosen:
        s = w.site
        if s is not None and s.pattern in NAMED:
            groups.setdefault((s.pattern, s.file, s.function, s.line), []).append(s)
    out = []
    for (pattern, file, function, line), sites in groups.items():
        out.append(RepeatedCalls(
            pattern, file, function, line,
            cost_s=float(statistics.median(s.seconds for s in sites)),
            calls=round(statistics.median(s.calls for s in sites)),
            tokens=round(statistics.median(s.tokens for s in sites)),
            positions=float(statistics.median(s.positions for s in sites)),
        ))
    return tuple(sorted(out, key=lambda r: -r.cost_s))
