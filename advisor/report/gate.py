"""CI gating: the exit code for ``--fail-on never|info|warning|error``.

One small function shared by ``advisor report``, ``advisor diagnose`` and ``advisor analyze`` so
the three commands agree on what "findings remain" means.
"""

from __future__ import annotations

from collections.abc import Iterable

from advisor.engine.model import SEVERITIES, Finding, severity_rank
from advisor.errors import EXIT_FINDINGS, EXIT_OK, UsageError
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
