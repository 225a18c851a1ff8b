"""The lines ``advisor verify`` prints: one per pair as it ends, then the verdict."""

from __future__ import annotations

from pathlib import Path

from advisor._terminal import printable_line
from advisor.report.style import ci, times
from advisor.verify.model import Agreement, ClaimScope, Verification


def _ratio(ratio: float, low: float | None, high: float | None) -> str:
    """``1.41× [1.31–1.52]``, as the report writes a speedup; the bare ratio without an interval."""
    return f"{times(ratio)} {ci(low, high)}".strip()


def pair_line(v: Verification) -> str:
    """``pair 2  load 0.90  original 10.11 s  with fix.diff 8.98 s  1.13×  (fixed first)``: the last pair."""
    p, n = v.pairs[-1], len(v.pairs)
    return (f"pair {n}  load {p.load:.2f}  original {p.original_s:.2f} s  with fix.diff {p.fixed_s:.2f} s  "
            f"{times(p.ratio)}" + ("  (fixed first)" if p.fixed_first else ""))


_VERDICTS = {
    Agreement.AGREES: "the plain timing agrees with the claim",
    Agreement.BELOW: "the plain timing is below the claim: the report overstated the gain here",
    Agreement.ABOVE: "the plain timing is above the claim: the claim was conservative",
}


def summary_lines(v: Verification) -> list[str]:
    """Return the script and its kept fixes, the plain ratio, the claim, and how they read together."""
    name = f"{Path(v.script).name} {' '.join(v.args)}".rstrip()
    lines = [f"{printable_line(name)}: kept {', '.join(v.kept)}"]
    ratio, low, high = v.estimate
    if ratio is not None:
        lines.append(f"Plainly:  {_ratio(ratio, low, high)} faster with fix.diff over {len(v.pairs)} "
                     "pair(s) (geometric mean of the pairs, 95% interval)")
    c = v.claim
    if c is not None:
        what = ("on the whole run (projected)" if c.scope == ClaimScope.RUN
                else "on the steps (the run's length was unknown: a whole run gains less)")
        lines.append(f"Claimed:  {_ratio(c.ratio, c.low, c.high)} {what}")
    verdict = _VERDICTS.get(v.agreement) or "undecided: " + ("no claim to compare" if c is None else "time at least 2 pairs")
    lines.append(f"Verdict:  {verdict}")
    return lines

