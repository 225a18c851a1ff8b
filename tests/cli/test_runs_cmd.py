"""``advisor runs``: listing saved run folders built in tmp_path from the real dataclasses."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.capture.model import RunCapture
from advisor.cli.main import cli, main
from advisor.fixes.model import Trial
from advisor.report.model import Report
from advisor.report.runs import RunSummary, list_runs

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "report.json"

KEYS = [
    "name", "path", "when", "script", "status", "primary_category", "primary_share",
    "primary_recoverable", "kept_fixes", "speedup", "steps_measured", "steps_run", "ranks", "has_report", "reason",
]


def _golden() -> Report:
    return Report.load(GOLDEN)


def _write_report(run_dir: Path, created: str, script: str = "train.py", **changes: object) -> Path:
    """A run folder with capture.json and report.json (the golden report, retimed and renamed)."""
    run_dir.mkdir(parents=True)
    base = _golden()
    report = dataclasses.replace(
        base, created=created, run=dataclasses.replace(base.run, script=script), **changes
    )
    report.save(run_dir)
    RunCapture(run_dir=str(run_dir), script=script, status="stopped", profiled_steps=5).save(run_dir)
    return run_dir


def _write_capture(run_dir: Path, mtime: float | None = None, **fields: object) -> Path:
    """A partial run folder: capture.json only (the script crashed before analysis)."""
    run_dir.mkdir(parents=True)
    path = RunCapture(run_dir=str(run_dir), **fields).save(run_dir)  # type: ignore[arg-type]
    if mtime is not None:
        os.utime(path, (mtime, mtime))
        os.utime(run_dir, (mtime, mtime))
    return run_dir


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["runs", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def _json_rows(root: Path, *extra: str) -> list[dict]:
    code, out = _invoke(str(root), "--format", "json", *extra)
    assert code == 0, out
    return json.loads(out)


def _snapshot(root: Path) -> dict[str, tuple[float, bytes]]:
    return {
        str(p): (p.stat().st_mtime, p.read_bytes() if p.is_file() else b"")
        for p in sorted(root.rglob("*"))
    }


def test_rows_newest_first_and_json_shape(tmp_path: Path) -> None:
    root = tmp_path / "advisor-runs"
    # names deliberately out of time order, so the sort cannot be by name
    _write_report(root / "b-old", "2026-11-20T10:00:00+00:00")
    _write_report(root / "a-new", "2026-11-21T12:00:00+00:00")
    _write_report(root / "c-mid", "2026-11-21T09:00:00+00:00")
    # a partial run has no report time: it is ordered by its capture.json mtime
    when = 1_700_000_000.0  # 2023-11-14: older than all of the above
    _write_capture(root / "z-crash", mtime=when, script="t.py", status="crashed", profiled_steps=2)
    (root / "not-a-run").mkdir()
    (root / "stray.txt").write_text("x")

    rows = _json_rows(root)
    assert [r["name"] for r in rows] == ["a-new", "c-mid", "b-old", "z-crash"]
    for row in rows:
        assert list(row) == KEYS
    top = rows[0]
    assert top["when"] == "2026-11-21T12:00:00+00:00"
    assert top["status"] == "stopped"
    assert top["script"] == "train.py"
    assert top["primary_category"] == "data_loading"
    assert top["primary_share"] == pytest.approx(0.463)
    assert top["kept_fixes"] == ["dataloader_workers"]
    assert top["speedup"] == pytest.approx(1.589)  # the golden's combined trial = the kept set
    assert top["steps_measured"] == 5
    assert top["has_report"] is True and top["reason"] is None
    assert rows[-1]["when"] == "2023-11-14T22:13:20+00:00"


def test_partial_run_lists_what_the_capture_knows(tmp_path: Path) -> None:
    _write_capture(tmp_path / "crashed-1", script="train.py", status="crashed", profiled_steps=3,
                   ranks=("rank0", "rank1"))
    (row,) = list_runs(tmp_path)
    assert row.status == "crashed"
    assert row.script == "train.py"
    assert row.steps_measured == 3
    assert row.ranks == 2
    assert not row.has_report and row.primary_category is None and row.speedup is None
    assert row.reason is not None and "report.json" in row.reason

    code, out = _invoke(str(tmp_path))
    assert code == 0
    assert "crashed (2 ranks)" in out
    assert "crashed-1: no report.json" in out


@pytest.mark.parametrize(
    ("file", "content", "needle"),
    [
        ("report.json", "{bad json", "not valid JSON"),
        ("report.json", "[1, 2]", "not an advisor report"),
        ("capture.json", "{trunc", "not valid JSON"),
        ("capture.json", "\"just a string\"", "capture object"),
        # loads (from_dict is lenient) but the values are the wrong shapes
        ("report.json", '{"schema_version": 2, "run": [], "primary": "x", "kept_fixes": 5}', "report.json"),
    ],
)
def test_corrupt_file_is_an_unreadable_row(tmp_path: Path, file: str, content: str, needle: str) -> None:
    good = _write_report(tmp_path / "good", "2026-11-21T12:00:00+00:00")
    bad = tmp_path / "bad"
    bad.mkdir()
    if file == "capture.json":  # a good report beside a corrupt capture: still flagged
        _golden().save(bad)
    (bad / file).write_text(content)

    rows = {r.name: r for r in list_runs(tmp_path)}
    assert rows["good"].status == "stopped"
    row = rows["bad"]
    assert row.status == "unreadable"
    assert row.reason is not None and needle in row.reason and file in row.reason
    assert "\n" not in row.reason
    assert str(bad) not in row.reason  # the row names the run; the reason names just the file
    if file == "capture.json":
        assert row.primary_category == "data_loading"  # what the readable report says is kept

    code, out = _invoke(str(tmp_path))
    assert code == 0
    assert "Traceback" not in out
    assert "unreadable" in out and f"bad: {file}" in out
    assert good.name in out


def test_missing_dir_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["runs", str(tmp_path / "nope")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "no runs at" in err and "advisor diagnose" in err

    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit) as exc:
        main(["runs", str(tmp_path / "file")])
    assert exc.value.code == 2


def test_default_dir_and_empty_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "advisor-runs"
    root.mkdir()
    (root / "empty-folder").mkdir()
    code, out = _invoke()
    assert code == 0
    assert out.startswith("No runs in advisor-runs")
    assert _json_rows(root) == []

    _write_report(root / "demo-1", "2026-11-21T12:00:00+00:00", script=str(tmp_path / "sub" / "train.py"))
    code, out = _invoke()
    assert code == 0
    assert "sub/train.py" in out and str(tmp_path) not in out  # shown relative to the cwd
    assert "demo-1" in out and "2026-11-21 12:00" in out and "1.59×" in out and "data_loading 46%" in out
    assert all(line == line.rstrip() for line in out.splitlines())


def test_hostile_names_print_literally(tmp_path: Path) -> None:
    _write_report(tmp_path / "[red]run[bold]x", "2026-11-21T12:00:00+00:00", script="[bold]x[/bold].py")
    _write_capture(tmp_path / "p", script="[link=http://e.vil]y[/link].py", status="crashed")
    code, out = _invoke(str(tmp_path))
    assert code == 0
    assert "[red]run[bold]x" in out  # folder names cannot hold "/", so no closing tag
    assert "[bold]x[/bold].py" in out
    assert "[link=http://e.vil]y[/link].py" in out


def test_limit(tmp_path: Path) -> None:
    for day in (18, 19, 20, 21):
        _write_report(tmp_path / f"run-{day}", f"2026-11-{day}T12:00:00+00:00")
    rows = _json_rows(tmp_path, "--limit", "2")
    assert [r["name"] for r in rows] == ["run-21", "run-20"]
    assert len(list_runs(tmp_path, limit=1)) == 1
    code, out = _invoke(str(tmp_path), "--limit", "1")
    assert code == 0 and "run-21" in out and "run-18" not in out
    code, _ = _invoke(str(tmp_path), "--limit", "0")
    assert code == 2


def test_kept_speedup_reading(tmp_path: Path) -> None:
    """Combined trial when it is exactly the kept set, else the one kept fix's trial, else unknown."""
    a = Trial(fix="pin_memory", safety="safe", speedup=1.10, verdict="improved")
    b = Trial(fix="dataloader_workers", safety="safe", speedup=1.50, verdict="improved")
    both = Trial(fix="dataloader_workers+pin_memory", fixes=("dataloader_workers", "pin_memory"), safety="safe", speedup=1.70, verdict="improved")
    cases = {
        "combined": dict(trials=(a, b), combined=both, kept_fixes=("pin_memory", "dataloader_workers")),
        "single": dict(trials=(a, b), combined=None, kept_fixes=("dataloader_workers",)),
        "mismatch": dict(trials=(a, b), combined=both, kept_fixes=("pin_memory", "cpu_threads")),
        "none": dict(trials=(a, b), combined=None, kept_fixes=()),
    }
    for i, (name, changes) in enumerate(cases.items()):
        _write_report(tmp_path / name, f"2026-11-2{i}T12:00:00+00:00", **changes)
    rows = {r.name: r for r in list_runs(tmp_path)}
    assert rows["combined"].speedup == pytest.approx(1.70)
    assert rows["single"].speedup == pytest.approx(1.50)
    assert rows["mismatch"].speedup is None
    assert rows["none"].speedup is None and rows["none"].kept_fixes == ()
    assert isinstance(rows["none"], RunSummary)


def test_listing_modifies_nothing(tmp_path: Path) -> None:
    _write_report(tmp_path / "r1", "2026-11-21T12:00:00+00:00")
    _write_capture(tmp_path / "r2", script="t.py", status="timeout")
    (tmp_path / "r3").mkdir()
    (tmp_path / "r3" / "report.json").write_text("{nope")
    before = _snapshot(tmp_path)
    for fmt in ("text", "json"):
        code, _ = _invoke(str(tmp_path), "--format", fmt)
        assert code == 0
    assert _snapshot(tmp_path) == before


def test_steps_are_the_steps_the_capture_ran_and_a_normal_stop_reads_complete(tmp_path: Path) -> None:
    # issue #32: "steps 10" (the profiled steps) for a 45-step capture, status "stopped" for a success
    from advisor.report.runs_render import render_runs_text

    run_dir = tmp_path / "train-1"
    RunCapture(run_dir=str(run_dir), script="train.py", status="stopped", warmup_steps=5, timed_steps=20,
               profiled_steps=10, cprofiled_steps=10, steps_seen=45).save(run_dir)
    (row,) = list_runs(tmp_path)
    assert row.steps_run == 45 and row.steps_measured == 10 and row.status == "stopped"  # JSON keeps the words
    text = render_runs_text([row], tmp_path, width=160)
    line = next(ln for ln in text.splitlines() if "train-1" in ln)
    assert " complete " in line and "stopped" not in line and line.rstrip().endswith("45")
