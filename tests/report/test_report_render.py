"""Golden files for text, Markdown and JSON; the renderer registry; escaping; output writing."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from report_fixtures import HOSTILE, make_report

from advisor.errors import UsageError
from advisor.report.markdown import md_code, md_fence, md_text
from advisor.report.model import Report
from advisor.report.render import (
    FORMATS,
    RENDERERS,
    guess_format,
    render,
    resolve_format,
    write_output,
)


@pytest.mark.parametrize(("fmt", "name"), [("text", "report.txt"), ("markdown", "report.md"), ("json", "report.json")])
def test_golden(fmt: str, name: str, golden) -> None:
    golden(name, render(make_report(), fmt))


def test_text_is_deterministic_and_plain() -> None:
    a = render(make_report(), "text")
    b = render(make_report(), "text")
    assert a == b
    assert "\x1b[" not in a  # no ANSI codes without colour
    assert max(len(line) for line in a.splitlines()) <= 100


def test_text_color_adds_ansi_only_when_asked() -> None:
    colored = render(make_report(), "text", color=True)
    assert "\x1b[" in colored


def test_registry_has_every_format_and_rejects_unknown() -> None:
    assert set(RENDERERS) == set(FORMATS)
    with pytest.raises(UsageError, match="unknown format"):
        render(make_report(), "pdf")


def test_json_round_trips_and_sorts_findings(tmp_path: Path) -> None:
    report = make_report()
    shuffled = Report(**{**report.__dict__, "findings": tuple(reversed(report.findings))})
    data = json.loads(render(shuffled, "json"))
    assert [f["code"] for f in data["findings"]] == ["CPU003", "DL001", "SY002"]  # error, warning, info
    assert data["schema_version"] == 3
    report.save(tmp_path)
    assert Report.load(tmp_path) == report


def test_summary_content() -> None:
    text = render(make_report(), "text")
    assert "Data loading — 46.3% of step time" in text
    assert "up to 1.86×" in text
    assert "examples/data_loading.py:58 (main)" in text
    assert "1.59× [1.51–1.66]" in text
    md = render(make_report(), "markdown")
    # persistent_workers moved 1.01x inside its CI: never called a win
    assert "| 1.01× [0.98–1.04] | no measurable effect |" in md
    assert "**Primary bottleneck** | **Data loading**: 46.3% of step time" in md


def test_text_never_interprets_rich_markup() -> None:
    report = make_report()
    nasty = Report(**{**report.__dict__, "source": "[bold red]x[/] [link=http://e]y[/link]"})
    assert "[bold red]x[/] [link=http://e]y[/link]" in render(nasty, "text")


def test_markdown_escapes_hostile_strings() -> None:
    md = render(make_report(hostile=True), "markdown")
    outside_code = md.replace("<details><summary>", "").replace("</summary>", "").replace("</details>", "")
    outside_code = outside_code.replace("<br>", "").replace("<sub>", "").replace("</sub>", "")
    # every "<" left outside code spans/fences must be escaped
    in_code = False
    for line in outside_code.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        stripped = "".join(part for i, part in enumerate(line.split("`")) if i % 2 == 0)
        assert "<" not in stripped, line
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in md


def test_markdown_helpers() -> None:
    assert md_text("a|b\nc") == "a\\|b c"
    assert md_text("- item") == "\\- item"
    assert md_text("1. x") == "1\\. x"
    assert md_text("1.59× faster") == "1.59× faster"
    assert md_text("## h") == "#\\# h"
    assert md_code("a`b") == "``a`b``"
    assert md_code("x|y") == "`x\\|y`"
    assert md_fence("```\ncode\n```", "diff").startswith("````diff\n")


@pytest.mark.parametrize(
    ("path", "fmt"),
    [("r.html", "html"), ("r.HTM", "html"), ("out/r.md", "markdown"), ("r.json", "json"), ("r.txt", "text"), (None, "text"), ("-", "text")],
)
def test_guess_format(path, fmt) -> None:
    assert guess_format(path) == fmt


def test_guess_format_unknown_extension() -> None:
    with pytest.raises(UsageError, match="--format"):
        guess_format("report.pdf")
    assert resolve_format("json", Path("report.html")) == "json"  # --format wins


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_write_output_refuses_html_on_a_tty_but_allows_pipes(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="-o"):
        write_output("<html></html>", "html", None, stream=_Tty())
    pipe = io.StringIO()
    assert write_output("<html></html>", "html", None, stream=pipe) is None
    assert pipe.getvalue() == "<html></html>"
    out = write_output("x\n", "text", tmp_path / "sub" / "r.txt")
    assert out is not None and out.read_text() == "x\n"
    assert not list((tmp_path / "sub").glob("*.tmp"))


def test_hostile_text_survives_json_round_trip() -> None:
    data = json.loads(render(make_report(hostile=True), "json"))
    assert data["findings"][1]["message"].endswith(HOSTILE)


def test_build_report_separates_warnings_from_notes() -> None:
    import dataclasses

    import pandas as pd

    from advisor.engine.model import Diagnosis
    from advisor.engine.suppress import SUPPRESSION_NOTE
    from advisor.metrics.model import Metrics
    from advisor.report.model import build_report

    metrics = Metrics(source="t.json", summary={}, steps=pd.DataFrame(), ranks=pd.DataFrame(), notes=("metric note",))
    hidden = f"1 finding {SUPPRESSION_NOTE}: SY001 at train.py:4 (--no-inline-ignores shows them)"
    unknown = "unknown rule code 'XX9' in select"
    diagnosis = Diagnosis(findings=(), primary=None, breakdown={}, warnings=(unknown, unknown), notes=(hidden,))
    report = build_report(metrics, diagnosis)
    assert report.warnings == (unknown,)  # once, even when two layers said it
    assert report.notes == ("metric note", hidden)
    assert dataclasses.replace(report, warnings=()).to_dict()["warnings"] == []


def test_headline_speedup_is_the_kept_fix_when_the_combination_lost() -> None:
    # The loop keeps bf16 alone when bf16+fused measured worse together; `combined` still holds
    # that combination's run, but the headline must quote the measurement of what was kept.
    import dataclasses

    from report_fixtures import make_report

    from advisor.fixes.model import Trial
    from advisor.report.html import render_html
    from advisor.report.markdown import render_markdown
    from advisor.report.text import render_text

    bf16 = Trial(fix="bf16_autocast", safety="unsafe", verdict="improved", baseline_samples_per_s=100.0,
                 samples_per_s=150.0, speedup=1.5, ci_low=1.4, ci_high=1.6, repeats=3)
    fused = Trial(fix="fused_optimizer", safety="unsafe", verdict="improved", baseline_samples_per_s=100.0,
                  samples_per_s=120.0, speedup=1.2, ci_low=1.1, ci_high=1.3, repeats=3)
    lost = Trial(fix="bf16_autocast+fused_optimizer", safety="unsafe", verdict="improved",
                 baseline_samples_per_s=100.0, samples_per_s=105.0, speedup=1.05, ci_low=1.01, ci_high=1.09, repeats=3)
    report = dataclasses.replace(make_report(), trials=(bf16, fused), combined=lost, kept_fixes=("bf16_autocast",))
    assert report.kept_trial is bf16
    text = render_text(report)
    # NOTE: the measured speedup has its own headline line (the view model), apart from the capture's rate.
    headline = next(line for line in text.splitlines() if line.startswith("│ Kept"))
    assert "1.50×" in headline and "1.05×" not in headline
    md = render_markdown(report)
    headline = next(line for line in md.splitlines() if "**Kept**" in line)
    assert "1.50×" in headline and "1.05×" not in headline
    page = render_html(report)
    card = page[page.index("Kept · measured speedup"):][:300]
    assert "1.50×" in card and "1.05×" not in card


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_a_findings_recoverable_share_is_labelled_an_estimate(fmt: str) -> None:
    # issue #20: "up to 41.8% of step time" is the rules' model of what a fix recovers, not a measurement
    out = render(make_report(), fmt)
    assert "up to 41.8% of step time (estimate)" in out
    assert "41.8% of step time\n" not in out and "41.8% of step time<" not in out
