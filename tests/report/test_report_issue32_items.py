"""Smaller report items of issue #32, one test each."""

from __future__ import annotations

import dataclasses
import html

from report_fixtures import make_report

from advisor.report.html import render_html


def _with_run(**fields):
    report = make_report()
    return dataclasses.replace(report, run=dataclasses.replace(report.run, **fields))


def test_html_matmul_peaks_are_a_table_not_a_python_literal() -> None:
    peaks = [{"dtype": "fp32", "threads": 2, "tflops": 0.115, "device": "cpu"},
             {"dtype": "bf16", "threads": 2, "tflops": 0.001, "device": "cpu"}]
    page = render_html(_with_run(environment={"matmul_peaks": peaks, "torch": "2.13.0"}))
    row = page[page.index("Matmul peaks"):][:800]
    assert "{'dtype'" not in page and "{&#x27;dtype" not in page
    assert "<th>dtype</th>" in row and "<td>0.115</td>" in row and "<td>bf16</td>" in row


def test_html_status_of_a_normal_stop_reads_complete() -> None:
    page = render_html(_with_run(status="stopped"))
    status = page[page.index("<th>Status</th>"):][:60]
    assert "complete" in status and "stopped" not in status


def test_the_diff_is_saved_as_fix_diff_and_printed_by_report_diff(tmp_path) -> None:
    from click.testing import CliRunner

    from advisor.cli.main import cli

    report = make_report()
    assert report.diff.strip()
    report.save(tmp_path)
    assert (tmp_path / "fix.diff").read_text(encoding="utf-8") == report.diff
    result = CliRunner().invoke(cli, ["report", str(tmp_path), "--diff"])
    assert result.exit_code == 0, result.output
    assert result.stdout == (report.diff if report.diff.endswith("\n") else report.diff + "\n")
    # a later save with nothing kept leaves no stale diff behind
    dataclasses.replace(report, diff="").save(tmp_path)
    assert not (tmp_path / "fix.diff").exists()
    result = CliRunner().invoke(cli, ["report", str(tmp_path), "--diff"])
    assert result.exit_code == 0 and result.stdout == "" and "no kept fix" in result.stderr


def test_ci_paths_are_relative_to_the_repository_root(tmp_path, monkeypatch) -> None:
    import json as _json

    from advisor.engine.model import Location
    from advisor.report.ci_paths import repo_path
    from advisor.report.github import render_github
    from advisor.report.sarif import render_sarif

    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "examples").mkdir()
    script = repo / "examples" / "train.py"
    script.write_text("pass\n")
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    monkeypatch.chdir(repo / "examples")  # run from a subfolder: the path is still the repository's
    assert repo_path(str(script)) == "examples/train.py"
    assert repo_path("train.py") == "examples/train.py"  # relative to where advisor ran
    assert repo_path("/elsewhere/x.py") == "/elsewhere/x.py"

    report = make_report()
    finding = dataclasses.replace(report.findings[0], locations=(Location(file=str(script), line=3),))
    report = dataclasses.replace(report, findings=(finding,))
    sarif = _json.loads(render_sarif(report))
    uris = [loc["physicalLocation"]["artifactLocation"]["uri"] for r in sarif["runs"][0]["results"] for loc in r["locations"]]
    assert uris == ["examples/train.py"]
    assert "file=examples/train.py,line=3" in render_github(report)

    monkeypatch.setenv("GITHUB_WORKSPACE", str(repo / "examples"))  # a workflow's checkout wins
    assert repo_path(str(script)) == "train.py"


def test_a_safe_fix_that_moved_the_loss_says_so() -> None:
    from advisor.report.render import render

    report = make_report()
    moved = dataclasses.replace(report.trials[0], loss_max_rel_diff=0.0116)
    report = dataclasses.replace(report, trials=(moved, *report.trials[1:]))
    assert moved.safety == "safe"
    for fmt in ("text", "markdown", "html"):
        out = " ".join(html.unescape(render(report, fmt, width=160)).split()).replace("\\", "")
        assert "loss moved 1.16% from the baseline's with the same seed" in out, fmt
    same = dataclasses.replace(report, trials=(dataclasses.replace(moved, loss_max_rel_diff=0.0), *report.trials[1:]))
    assert "loss moved" not in render(same, "text")
