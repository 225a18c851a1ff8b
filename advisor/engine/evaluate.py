"""Evaluate the selected rules over :class:`~advisor.metrics.model.Metrics` into a Diagnosis.

The primary bottleneck is the category with the most *recoverable* step time: each finding
carries ``impact_frac`` (its rule's ``impact`` expression, clamped to [0, 1]) and
``impact_basis`` (how that share was obtained), a category's share is the largest impact among
its findings (the max, not the sum, because rules in one category describe overlapping views of
the same lost time, e.g. sync wait seen as "long waits" and as "many sync calls").

Categories are ranked by their *expected* recoverable share. A *measured* share (time the trace
saw the step spend waiting for data, for a sync, in a copy) counts whole, when its rule judged it
a problem (a warning or worse; an ``info`` finding is a note, such as a 0.6% sync wait, and does
not rank). A *bound* (a model's ceiling on what a fix could recover, such as per-op dispatch
overhead) counts for :data:`BOUND_WEIGHT` of its value: the true share lies somewhere between 0
and the bound, and with nothing else known, half of it is its expectation. A category with a
warning or worse outranks one with only ``info`` findings, whatever their shares: an info
finding's bound (CO001's "compute-bound" ceiling) is context, and advisor-bench's injected tiny
ops (SK007, a measured 6-9% warning) read compute under a 24% info bound. Two failures set
this: the largest share whatever its basis put a GRU's per-op bound (SK003/SK005, up to 90%)
above a measured 22-39% data-loading share (advisor-bench's first run), and a measured share
before any bound put tiny_model's 8% DataLoader collate above its 47-57% per-op bound, where
the step is per-op overhead and a larger batch gives 11x. Ties go to the category listed first
in :data:`~advisor.engine.model.CATEGORIES`. Categories whose share is 0 (advice without a time
estimate, such as memory headroom) never become primary.

The estimated speedup is Amdahl's bound if that share of the step went away:
``1 / (1 - share)``, with the share capped at :data:`MAX_SHARE` so one finding never claims
an unbounded speedup.

``Diagnosis.breakdown`` maps the metric breakdown parts onto categories (see
:data:`BREAKDOWN_TO_CATEGORY`), so the report's bar and the primary use the same words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from advisor._paths import location_text
from advisor.engine.condition import clean_value
from advisor.engine.model import (
    CATEGORIES,
    Diagnosis,
    EngineConfig,
    Finding,
    ImpactBasis,
    Location,
    Primary,
    Severity,
    severity_rank,
    sort_findings,
)
from advisor.engine.rules import default_rules
from advisor.engine.ruleset import Rule, RuleSet
from advisor.engine.selection import select_rules
from advisor.metrics.model import Metrics, SourceLocation
from advisor.metrics.registry import BREAKDOWN_PARTS

MAX_SHARE = 0.95
"""Largest share of step time a category may claim (caps the Amdahl speedup at 20x)."""
MAX_LOCATIONS = 5
"""Source locations attached to one finding (the most costly first)."""

BREAKDOWN_TO_CATEGORY: dict[str, str] = {
    "data_loading": "data_loading",
    "h2d_copy": "host_to_device",
    "d2h_copy": "host_to_device",
    "sync_wait": "sync",
    "communication": "communication",
    "gpu_compute": "compute",
    "optimizer": "compute",
    "cpu_ops": "compute",
    "gpu_idle": "idle",
    "other": "other",
}
"""Metric breakdown part -> category for ``Diagnosis.breakdown``.

``cpu_ops`` and ``optimizer`` count as compute: on a CPU-only run the model's arithmetic is CPU
op time, and on a GPU run the optimizer is part of the training arithmetic. Time the GPU sits
idle for no attributed reason is ``idle``; the rules (SK002, CO003) say what idle time means.
"""


def diagnose(
    metrics: Metrics,
    config: EngineConfig | None = None,
    rules: RuleSet | None = None,
) -> Diagnosis:
    """Run the selected rules over ``metrics``.

    Args:
        metrics: The metrics stage's output (``metrics.summary`` holds declared names).
        config: Rule selection (``None``: every stable rule). Build it from the CLI and
            ``[tool.advisor]`` with :func:`advisor.config.resolve_engine_config`.
        rules: The rules to use (default: the packaged/checkout rules, loaded once).

    Returns:
        Findings (sorted by severity, code, location), the primary bottleneck with an Amdahl
        speedup estimate, the category breakdown, and selection warnings.

    Raises:
        RuleError: the rules cannot be loaded.
    """
    ruleset = rules if rules is not None else default_rules()
    selection = select_rules(ruleset, config)
    values = {k: clean_value(v) for k, v in metrics.summary.items()}
    findings = [f for rule in selection.selected if (f := evaluate_rule(rule, values, metrics.locations))]
    # NOTE: rules that were deselected but would have fired are reported as suppressed, so a
    # report can say what an ignore hides (ruff counts hidden fixes the same way).
    suppressed = tuple(rule.code for rule in selection.deselected if rule.when.holds(values))
    return Diagnosis(
        findings=sort_findings(findings),
        primary=choose_primary(findings),
        breakdown=category_breakdown(values),
        rules_evaluated=len(selection.selected),
        suppressed=suppressed,
        warnings=selection.warnings,
        evaluated=tuple(rule.code for rule in selection.selected),
    )


def evaluate_rule(
    rule: Rule, values: Mapping[str, Any], locations: tuple[SourceLocation, ...] = ()
) -> Finding | None:
    """One rule over the metric values: a Finding when its condition holds, else None."""
    if not rule.when.holds(values):
        return None
    evidence = {name: values.get(name) for name in rule.evidence_names}
    locs = pick_locations(locations, rule.locations)
    impact = _as_share(rule.impact.evaluate(values))
    return Finding(
        code=rule.code,
        name=rule.name,
        category=rule.category,
        severity=rule.severity,
        message=rule.message.render(values, locations=", ".join(location_text(loc.file, loc.line, loc.function) for loc in locs)),
        evidence=evidence,
        locations=locs,
        fixes=rule.fixes,
        impact_frac=impact,
        impact_basis=rule.impact_basis,
    )


NEGLIGIBLE_MS = 0.0005
"""Time per step under which a location rarer than once a step is not shown as a finding's place (:func:`pick_locations`)."""
TIMED_KINDS = frozenset({"data_loading", "hot", "preprocess", "host"})
"""Location kinds whose cost is their time (a memory location's count is its share of the peak, its time 0)."""


def pick_locations(
    locations: tuple[SourceLocation, ...], kinds: tuple[str, ...], limit: int = MAX_LOCATIONS
) -> tuple[Location, ...]:
    """Pick the most costly locations of the given kinds, one per ``file:line``."""
    if not kinds:
        return ()
    # NOTE: frames without a usable place (builtins recorded as "~:0", "<string>", line 0 and no
    # function) cannot point anyone at code; they are dropped here rather than shown. A named
    # function at line 0 stays: its line was not known (a frame already running when profiling
    # began, advisor.metrics.userframes), the function still is.
    # A place that takes no measurable time and runs less than once a step cannot be where a
    # per-step cost goes: a DataLoader whose work is all in its workers (which the profiler does
    # not see) showed only the sampler's call of the dataset's __len__ (0.000 ms, 0.1 a step).
    chosen = [
        loc
        for loc in locations
        if loc.kind in kinds and (int(loc.line) > 0 or (int(loc.line) == 0 and loc.function))
        and loc.file and loc.file != "~" and not loc.file.startswith("<")
        and not (loc.kind in TIMED_KINDS and (loc.time_ms or 0.0) < NEGLIGIBLE_MS and (loc.count or 0.0) < 1.0)
    ]
    # NOTE: the metrics stage lists locations most costly first; sort again (stable) by time,
    # then count, so the order does not depend on how kinds were interleaved.
    chosen.sort(key=lambda loc: (-(loc.time_ms or 0.0), -(loc.count or 0.0)))
    seen: dict[tuple[str, int], Location] = {}
    for loc in chosen:
        key = (loc.file, int(loc.line))
        if key not in seen:
            seen[key] = Location(file=loc.file, line=int(loc.line), function=loc.function)
        if len(seen) >= limit:
            break
    return tuple(seen.values())


BOUND_WEIGHT = 0.5
"""What a bound counts for against a measured share when categories are ranked (module doc)."""


def choose_primary(findings: list[Finding] | tuple[Finding, ...]) -> Primary | None:
    """Choose the category with the most expected recoverable step time (module doc)."""
    ranked: dict[str, tuple[bool, float]] = {}
    for f in findings:
        alarm = severity_rank(f.severity) >= severity_rank(Severity.WARNING)
        if f.impact_basis == ImpactBasis.MEASURED:
            if not alarm:
                continue
            expected = f.impact_frac
        else:
            expected = f.impact_frac * BOUND_WEIGHT
        if expected <= 0.0:
            continue
        ranked[f.category] = max(ranked.get(f.category, (False, 0.0)), (alarm, expected))
    shares = category_shares(findings)
    if not ranked:
        return None
    best = max(ranked.items(), key=lambda kv: (*kv[1], -CATEGORIES.index(kv[0])))
    # NOTE: the primary's share is the category's (its largest impact of any basis), as the
    # report's category column shows it; the basis decided which category, not how much.
    share = min(shares[best[0]], MAX_SHARE)
    return Primary(category=best[0], share=round(share, 4), estimated_speedup=round(1.0 / (1.0 - share), 3))


def category_shares(findings: list[Finding] | tuple[Finding, ...]) -> dict[str, float]:
    """Category -> recoverable share of step time (max impact among its findings)."""
    shares: dict[str, float] = {}
    for f in findings:
        shares[f.category] = max(shares.get(f.category, 0.0), f.impact_frac)
    return shares


def category_breakdown(values: Mapping[str, Any]) -> dict[str, float]:
    """Fraction of step time per category (plus ``idle``/``other``) from ``<part>_frac`` metrics.

    Parts with no value are left out; the result is empty when no part is known.
    """
    out: dict[str, float] = {}
    for part in BREAKDOWN_PARTS:
        value = clean_value(values.get(f"{part}_frac"))
        if value is None:
            continue
        category = BREAKDOWN_TO_CATEGORY.get(part, "other")
        out[category] = round(out.get(category, 0.0) + float(value), 6)
    return out


def _as_share(value: Any) -> float:
    if value is None or isinstance(value, str):
        return 0.0
    return float(min(max(value, 0.0), 1.0))
