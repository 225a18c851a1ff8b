"""The answer a report opens with: what advisor kept, or that it kept nothing and why.

Issue #32: a run whose table showed one fix "faster 1.35×" kept nothing, and the only place that
said so was the fifth note, ~140 lines down ("the combination measured 1.18× (no_effect): nothing
kept"). Every format's summary now opens with the outcome; this module words the "nothing kept"
case once, from what the report holds, so the terminal, Markdown and HTML say the same thing.
"""

from __future__ import annotations

import re

from advisor.fixes.model import Verdict
from advisor.report import style as s
from advisor.report.model import Report, ReportStatus

_NOTHING_KEPT = re.compile(r"[:;,]?\s*nothing (?:was )?kept\.?$")
_VERDICT_WORD = re.compile(r"\((\w+)\)")


def _loop_reason(report: Report) -> str | None:
    """Return the fix loop's own note saying why nothing was kept (without its ``: nothing kept`` tail)."""
    for note in report.notes:
        if _NOTHING_KEPT.search(note):
            reason = _NOTHING_KEPT.sub("", note).strip()
            # NOTE: the loop writes verdicts as their JSON words ("(no_effect)"); the summary
            # reads them as the trials table does ("(no measurable effect)").
            return _VERDICT_WORD.sub(lambda m: f"({s.VERDICT_LABELS.get(m.group(1), m.group(1))})", reason)
    return None


def _verdict_counts(report: Report) -> str:
    """``2 no measurable effect, 1 slower``: the trials' verdicts, most frequent first."""
    counts: dict[str, int] = {}
    for t in report.trials:
        label = s.VERDICT_LABELS.get(t.verdict, t.verdict)
        counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{n} {label}" for label, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def nothing_kept_reason(report: Report) -> str | None:
    """Say why no fix was kept, or None when one was (or when no fix was tried at all).

    Args:
        report: The report; its trials, kept fixes, status and the fix loop's notes are read.

    Returns:
        One clause, e.g. ``the combination dataloader_workers + cpu_threads measured 1.18×
        (no measurable effect) against the plain baseline``, or ``no trial was faster: 3 no
        measurable effect, 1 skipped``.
    """
    if report.kept_fixes or (not report.trials and report.combined is None):
        return None
    if report.status == ReportStatus.INTERRUPTED:
        return "the fix trials were interrupted before a combination was measured"
    if report.status == ReportStatus.RUNNING:
        return "the fix trials are still running"
    reason = _loop_reason(report)
    if reason:
        return reason
    if any(t.verdict == "improved" for t in report.trials):
        return "the faster trials were not kept (see the notes)"
    if report.trials and all(t.verdict in _NOT_TIMED for t in report.trials):
        return _none_timed(report)
    return f"no trial was faster: {_verdict_counts(report)}"


_NOT_TIMED = frozenset({Verdict.SKIPPED, Verdict.ADVICE})


def _none_timed(report: Report) -> str:
    """Say that no fix was timed, with the first skip's reason (the rest usually follow from it).

    Seen on a script of ours streaming an IterableDataset that does not shard by worker: every
    fix was skipped, and "no trial was faster: 4 skipped" read as four trials measured and lost.
    """
    skipped = [t for t in report.trials if t.verdict == Verdict.SKIPPED]
    head = f"no fix could be timed: {_verdict_counts(report)}"
    if not skipped or not skipped[0].reason:
        return head
    first = skipped[0]
    return f"{head}; {first.fix}: {first.reason.split('; ')[0]}"
