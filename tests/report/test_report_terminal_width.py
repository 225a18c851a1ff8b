"""The terminal report fits the terminal it is printed in (issue #32).

At a fixed 100 columns the box and every table wrapped into garbage in an 80-column terminal, and
a long trace path was split mid-name. The check here is generic: every whitespace-separated token
of the report rendered at a width nothing constrains must appear whole at 80 and 120 columns (a
folded path, a cropped ``Loss Δ`` column or a number cut in two all lose a token), and no line may
be wider than the terminal except a single token that is itself wider (a path is never split).
"""

from __future__ import annotations

import dataclasses
import re

import pytest
from report_fixtures import demo_like_report, make_report
from rich.cells import cell_len

from advisor.report.console import MAX_WIDTH, MIN_WIDTH, WIDTH, terminal_width
from advisor.report.render import use_color
from advisor.report.text import render_text

# Box-drawing runs and bar charts change length with the width; they are not content.
_DECORATION = re.compile(r"^[─━│╭╮╰╯┃╇╈┡┩╌·█▌]+$")
LONG_PATH = "/home/someone/projects/a-rather-long-project-name/advisor-runs/train-20261121-120000"
TRACE = f"{LONG_PATH}/traces/rank0.pt.trace.json.gz"


def _tokens(text: str) -> set[str]:
    return {t for line in text.splitlines() for t in line.split() if not _DECORATION.match(t)}


def _long_report():
    """The demo-like report with an absolute run path and a timeline note naming its trace."""
    report = demo_like_report()
    note = f"timeline: open https://ui.perfetto.dev, choose 'Open trace file' and pick {TRACE}"
    # NOTE: the widest speedup cell a real run printed: an interval over every run, "[0.61–2.68] range"
    first = dataclasses.replace(report.trials[0], interval="run_range", verdict="unmeasurable")
    return dataclasses.replace(report, source=LONG_PATH, notes=(*report.notes, note), trials=(first, *report.trials[1:]))


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("make", [make_report, _long_report], ids=["fixture", "long-paths"])
def test_no_token_is_split_or_cropped(make, width: int) -> None:
    report = make()
    wide = render_text(report, width=MAX_WIDTH * 3)
    narrow = render_text(report, width=width)
    missing = sorted(_tokens(wide) - _tokens(narrow))
    assert missing == [], f"split or cropped at {width} columns: {missing[:12]}"


@pytest.mark.parametrize("width", [80, 120])
def test_no_line_is_wider_than_the_terminal(width: int) -> None:
    text = render_text(_long_report(), width=width)
    for line in text.splitlines():
        if cell_len(line) > width:
            # NOTE: the one exception: a path longer than the terminal, printed whole on its own line.
            assert len(line.split()) == 1, f"wrapped at {width} columns: {line!r}"
    assert TRACE in text and LONG_PATH in text  # the paths are on one line each, whole


def test_the_checks_catch_a_cropped_table() -> None:
    # A fixed-width render cropped the trials table's last columns at 80 ("Los", "0.").
    from advisor.report import text as text_mod

    wide = render_text(make_report(), width=MAX_WIDTH * 3)
    cropped = "\n".join(line[:70] for line in wide.splitlines())
    assert _tokens(wide) - _tokens(cropped)
    assert text_mod  # the module under test is the one rendering


def test_width_comes_from_columns_or_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    monkeypatch.setenv("COLUMNS", "80")
    assert terminal_width(io.StringIO()) == 80
    monkeypatch.setenv("COLUMNS", "20")
    assert terminal_width(io.StringIO()) == MIN_WIDTH
    monkeypatch.setenv("COLUMNS", "9000")
    assert terminal_width(io.StringIO()) == MAX_WIDTH
    monkeypatch.delenv("COLUMNS")
    assert terminal_width(io.StringIO()) == WIDTH  # no terminal: the deterministic width
    assert terminal_width(None) == WIDTH


def test_dumb_terminal_gets_no_colour(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert use_color("text", None, Tty())
    monkeypatch.setenv("TERM", "dumb")
    assert not use_color("text", None, Tty())


def test_advisor_runs_honours_columns(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from advisor.api import render_runs
    from advisor.report.runs import RunSummary

    fields = {f.name for f in dataclasses.fields(RunSummary)}
    row = RunSummary(**{
        k: v for k, v in dict(
            name="train-20261121-120000", path=tmp_path, when="2026-11-21T12:00:00+00:00",
            script="examples/data_loading.py", status="complete", primary_category="data_loading",
            primary_share=0.46, primary_recoverable=0.42, kept_fixes=("dataloader_workers", "cpu_threads"),
            speedup=1.59, steps_measured=45,
        ).items() if k in fields
    })
    monkeypatch.setenv("COLUMNS", "80")
    out = render_runs([row], tmp_path)
    assert max(cell_len(line) for line in out.splitlines()) <= 80, out
    assert "train-20261121-120000" in out and "examples/data_loading.py" in out


@pytest.mark.parametrize("width", [80, 120])
def test_advisor_compare_fits_too(width: int) -> None:
    from report_fixtures import make_after_report

    from advisor.report.compare import compare_reports
    from advisor.report.compare_render import render_comparison_text

    cmp = compare_reports(make_report(), make_after_report())
    wide = render_comparison_text(cmp, width=MAX_WIDTH * 3)
    narrow = render_comparison_text(cmp, width=width)
    assert sorted(_tokens(wide) - _tokens(narrow)) == []
    assert max(cell_len(line) for line in narrow.splitlines()) <= width
