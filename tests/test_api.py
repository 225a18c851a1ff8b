"""Issue #20 item 6: the documented Python API (advisor.diagnose / analyze / load / frames / report_schema)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import advisor
from advisor import api
from advisor.errors import UsageError
from advisor.report.model import Report

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "data" / "cpu_small"
GOLDEN = ROOT / "tests" / "golden" / "report.json"


@pytest.mark.e2e
def test_import_advisor_stays_light() -> None:
    code = (
        "import sys, advisor; heavy = [m for m in ('torch', 'pandas', 'numpy', 'advisor.api', "
        "'advisor.report.model') if m in sys.modules]; print(heavy); "
        "assert {'diagnose', 'analyze', 'load', 'frames', 'Report', 'report_schema'} <= set(dir(advisor))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_the_public_names_are_the_api_functions() -> None:
    assert advisor.diagnose is api.diagnose and advisor.analyze is api.analyze and advisor.load is api.load
    assert advisor.Report is Report
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        advisor.nope  # noqa: B018


def test_analyze_returns_the_report_the_command_writes() -> None:
    report = advisor.analyze(TRACE)
    assert isinstance(report, Report)
    assert report.to_dict()["findings"] == api.analyze_report(TRACE).to_dict()["findings"]
    assert report.breakdown and report.summary["step_count"] > 0


def test_analyze_takes_the_rule_selection() -> None:
    every = {f.code for f in advisor.analyze(TRACE).findings}
    assert every, "the fixture trace should fire a rule"
    dropped = sorted(every)[0]
    assert dropped not in {f.code for f in advisor.analyze(TRACE, ignore=[dropped]).findings}
    with pytest.raises(UsageError, match="unknown rule code"):
        advisor.analyze(TRACE, select=["ZZ999"])


def test_the_python_api_tolerates_the_command_options_in_the_config(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "pyproject.toml").write_text('[tool.advisor]\nsteps = 30\nignore = ["SK"]\n')
    monkeypatch.chdir(tmp_path)
    assert not any(f.code.startswith("SK") for f in advisor.analyze(TRACE).findings)


def test_load_reads_a_saved_report() -> None:
    report = advisor.load(GOLDEN)
    assert report.kept_fixes == ("dataloader_workers",)


def test_frames() -> None:
    report = advisor.load(GOLDEN)
    findings = advisor.frames.findings(report)
    assert list(findings["code"]) == [f.code for f in report.findings]
    assert findings.loc[0, "severity"] == report.findings[0].severity.value
    trials = advisor.frames.trials(report)
    assert len(trials) == len(report.trials) + 1 and trials["combined"].sum() == 1
    kept = trials[trials["kept"]]
    assert set(kept["fix"]) == set(report.kept_fixes)
    assert kept["speedup"].tolist() == [t.speedup for t in (*report.trials, report.combined) if t and t.fix in report.kept_fixes]
    steps = advisor.frames.steps(report)
    assert len(steps) == len(report.steps) and "step_time_ms" in steps
    breakdown = advisor.frames.breakdown(report)
    assert breakdown["step_frac"].is_monotonic_decreasing
    assert dict(zip(breakdown["category"], breakdown["step_frac"], strict=True)) == pytest.approx(report.breakdown)
    recoverable = advisor.frames.recoverable(report)
    assert recoverable.loc[0, "category"] == report.primary.category.value  # the primary recovers most
    assert isinstance(advisor.frames.summary(report), pd.Series)
    assert len(advisor.frames.locations(report)) == len(report.locations)


def test_report_schema_is_the_generated_schema() -> None:
    schema = advisor.report_schema()
    assert schema["$schema"].endswith("2020-12/schema") and "Report" in schema["$defs"]


def test_diagnose_passes_the_command_line_options(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "train.py"
    script.write_text("import torch\n")
    seen: dict[str, Any] = {}

    class Done:
        report = Report()

    def record(spec, engine_config=None, fix_options=None, **kw: Any):  # type: ignore[no-untyped-def]
        seen.update(spec=spec, fix=fix_options, engine=engine_config, **kw)
        return Done()

    monkeypatch.setattr(api, "diagnose_script", record)
    report = advisor.diagnose(script, ["--lr", "0.1"], out=tmp_path / "run", steps=7, warmup=1,
                              unsafe_fixes=True, fix=["pin_memory"], ignore=["SK"], inline_ignores=False)
    assert report is Done.report
    spec, fix = seen["spec"], seen["fix"]
    assert spec.args == ("--lr", "0.1") and spec.out_dir == (tmp_path / "run").resolve()
    assert (spec.timed_steps, spec.warmup_steps, spec.profiled_steps) == (7, 1, 10)  # left out: the default
    assert spec.trace_export_s == api.DEFAULT_TRACE_EXPORT_S  # so the default's steps may be cut
    assert (fix.unsafe, fix.only, fix.repeats) == (True, ("pin_memory",), 3)
    assert seen["engine"].ignore == ("SK",) and seen["inline_ignores"] is False
    advisor.diagnose(script, out=tmp_path / "run", profile_steps=10)
    assert seen["spec"].trace_export_s is None  # asked for: kept


def test_diagnose_refuses_bad_input_before_running(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        advisor.diagnose(tmp_path / "missing.py")
    (tmp_path / "t.py").write_text("x = 1\n")
    with pytest.raises(UsageError, match="unknown fix id"):
        advisor.diagnose(tmp_path / "t.py", fix=["no_such_fix"])
    with pytest.raises(UsageError, match="fixes=True"):
        advisor.diagnose(tmp_path / "t.py", fixes=False, write=True)
