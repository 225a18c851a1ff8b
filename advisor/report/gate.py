"""CI gating: the exit code for ``--fail-on never|info|warning|error`` and ``compare --fail-on-regression``.

One small function shared by ``advisor report``, ``advisor diagnose`` and ``advisor analyze`` so
the three commands agree on what "findings remain" means, and the lines that say which findings
made a job fail (a bare exit 1 tells a CI user nothing).
"""

from __future__ import annotations

from collections.abc import Iterable

from advisor._terminal import printable
from advisor.engine.model import SEVERITIES, Finding, severity_rank
from advisor.errors import EXIT_FINDINGS, EXIT_OK, UsageError
from advisor.report import style as s
from advisor.report.compare import Comparison
from advisor.report.compare_stats import band_text
from advisor.report.model import Report

FAIL_ON_NEVER = "never"
FAIL_ON_CHOICES: tuple[str, ...] = (FAIL_ON_NEVER, *SEVERITIES)
"""Values of ``--fail-on``, most permissive first (``never``, then severities lowest first)."""
FAIL_ON_DEFAULT = FAIL_ON_NEVER


def failing_findings(findings: Iterable[Finding], fail_on: str) -> tuple[Finding, ...]:
    """Return the findings at or above ``fail_on``'s severity (none for ``never``).

    Args:
        findings: Findings to check.
        fail_on: One of :data:`FAIL_ON_CHOICES`.

    Raises:
        UsageError: ``fail_on`` is not a known value.
    """
    if fail_on not in FAIL_ON_CHOICES:
        raise UsageError(
            f"--fail-on must be one of {', '.join(FAIL_ON_CHOICES)}, not {fail_on!r}"
        )
    if fail_on == FAIL_ON_NEVER:
        return ()
    threshold = severity_rank(fail_on)
    # NOTE: an unknown severity (a report from a newer advisor) ranks below every known one
    # (severity_rank), as everywhere else: it is not taken for the most severe.
    return tuple(f for f in findings if severity_rank(f.severity) >= threshold)


def gate(report: Report, fail_on: str) -> int:
    """Exit code for ``--fail-on``: ``EXIT_FINDINGS`` (1) when findings at or above it remain.

    Every finding in the report counts as remaining: advisor applies fixes only at run time
    (and to files only with an explicit flag), so the user's code still has what was found.

    Args:
        report: The report to check.
        fail_on: One of :data:`FAIL_ON_CHOICES` (``never`` always passes).

    Returns:
        ``EXIT_OK`` (0) or ``EXIT_FINDINGS`` (1).
    """
    return EXIT_FINDINGS if failing_findings(report.findings, fail_on) else EXIT_OK


def failing_lines(report: Report, fail_on: str) -> tuple[str, ...]:
    """One line per finding that makes ``--fail-on`` fail: ``CODE severity name: message (at file:line)``.

    Control characters from the trace or script are escaped (the lines go to a terminal).
    """
    out = []
    for f in failing_findings(report.findings, fail_on):
        where = ", ".join(s.location_text(loc.file, loc.line, loc.function) for loc in f.locations)
        line = f"{f.code} {f.severity} {f.name}: {f.message}" + (f" (at {where})" if where else "")
        out.append(printable(" ".join(line.splitlines())))
    return tuple(out)


def regression(cmp: Comparison, max_pct: float) -> str | None:
    """Why ``cmp`` fails ``--fail-on-regression max_pct``, or None when it passes.

    It fails when AFTER is measurably slower (the comparison's verdict is ``slower``: the
    interval over runs lies below 1 and the slowdown passes the minimum effect, or, for single
    runs, the ratio is beyond the script's run-to-run noise band) and the slowdown,
    ``1 - speedup``, is more than ``max_pct`` percent. A slowdown within noise passes, and so
    does one measured on a busy machine (verdict ``not measurable``): a CI job must not fail on
    a machine's jitter.

    Raises:
        UsageError: The comparison has no speedup (not comparable, or no timings), so the gate
            cannot be checked; passing silently would hide a regression.
    """
    if cmp.speedup is None:
        why = "; ".join(cmp.not_comparable) or "neither samples/s nor step times are known on both sides"
        raise UsageError(f"cannot check --fail-on-regression: no speedup between these runs ({why})")
    slowdown = (1.0 - cmp.speedup) * 100.0
    if cmp.verdict != "slower" or slowdown <= max_pct:
        return None
    ci = s.ci(cmp.ci_low, cmp.ci_high)
    beyond = f", beyond the run-to-run noise of {band_text(cmp.noise_band)}" if cmp.noise_band is not None and not ci else ""
    return (
        f"AFTER is {slowdown:.1f}% slower than BEFORE ({s.times(cmp.speedup)} {ci}".rstrip()
        + f"{beyond}), more than the {max_pct:g}% that --fail-on-regression allows"
    )
