"""`advisor report` and `advisor compare` through the real CLI entry point, plus --fail-on gating."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from report_fixtures import make_after_report, make_gpu_trace_report, make_report

from advisor.cli.main import main
from advisor.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, UsageError
from advisor.report.gate import FAIL_ON_CHOICES, failing_findings, gate


def invoke(capsys, *argv: str) -> tuple[int, str, str]:
    """Run the CLI like the console script; return (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    make_report().save(run)
    return run


def test_report_text_to_stdout(capsys, run_dir: Path) -> None:
    code, out, err = invoke(capsys, "report", str(run_dir))
    assert code == EXIT_OK
    assert "Primary bottleneck" in out and "Data loading" in out
    # data on stdout; stderr carries only the report's warnings (Report.warnings), one line each
    assert err == "advisor: warning: unknown rule code 'DL01' in ignore (did you mean 'DL001'?)\n"
    assert "Warnings (1)" in out and "unknown rule code 'DL01'" in out


def test_report_without_warnings_keeps_stderr_empty(capsys, tmp_path: Path) -> None:
    run = tmp_path / "quiet"
    dataclasses.replace(make_report(), warnings=()).save(run)
    code, out, err = invoke(capsys, "report", str(run))
    assert code == EXIT_OK and "Primary bottleneck" in out
    assert err == ""
    assert "Warnings" not in out


def test_old_report_warnings_move_out_of_notes(capsys, tmp_path: Path) -> None:
    # A schema-1 report.json kept rule-selection warnings in notes; loading upgrades it.
    data = make_report().to_dict()
    data["schema_version"] = 1
    del data["warnings"]
    data["notes"] = [*data["notes"], "unknown rule code 'XX9' in select"]
    run = tmp_path / "v1"
    run.mkdir()
    (run / "report.json").write_text(json.dumps(data), encoding="utf-8")
    code, out, err = invoke(capsys, "report", str(run), "--format", "json")
    upgraded = json.loads(out)
    assert upgraded["schema_version"] == 3
    assert upgraded["warnings"] == ["unknown rule code 'XX9' in select"]
    assert not any(n.startswith("unknown rule code") for n in upgraded["notes"])
    assert err == "advisor: warning: unknown rule code 'XX9' in select\n"


def test_report_format_follows_output_extension(capsys, run_dir: Path, tmp_path: Path) -> None:
    for name, marker in (("r.html", "<!DOCTYPE html>"), ("r.md", "## advisor:"), ("r.json", '{\n  "schema_version"')):
        out_file = tmp_path / name
        code, out, err = invoke(capsys, "report", str(run_dir), "-o", str(out_file))
        assert code == EXIT_OK
        assert out == ""
        assert f"wrote {out_file}" in err
        assert out_file.read_text(encoding="utf-8").lstrip().startswith(marker)
    code, out, _ = invoke(capsys, "report", str(run_dir), "--format", "json", "-o", str(tmp_path / "x.md"))
    assert json.loads((tmp_path / "x.md").read_text())["findings"]


def test_report_html_can_be_piped(capsys, run_dir: Path) -> None:
    code, out, _ = invoke(capsys, "report", str(run_dir), "--format", "html")
    assert code == EXIT_OK and out.startswith("<!DOCTYPE html>")  # capsys is not a TTY


@pytest.mark.parametrize(
    ("fail_on", "expected"),
    [("never", EXIT_OK), ("error", EXIT_FINDINGS), ("warning", EXIT_FINDINGS), ("info", EXIT_FINDINGS)],
)
def test_fail_on(capsys, run_dir: Path, fail_on: str, expected: int) -> None:
    code, out, _ = invoke(capsys, "report", str(run_dir), "--fail-on", fail_on)
    assert code == expected
    assert "Primary bottleneck" in out  # the report is still printed


def test_gate_thresholds() -> None:
    after = make_after_report()  # info findings only
    assert gate(after, "warning") == EXIT_OK
    assert gate(after, "info") == EXIT_FINDINGS
    clean = dataclasses.replace(after, findings=())
    assert all(gate(clean, f) == EXIT_OK for f in FAIL_ON_CHOICES)
    assert [f.code for f in failing_findings(make_report().findings, "warning")] == ["CPU003", "DL001"]
    with pytest.raises(UsageError):
        gate(after, "critical")


def test_report_missing_run_dir(capsys, tmp_path: Path) -> None:
    code, out, err = invoke(capsys, "report", str(tmp_path))
    assert code == EXIT_USAGE
    assert out == ""
    assert err.startswith("advisor: error: no report.json") and err.count("\n") == 1


def test_report_unknown_extension(capsys, run_dir: Path, tmp_path: Path) -> None:
    code, _, err = invoke(capsys, "report", str(run_dir), "-o", str(tmp_path / "r.pdf"))
    assert code == EXIT_USAGE and "--format" in err


def test_compare_cli_markdown_and_html(capsys, tmp_path: Path) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    make_report().save(before)
    make_after_report().save(after)
    code, out, err = invoke(capsys, "compare", str(before), str(after), "--format", "markdown")
    assert code == EXIT_OK and err == ""
    assert "1.59× no measurable effect" in out  # one run a side, noise unknown: within a factor of 2
    assert "✅ gone | **DL001**" in out
    code, _, err = invoke(capsys, "compare", str(before / "report.json"), str(after), "-o", str(tmp_path / "c.html"))
    assert code == EXIT_OK and "wrote" in err
    assert "advisor compare" in (tmp_path / "c.html").read_text()


def test_compare_cli_not_comparable(capsys, tmp_path: Path) -> None:
    gpu, cpu = tmp_path / "gpu", tmp_path / "cpu"
    make_gpu_trace_report().save(gpu)
    make_report().save(cpu)
    code, out, _ = invoke(capsys, "compare", str(gpu), str(cpu))
    assert code == EXIT_OK
    assert "not comparable" in out
    assert "devices differ (Tesla V100-DGXS-32GB vs CPU)" in out
    assert "×" not in out.split("Speedup", 1)[1].splitlines()[0]  # no bogus ratio on the speedup line


def test_compare_missing_side(capsys, tmp_path: Path) -> None:
    code, _, err = invoke(capsys, "compare", str(tmp_path / "nope"), str(tmp_path))
    assert code == EXIT_USAGE and "does not exist" in err


@pytest.mark.e2e
def test_python_m_advisor_report_smoke(run_dir: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "advisor", "report", str(run_dir), "--format", "json", "--fail-on", "error"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == EXIT_FINDINGS, proc.stderr
    assert json.loads(proc.stdout)["primary"]["category"] == "data_loading"
