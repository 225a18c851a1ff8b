"""CI: compare refuses different scripts, --fail-on-regression, --fail-on says why, SARIF and GitHub annotations."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from report_fixtures import HOSTILE, make_after_report, make_gpu_trace_report, make_report

from advisor.cli.main import main
from advisor.engine.model import Finding, Location
from advisor.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE
from advisor.report.github import escape_data, escape_property, render_github
from advisor.report.render import guess_format, render
from advisor.report.sarif import artifact_uri, sarif_document


def invoke(capsys, *argv: str) -> tuple[int, str, str]:
    """Run the CLI like the console script; return (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def save(report, path: Path) -> Path:
    report.save(path)
    return path


def with_script(report, script: str):
    return dataclasses.replace(report, run=dataclasses.replace(report.run, script=script))


# --- compare: different scripts -------------------------------------------------------------


def test_compare_of_different_scripts_is_refused(capsys, tmp_path: Path) -> None:
    a = save(with_script(make_report(), "train.py"), tmp_path / "a")
    b = save(with_script(make_after_report(), "eval.py"), tmp_path / "b")
    code, out, err = invoke(capsys, "compare", str(a), str(b))
    assert code == EXIT_USAGE and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "scripts differ (train.py vs eval.py)" in lines[0] and "--allow-mismatch" in lines[0]


def test_allowed_mismatch_is_marked_and_gives_no_speedup(capsys, tmp_path: Path) -> None:
    a = save(with_script(make_report(), "train.py"), tmp_path / "a")
    b = save(with_script(make_after_report(), "eval.py"), tmp_path / "b")
    code, out, err = invoke(capsys, "compare", str(a), str(b), "--allow-mismatch")
    assert code == EXIT_OK
    speed_line = out.split("Speedup", 1)[1].splitlines()[0]
    assert "×" not in speed_line and "not comparable" in speed_line
    assert "scripts differ (train.py vs eval.py)" in out
    assert "advisor: warning: not comparable: scripts differ" in err
    code, out, _ = invoke(capsys, "compare", str(a), str(b), "--allow-mismatch", "--format", "json")
    data = json.loads(out)
    assert data["speedup"] is None and data["verdict"] == "not comparable"
    assert data["extra"]["step_time_speedup"] is None


def test_a_fixed_copy_of_the_same_script_still_compares(capsys, tmp_path: Path) -> None:
    # examples/data_loading.py against examples/fixed/data_loading.py: the same script, edited.
    a, b = save(make_report(), tmp_path / "a"), save(make_after_report(), tmp_path / "b")
    code, out, _ = invoke(capsys, "compare", str(a), str(b), "--format", "json")
    assert code == EXIT_OK and json.loads(out)["speedup"] > 1


def test_different_devices_are_marked_loudly(capsys, tmp_path: Path) -> None:
    gpu, cpu = save(make_gpu_trace_report(), tmp_path / "gpu"), save(make_report(), tmp_path / "cpu")
    code, out, err = invoke(capsys, "compare", str(gpu), str(cpu))
    assert code == EXIT_OK
    assert "advisor: warning: not comparable: devices differ (Tesla V100-DGXS-32GB vs CPU)" in err


# --- compare --fail-on-regression -------------------------------------------------------------


def slowed(report, samples_per_s: float):
    """The report with its run at ``samples_per_s``: beyond the noise band of single runs."""
    run = dataclasses.replace(report.run, samples_per_s=samples_per_s)
    return dataclasses.replace(report, run=run, summary={**report.summary, "samples_per_s": samples_per_s})


def test_fail_on_regression_exits_1_with_the_reason(capsys, tmp_path: Path) -> None:
    fast, slow = save(make_after_report(), tmp_path / "fast"), save(slowed(make_report(), 400.0), tmp_path / "slow")
    code, out, err = invoke(capsys, "compare", str(fast), str(slow), "--fail-on-regression", "5")
    assert code == EXIT_FINDINGS
    assert out  # the comparison is still printed
    (line,) = [x for x in err.splitlines() if x.startswith("advisor: regression:")]
    assert "AFTER is 69.0% slower than BEFORE (0.31×, beyond the run-to-run noise of a factor of 2)" in line
    assert "more than the 5% that --fail-on-regression allows" in line


def test_fail_on_regression_never_fires_within_the_noise_of_single_runs(capsys, tmp_path: Path) -> None:
    fast, slow = save(make_after_report(), tmp_path / "fast"), save(make_report(), tmp_path / "slow")
    code, out, err = invoke(capsys, "compare", str(fast), str(slow), "--fail-on-regression", "5")
    assert code == EXIT_OK and "regression" not in err  # 0.63x: within a factor of 2, unknown noise
    assert "no measurable effect" in out


def test_fail_on_regression_passes_within_the_allowance_and_when_faster(capsys, tmp_path: Path) -> None:
    fast, slow = save(make_after_report(), tmp_path / "fast"), save(slowed(make_report(), 400.0), tmp_path / "slow")
    code, _, err = invoke(capsys, "compare", str(fast), str(slow), "--fail-on-regression", "75")
    assert code == EXIT_OK and "regression" not in err
    code, _, err = invoke(capsys, "compare", str(slow), str(fast), "--fail-on-regression", "0")
    assert code == EXIT_OK and "regression" not in err


def test_fail_on_regression_without_a_speedup_is_an_error(capsys, tmp_path: Path) -> None:
    gpu, cpu = save(make_gpu_trace_report(), tmp_path / "gpu"), save(make_report(), tmp_path / "cpu")
    code, _, err = invoke(capsys, "compare", str(gpu), str(cpu), "--fail-on-regression", "5")
    assert code == EXIT_USAGE
    assert "cannot check --fail-on-regression: no speedup between these runs (devices differ" in err


def test_fail_on_regression_refuses_a_bad_percentage(capsys, tmp_path: Path) -> None:
    a = save(make_report(), tmp_path / "a")
    code, _, err = invoke(capsys, "compare", str(a), str(a), "--fail-on-regression", "-3")
    assert code == EXIT_USAGE and "--fail-on-regression" in err


# --- --fail-on lists the findings that failed the gate ----------------------------------------


def test_fail_on_prints_the_findings_that_caused_exit_1(capsys, tmp_path: Path) -> None:
    run = save(make_report(), tmp_path / "run")
    code, _, err = invoke(capsys, "report", str(run), "--fail-on", "warning")
    assert code == EXIT_FINDINGS
    assert "advisor: --fail-on warning: 2 finding(s) at or above warning:" in err
    assert "  CPU003 error cpu-threads-oversubscribed: torch uses 8 threads" in err
    assert "  DL001 warning dataloader-starved-step: The DataLoader takes" in err
    assert "(at examples/data_loading.py:58 (main))" in err
    assert "SY002" not in err  # info is below the gate
    code, _, err = invoke(capsys, "report", str(run), "--fail-on", "never")
    assert code == EXIT_OK and "--fail-on" not in err


def test_fail_on_lines_escape_control_characters(capsys, tmp_path: Path) -> None:
    report = make_report()
    evil = dataclasses.replace(report.findings[0], message="bad\x1b[31m\nsecond line")
    run = save(dataclasses.replace(report, findings=(evil, *report.findings[1:])), tmp_path / "run")
    code, _, err = invoke(capsys, "report", str(run), "--fail-on", "error")
    assert code == EXIT_FINDINGS
    assert "\x1b" not in err
    failing = [x for x in err.splitlines() if x.startswith("  CPU003")]
    assert len(failing) == 1 and "second line" in failing[0]


# --- SARIF ------------------------------------------------------------------------------------


def test_sarif_document_is_sarif_2_1_0() -> None:
    doc = json.loads(render(make_report(hostile=True), "sarif"))
    assert doc["version"] == "2.1.0" and "sarif-schema-2.1.0" in doc["$schema"]
    (run,) = doc["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "advisor"
    rule_ids = [r["id"] for r in driver["rules"]]
    assert rule_ids == ["CPU003", "DL001", "SY002"]  # sorted by severity, once each
    levels = {r["ruleId"]: r["level"] for r in run["results"]}
    assert levels == {"CPU003": "error", "DL001": "warning", "SY002": "note"}
    for result in run["results"]:
        assert driver["rules"][result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["message"]["text"]
        assert result["locations"], result  # code scanning drops results without one
    dl = next(r for r in run["results"] if r["ruleId"] == "DL001")
    assert dl["message"]["text"].endswith(HOSTILE)  # JSON escapes it; the text is kept as is
    phys = dl["locations"][0]["physicalLocation"]
    assert phys["region"] == {"startLine": 58}
    assert phys["artifactLocation"]["uri"] == artifact_uri("examples/data_loading.py" + HOSTILE)
    assert "<" not in phys["artifactLocation"]["uri"] and " " not in phys["artifactLocation"]["uri"]
    cpu = next(r for r in run["results"] if r["ruleId"] == "CPU003")  # no location: the script
    assert cpu["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].startswith("examples/data_loading.py")


def test_sarif_uris_are_percent_encoded(tmp_path: Path) -> None:
    assert artifact_uri("my dir/train#1?.py") == "my%20dir/train%231%3F.py"
    assert artifact_uri("/elsewhere/a b.py") == "file:///elsewhere/a%20b.py"
    assert guess_format("findings.sarif") == "sarif"


def test_sarif_without_findings_has_an_empty_result_list() -> None:
    doc = sarif_document(dataclasses.replace(make_report(), findings=()))
    assert doc["runs"][0]["results"] == [] and doc["runs"][0]["tool"]["driver"]["rules"] == []


# --- GitHub annotations -----------------------------------------------------------------------


def test_github_annotations_one_per_finding() -> None:
    lines = render(make_report(), "github").splitlines()
    assert lines[0].startswith("::error file=examples/data_loading.py,title=CPU003 cpu-threads-oversubscribed::")
    assert lines[1].startswith("::warning file=examples/data_loading.py,line=58,title=DL001 dataloader-starved-step::")
    assert lines[2].startswith("::notice file=examples/data_loading.py,line=71,title=SY002 item-in-loop::")
    assert "%0Afix: dataloader_workers (safe), persistent_workers (safe)" in lines[1]
    assert len(lines) == 3


def test_github_annotations_cannot_be_broken_out_of() -> None:
    report = make_report()
    evil = Finding(
        code="DL001", name="x", category="data_loading", severity="warning",
        message="50% wait\r\n::add-mask::secret\n::stop-commands::tok",
        evidence={}, locations=(Location("dir,with:colons\n::error::x.py", 3, "f"),),
    )
    out = render_github(dataclasses.replace(report, findings=(evil,)))
    assert out.count("\n") == 1 and out.startswith("::warning ")
    props, message = out.rstrip("\n")[len("::warning "):].split("::", 1)
    assert props == "file=dir%2Cwith%3Acolons%0A%3A%3Aerror%3A%3Ax.py,line=3,title=DL001 x"
    assert message == "50%25 wait%0D%0A::add-mask::secret%0A::stop-commands::tok"
    assert escape_data("%\r\n") == "%25%0D%0A" and escape_property("a:b,c") == "a%3Ab%2Cc"


def test_github_format_through_the_cli(capsys, tmp_path: Path) -> None:
    run = save(make_report(), tmp_path / "run")
    code, out, err = invoke(capsys, "report", str(run), "--format", "github", "--fail-on", "error")
    assert code == EXIT_FINDINGS
    assert out.count("\n") == 3 and all(x.startswith("::") for x in out.splitlines())
    code, out, _ = invoke(capsys, "report", str(run), "-o", str(tmp_path / "f.sarif"))
    assert code == EXIT_OK and json.loads((tmp_path / "f.sarif").read_text())["version"] == "2.1.0"
