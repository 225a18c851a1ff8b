"""What the fix loop's baseline runs (the unchanged script, run again) say about the diagnosis.

How far apart they ran: one script's processes can run at different speeds on one machine. A
text classifier of ours (torch's two intra-op threads beside the main process's Python data
loading, on two cores) ran its steps 10-150 in 0.95-1.58 s over six plain runs, and in
1.11-1.28 s with one thread; each trial's interval carries that spread, and two diagnoses of it
kept different fixes.

Whether a finding read from the capture's own counters holds in them. Most findings come from
the profiled steps' trace, which only the capture has. A few read only what every run records
about itself: rule HB005 (page faults every step) reads ``getrusage`` of
the main process over its timed steps (:mod:`advisor.metrics.kernel_use`), and each trial run
records the same. That finding describes the state of one process rather than the script:
glibc's malloc thresholds move with what a process has freed, so one script faulted 115 pages
per step in one process and 4,600 in another, and HB005 fired in 3 of 22 diagnoses of one
unchanged example. The fix loop's baseline runs are the unchanged script run again, so each
such finding is evaluated again on each of them, and the report says in how many it held.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from advisor.capture.model import RunCapture
from advisor.engine.model import Diagnosis, Finding
from advisor.engine.ruleset import Rule, RuleSet
from advisor.errors import InputError
from advisor.fixes.agreement import DISAGREEMENT, rate_range
from advisor.fixes.loop.spread import rate_text
from advisor.fixes.loop.text import BASELINE_PREFIXES
from advisor.metrics.kernel_use import kernel_use_metrics
from advisor.metrics.registry import METRICS
from advisor.rundir import TRIALS_DIR

RECHECKABLE = frozenset(kernel_use_metrics(None))
"""Metrics each trial run's own capture gives; a rule reading only these can be evaluated on it."""

COLD_PREFIXES = tuple(f"cold-{prefix}" for prefix in BASELINE_PREFIXES)
"""Trial folders of the unchanged script run in fresh interpreters (``Fix.fresh_process``): for
the allocator's state these are the faithful ones, and a rule reading it is checked on them."""

MIN_RUNS = 2
"""Baseline runs needed before a count of them says anything."""

SPREAD_RUNS = 3
"""Baseline runs needed before their range is reported."""

SPREAD_NOTED = 1.25
"""Fastest over slowest baseline run from which the spread is worth a note. From
:data:`~advisor.fixes.agreement.DISAGREEMENT` (2x) on, each trial's reason says it instead."""


def baseline_notes(run_dir: Path, diagnosis: Diagnosis, rules: RuleSet) -> tuple[str, ...]:
    """Return the notes of the baseline runs under ``run_dir``: how far apart they ran, each recheckable rule."""
    try:
        trials = Path(run_dir) / TRIALS_DIR
        captures = baseline_captures(trials)
        cold = baseline_captures(trials, COLD_PREFIXES)
        spread = spread_note(captures)
        checked = (cold, "baseline runs in fresh interpreters") if len(cold) >= MIN_RUNS else (captures, "baseline runs")
        return (*([spread] if spread else []), *recheck_notes(*checked, diagnosis, rules))
    except (AttributeError, TypeError, ValueError):
        # NOTE: these notes are context; a capture holding what no run writes (edited by hand)
        # must not fail the diagnose after its trials, whose results are what it is for
        return ()


def spread_note(captures: Sequence[RunCapture]) -> str | None:
    """Say how far apart the baseline runs' rates were, when that is noticeable (None otherwise)."""
    rated = [c.timed for c in captures if c.timed.samples_per_s or c.timed.steps_per_s]
    # one unit for every run: samples/s only when each run counted samples
    samples = all(t.samples_per_s for t in rated)
    rates = [float(r) for t in rated if (r := t.samples_per_s if samples else t.steps_per_s) and r > 0]
    span = rate_range(rates)
    if len(rates) < SPREAD_RUNS or span is None:
        return None
    low, high = span
    if not SPREAD_NOTED <= high / low < DISAGREEMENT:
        return None
    unit = "samples/s" if samples else "steps/s"
    return (
        f"the unchanged script's {len(rates)} baseline runs ran at {rate_text(low)}–{rate_text(high)} {unit} "
        f"({high / low:.2f}x apart): its speed differs from one process to the next on this machine, "
        "and each trial's interval carries that spread"
    )


def recheck_notes(
    captures: Sequence[RunCapture], runs: str, diagnosis: Diagnosis, rules: RuleSet,
) -> tuple[str, ...]:
    """One note per rule that reads only per-run counters: in how many baseline runs it held.

    For a finding the capture raised, always; for a rule it evaluated and did not raise, when
    it held in most baseline runs (its fixes were then not tried).
    """
    if len(captures) < MIN_RUNS:
        return ()
    values = [kernel_use_metrics(c) for c in captures]
    raised = {f.code: f for f in diagnosis.findings}
    notes = []
    for code in dict.fromkeys((*raised, *diagnosis.evaluated)):
        rule = rules.get(code)
        if rule is None or not rule.when.names or not set(rule.when.names) <= RECHECKABLE:
            continue
        names = rule.when.names
        known = [v for v in values if all(v.get(n) is not None for n in names)]
        if len(known) < MIN_RUNS:
            continue
        held = sum(1 for v in known if rule.when.holds(v))
        finding = raised.get(code)
        if finding is not None:
            notes.append(_note(finding, names, held, known, runs))
        elif 2 * held > len(known) and not rule.locations:  # a rule with locations may be hidden by a comment
            notes.append(_quiet_note(rule, held, known, runs))
    return tuple(notes)


def baseline_captures(trials: Path, prefixes: tuple[str, ...] = BASELINE_PREFIXES) -> list[RunCapture]:
    """Return the captures of the unchanged script's trial runs under ``trials`` (finished ones only)."""
    if not trials.is_dir():
        return []
    out = []
    for folder in sorted(trials.iterdir()):
        if not folder.is_dir() or not folder.name.startswith(prefixes):
            continue
        try:
            capture = RunCapture.load(folder)
        except InputError:
            continue  # a run cut short by Ctrl-C, or never written: not a measurement
        if capture.ok:
            out.append(capture)
    return out


def _note(finding: Finding, names: Sequence[str], held: int, runs: Sequence[Mapping[str, Any]], kind: str) -> str:
    n = len(runs)
    seen = ", ".join(
        f"{name} {_range([r[name] for r in runs], name)} against {_range([finding.evidence.get(name)], name)}"
        for name in names
    )
    head = f"{finding.code} ({finding.name}) held"
    where = f"{kind} of the fix trials ({seen} in the capture)"
    if held == n:
        return f"{head} in all {n} {where}: not a one-off of the captured process"
    if held == 0:
        return f"{head} in none of the {n} {where}: the captured process was in a state the script's other runs were not"
    return f"{head} in {held} of the {n} {where}: the script's processes are in that state in some runs, not in others"


def _quiet_note(rule: Rule, held: int, runs: Sequence[Mapping[str, Any]], kind: str) -> str:
    seen = ", ".join(f"{name} {_range([r[name] for r in runs], name)}" for name in rule.when.names)
    fixes = " ".join(f"--fix {fix.id}" for fix in rule.fixes)
    measure = f"; `advisor diagnose {fixes}` measures {'its fix' if len(rule.fixes) == 1 else 'its fixes'}" if fixes else ""
    return (
        f"{rule.code} ({rule.name}) was not raised by the capture's run, but held in {held} of the "
        f"{len(runs)} {kind} of the fix trials ({seen}): the script's processes are in that state "
        f"in some runs{measure}"
    )


def _range(values: Sequence[Any], name: str) -> str:
    numbers = [float(v) for v in values if isinstance(v, (int, float))]
    if not numbers:
        return "unknown"
    low, high = min(numbers), max(numbers)
    spec = METRICS.get(name)
    unit = spec.unit if spec is not None else ""

    def one(v: float) -> str:
        return f"{v:.0%}" if unit == "frac" else f"{v:,.0f}" if unit == "count" else f"{v:,.4g}"

    return one(low) if one(low) == one(high) else f"{one(low)}–{one(high)}"
