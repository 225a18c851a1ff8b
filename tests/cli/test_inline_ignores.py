"""``advisor analyze`` honours ``# advisor: ignore`` in the script a synthetic trace points at."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from advisor.cli.main import main


def invoke(capsys, *argv: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    """Run the CLI like the console script; return (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def starved_trace(script: str = "train.py", getitem_line: int = 12) -> dict[str, Any]:
    """Four CPU steps, each spending half its time in DataLoader.__next__ in ``script:getitem_line``.

    Python frames are named as torch.profiler names them (base name, line, function), so the
    metrics stage attaches ``script:getitem_line`` to DL001's finding.
    """
    events: list[dict[str, Any]] = []
    ids = iter(range(1, 1000))

    def span(name: str, cat: str, ts: float, dur: float, **args: Any) -> None:
        events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args})

    def frame(name: str, ts: float, dur: float, parent: int | None) -> int:
        py_id = next(ids)
        span(name, "python_function", ts, dur, **{"Python id": py_id, "Python parent id": parent})
        return py_id

    root = frame(f"{script}(30): <module>", 0, 10_000, None)
    main_id = frame(f"{script}(25): main", 1, 9_998, root)
    ts = 100.0
    for step in range(1, 5):
        span(f"ProfilerStep#{step}", "user_annotation", ts, 2_000)
        span("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation", ts + 10, 1_000)
        frame(f"{script}({getitem_line}): __getitem__", ts + 20, 900, main_id)
        span("aten::full", "cpu_op", ts + 30, 800)
        span("aten::mm", "cpu_op", ts + 1_100, 800)
        ts += 2_000
    return {"schemaVersion": 1, "traceEvents": events}


def project(tmp_path: Path, comment: str) -> Path:
    """A folder with train.py (line 12 carries ``comment``) and the trace of its run."""
    lines = [f"x{i} = {i}" for i in range(1, 31)]
    lines[11] = f"    batch = load(i){comment}"
    lines[10] = "def __getitem__(self, i):"
    (tmp_path / "train.py").write_text("\n".join(lines) + "\n", encoding="utf-8")
    trace = tmp_path / "worker0.pt.trace.json"
    trace.write_text(json.dumps(starved_trace()), encoding="utf-8")
    return trace


def messages(report: dict[str, Any]) -> list[str]:
    """Notes and warnings together (where a note lands is the report stage's choice)."""
    return [*report.get("notes", ()), *report.get("warnings", ())]


def test_finding_at_a_commented_line_is_suppressed_and_counted(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    trace = project(tmp_path, "  # advisor: ignore[DL001]")
    monkeypatch.chdir(tmp_path)
    code, out, err = invoke(capsys, "analyze", str(trace), "--format", "json")
    assert code == 0
    report = json.loads(out)
    assert [f["code"] for f in report["findings"]] == []
    assert report["primary"] is None
    notes = [m for m in messages(report) if "suppressed by `# advisor: ignore`" in m]
    assert notes == [
        "1 finding suppressed by `# advisor: ignore` comments: DL001 at train.py:12 (--no-inline-ignores shows them)"
    ]
    # without the comment feature the finding is back, with no note and no file read
    code, out, err = invoke(capsys, "analyze", str(trace), "--format", "json", "--no-inline-ignores")
    report = json.loads(out)
    assert [f["code"] for f in report["findings"]] == ["DL001"]
    assert report["findings"][0]["locations"][0]["line"] == 12
    assert report["primary"]["category"] == "data_loading"
    assert not [m for m in messages(report) if "advisor: ignore" in m]


def test_other_codes_and_other_lines_do_not_suppress(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    trace = project(tmp_path, "  # advisor: ignore[SY, DL01]")
    monkeypatch.chdir(tmp_path / "..")  # the script is found beside the trace, not only in the cwd
    code, out, err = invoke(capsys, "analyze", str(trace), "--format", "json")
    report = json.loads(out)
    assert [f["code"] for f in report["findings"]] == ["DL001"]
    warning = "unknown rule code 'DL01' in `# advisor: ignore` at "
    assert any(m.startswith(warning) and "train.py:12 (did you mean 'DL001'" in m for m in messages(report))
    assert err.count(warning) == 1  # said once, on stderr too


def test_a_trace_from_another_machine_is_analysed_normally(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(starved_trace(script="/nonexistent/home/train.py")), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code, out, err = invoke(capsys, "analyze", str(trace), "--format", "json")
    assert code == 0
    assert [f["code"] for f in json.loads(out)["findings"]] == ["DL001"]
