"""Findings that held by a narrow margin: a note says so, since a run a little different would not raise them.

A rule fires when its condition holds, and a value just past its threshold fires it as surely as
one far past. Between runs of one script the deciding value moves: the demo's data-loading
example spent 2-11% of its CPU time in the kernel over 22 diagnoses against HB005's 10%, and
HB005 was raised in 3 of them; a user who diagnoses twice sees different findings. The finding
stays (the run did clear the threshold), and a note names the threshold it cleared and by how
little, so that its absence from the next report is no surprise.
"""

from __future__ import annotations

from collections.abc import Sequence

from advisor.engine.condition import Margin
from advisor.engine.model import Finding
from advisor.engine.ruleset import RuleSet
from advisor.metrics.registry import METRICS

NARROW = 0.15
"""A share past its threshold by less than this share of the threshold held narrowly. Shares
such as the kernel's of the CPU time moved by more than that between runs of one unchanged
script (2-11% around a 10% threshold); a narrower band would call few of the flips."""


def borderline_notes(findings: Sequence[Finding], rules: RuleSet) -> tuple[str, ...]:
    """One note per finding whose condition held by less than :data:`NARROW` of a threshold."""
    notes = []
    for finding in findings:
        rule = rules.get(finding.code)
        if rule is None:
            continue
        margins = [m for m in rule.when.margins(finding.evidence) if m.relative is not None and _is_share(m)]
        if not margins:
            continue
        narrowest = min(margins, key=lambda m: m.relative or 0.0)
        if 0.0 <= (narrowest.relative or 0.0) < NARROW:
            notes.append(
                f"{finding.code} ({finding.name}) held by a narrow margin: {narrowest.quantity} "
                f"{_value(narrowest.value)} against its threshold {narrowest.op} {_value(narrowest.threshold)}; "
                "a run a little different may not raise it"
            )
    return tuple(notes)


def _is_share(margin: Margin) -> bool:
    """Whether the threshold is on one measured share (a ``frac`` metric).

    Shares of time move between runs of one script; counts of calls per step (SY002's syncs)
    come from the code and do not, and a ratio's distance to its threshold (CM002's 1.31 against
    1.2) is not a share of that threshold.
    """
    spec = METRICS.get(margin.quantity)
    return spec is not None and spec.unit == "frac"


def _value(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.1%}"
