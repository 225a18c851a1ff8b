"""Every format opens with the answer: what was kept and its measured speedup, or nothing and why (issue #32)."""

from __future__ import annotations

import dataclasses

import pytest
from report_fixtures import make_report

from advisor.fixes.model import Trial
from advisor.report.outcome import nothing_kept_reason
from advisor.report.render import render

LOOP_NOTE = (
    "the combination dataloader_workers+cpu_threads measured 1.18x (no_effect) against the plain "
    "baseline: nothing kept"
)


def _nothing_kept():
    """The issue's run: cpu_threads measured faster alone, the combination no effect, nothing kept."""
    report = make_report()
    threads = Trial(fix="cpu_threads", safety="safe", verdict="improved", baseline_samples_per_s=100.0,
                    samples_per_s=135.0, speedup=1.35, ci_low=1.2, ci_high=1.5, repeats=3)
    return dataclasses.replace(report, trials=(threads,), combined=None, kept_fixes=(), notes=(*report.notes, LOOP_NOTE))


def _summary(out: str, fmt: str) -> str:
    """The summary block: the box, the table before the first heading, or the cards."""
    if fmt == "text":
        return " ".join(out[: out.index("╰")].replace("│", " ").split())  # the box's lines, unwrapped
    if fmt == "markdown":
        return out[: out.index("###")]
    return out[out.index('<div class="cards">'):][:3000]


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_nothing_kept_is_the_first_thing_said(fmt: str) -> None:
    out = render(_nothing_kept(), fmt, width=120)
    summary = _summary(out, fmt)
    assert "nothing" in summary
    assert "1.18x (no measurable effect) against the plain baseline" in summary
    # the answer comes before the diagnosis
    assert summary.index("nothing") < summary.index("Primary bottleneck")


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_what_was_kept_is_the_first_thing_said(fmt: str) -> None:
    summary = _summary(render(make_report(), fmt, width=120), fmt)
    assert "dataloader_workers" in summary and "1.59×" in summary
    assert summary.index("1.59×") < summary.index("Primary bottleneck")


def test_reasons_without_a_loop_note() -> None:
    report = make_report()
    assert nothing_kept_reason(report) is None  # one fix kept
    none_tried = dataclasses.replace(report, trials=(), combined=None, kept_fixes=())
    assert nothing_kept_reason(none_tried) is None  # no trial ran: nothing to say
    slow = dataclasses.replace(
        report, combined=None, kept_fixes=(),
        trials=tuple(dataclasses.replace(t, verdict=v) for t, v in zip(report.trials, ("slower", "no_effect", "no_effect"), strict=True)),
    )
    assert nothing_kept_reason(slow) == "no trial was faster: 2 no measurable effect, 1 slower"
    stopped = dataclasses.replace(slow, status="interrupted")
    assert "interrupted" in (nothing_kept_reason(stopped) or "")


def test_every_fix_skipped_says_none_was_timed_and_why() -> None:
    """All trials skipped: not "no trial was faster", which reads as trials measured and lost."""
    report = make_report()
    reasons = ("the IterableDataset does not shard by worker: each worker would yield every sample; ladder 1 workers: skipped",
               "needs DataLoader workers", "needs DataLoader workers")
    skipped = dataclasses.replace(
        report, combined=None, kept_fixes=(),
        trials=tuple(dataclasses.replace(t, verdict="skipped", reason=r) for t, r in zip(report.trials, reasons, strict=True)),
    )
    first = report.trials[0].fix
    assert nothing_kept_reason(skipped) == (
        f"no fix could be timed: 3 skipped; {first}: the IterableDataset does not shard by worker: each worker would "
        "yield every sample")
    advice = dataclasses.replace(skipped, trials=tuple(dataclasses.replace(t, verdict="advice") for t in skipped.trials))
    assert nothing_kept_reason(advice) == "no fix could be timed: 3 advice (not measured)"
