"""advisor-bench (benchmarks/accuracy): generated cases, the truth's expectation, the scoring."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(autouse=True)
def _bench_on_path(monkeypatch):
    monkeypatch.setattr(sys, "path", [str(BENCH), *sys.path])
    for name in [m for m in sys.modules if m == "accuracy" or m.startswith("accuracy.")]:
        monkeypatch.delitem(sys.modules, name)


BASE = {f"{f}-b{b}": ms * b / 16 for f, ms in {"mlp": 10.0, "cnn": 40.0, "lm": 30.0, "gru": 20.0, "unet3d": 50.0}.items()
        for b in (16, 64)}


def test_cases_are_seeded_and_a_slice_spans_the_cross():
    from accuracy.cases import BATCHES, FAMILIES, generate

    a, b = generate(100, 7, BASE), generate(100, 7, BASE)
    assert a == b and generate(100, 8, BASE) != a
    cells = {(c.family, c.batch, c.kind, c.severity) for c in a}
    assert len(cells) == 100  # 100 cases, 100 different cells of the 102
    assert len({(c.family, c.batch, c.kind, c.severity) for c in generate(102, 7, BASE)}) == 102
    assert {c.batch for c in a} == set(BATCHES)
    assert len({c.family for c in a[:10]}) >= 3 and len({c.kind for c in a[:10]}) >= 4
    assert {c.family for c in a} == set(FAMILIES)
    assert all(c.kind != "hand_attention" or c.family == "lm" for c in a)


def test_every_script_parses_and_marks_its_injection(tmp_path: Path):
    from accuracy.cases import generate, write
    from accuracy.score import injected

    for case in generate(102, 3, BASE):
        script = write(case, tmp_path)
        ast.parse(script.read_text())
        lines, funcs = injected(script)
        assert bool(lines) == (case.kind != "healthy"), case.id
        assert not lines or funcs or case.kind == "oversubscribed"  # a thread count set at module level


def test_the_expectation_comes_from_the_measured_share():
    from accuracy.cases import Case
    from accuracy.score import Row, expectation
    from accuracy.truth import Truth

    case = Case("c", "mlp", 16, "io_wait", "strong", 5.0, 1)
    assert expectation(case, Truth(on_ms=20.0, off_ms=10.0, input_on_ms=10.0)) == ("data_loading", True)  # 50%
    assert expectation(case, Truth(on_ms=20.0, off_ms=19.8, input_on_ms=0.2)) == (None, True)  # 1%: no bottleneck
    assert expectation(case, Truth(on_ms=20.0, off_ms=19.0, input_on_ms=1.0)) == ("data_loading", False)  # borderline
    # an input-path injection is read by the input share, timed in the same steps, not by on/off
    assert expectation(case, Truth(on_ms=46.0, off_ms=23.5, input_on_ms=1.9)) == ("data_loading", False)
    assert Truth(on_ms=10.0, off_ms=12.0).share == 0.0
    # the input path is measured for every kind: a plain collate that costs a share is data loading
    healthy = Case("h", "mlp", 16, "healthy", "none", 0.0, 1)
    assert expectation(healthy, Truth(on_ms=10.0, off_ms=10.0, input_on_ms=0.1)) == (None, True)
    assert expectation(healthy, Truth(on_ms=10.0, off_ms=10.0, input_on_ms=2.0)) == ("data_loading", True)
    assert expectation(healthy, Truth(on_ms=10.0, off_ms=10.0, input_on_ms=0.5)) == ("data_loading", False)
    tiny = Case("t", "cnn", 16, "tiny_ops", "strong", 5.0, 1)
    assert expectation(tiny, Truth(on_ms=10.0, off_ms=7.0, input_on_ms=0.2)) == ("small_kernels", True)
    assert expectation(tiny, Truth(on_ms=10.0, off_ms=9.0, input_on_ms=3.0)) == ("data_loading", True)
    assert Truth(on_ms=10.0, off_ms=5.0, input_on_ms=4.0).input_share == 0.4
    row = Row(case, expected=None, alarms=["CO005"])
    assert row.right is False  # a warning on a case with no bottleneck is a false alarm
    assert Row(case, expected="data_loading", found="data_loading").right is True
    assert Row(case, expected="data_loading", scored=False, found="compute").right is None


def test_scoring_reads_the_primary_alarms_and_locations(tmp_path: Path):
    from accuracy.cases import Case, write
    from accuracy.score import Row, score

    case = Case("c001-mlp-io_wait-strong", "mlp", 16, "io_wait", "strong", 5.0, 1)
    script = write(case, tmp_path)
    report = {
        "primary": {"category": "data_loading"},
        "findings": [{"code": "DL001", "severity": "warning", "locations": []},
                     {"code": "SY002", "severity": "info", "locations": []}],
        "locations": [{"file": str(script), "line": 1, "function": "__getitem__"}],
    }
    row = Row(case, expected="data_loading")
    score(row, script, report)
    assert (row.found, row.alarms, row.located, row.right) == ("data_loading", ["DL001"], True, True)
    report["locations"] = [{"file": "/elsewhere/" + script.name + "x", "line": 1, "function": "__getitem__"}]
    score(row, script, report)
    assert row.located is False


@pytest.mark.slow
@pytest.mark.e2e
def test_a_ten_case_slice_runs_end_to_end(tmp_path: Path):
    """Ten generated cases through truth and advisor: every row measured and scored, none errored.

    Whether advisor is right depends on how busy the machine is (the truth is a timing), so the
    slice checks the harness, and the full run's figures go to docs/accuracy.md.
    """
    from accuracy.run import main

    out = tmp_path / "acc.md"
    assert main(["--cases", "10", "--work", str(tmp_path / "w"), "--markdown", str(out),
                 "--json", str(tmp_path / "acc.json"), "--trials", "1"]) == 0
    data = json.loads((tmp_path / "acc.json").read_text())
    assert len(data["rows"]) == 10 and all(not r["error"] for r in data["rows"]), data["rows"]
    assert all(r["share"] is not None and r["expected"] in (None, r["category"], "data_loading") for r in data["rows"])
    assert "## Confusion matrix" in out.read_text()
    # the one gain trial: a case with a mechanical fix, its truth and advisor's figures, or its error
    assert len(data["gains"]) <= 1 and all(g["truth"] > 0 and (g["error"] or g["measured"]) for g in data["gains"])


def test_the_gain_sample_takes_each_mechanical_kind_in_turn(tmp_path: Path):
    from accuracy.cases import Case
    from accuracy.gains import FIX_FOR, markdown, rows_from_json, sample
    from accuracy.score import Row
    from accuracy.truth import Truth

    def row(i: int, kind: str, expected: str | None = "data_loading") -> Row:
        r = Row(Case(f"c{i:03d}-mlp-b16-{kind}-mild", "mlp", 16, kind, "mild", 1.0, i), expected=expected,
                found=expected, truth=Truth(10.0, 8.0, 2.0))
        return r

    rows = [row(0, "io_wait"), row(1, "io_wait"), row(2, "oversubscribed", "compute"), row(3, "tiny_ops", "small_kernels"),
            row(4, "cpu_transform"), row(5, "healthy", None)]
    picked = sample(rows, 3)
    assert [r.case.kind for r in picked] == ["cpu_transform", "io_wait", "oversubscribed"]
    assert all(r.case.kind in FIX_FOR for r in sample(rows, 10)) and len(sample(rows, 10)) == 4
    # an earlier run's JSON gives back the same rows to sample from
    path = tmp_path / "acc.json"
    path.write_text(json.dumps({"rows": [{**r.case.to_json(), **{k: v for k, v in r.to_json().items()
                                                                    if k not in r.case.to_json()}} for r in rows]}))
    again = rows_from_json(path)
    assert [r.case.id for r in sample(again, 3)] == [r.case.id for r in picked]
    assert again[0].truth.on_ms == 10.0 and again[0].truth.off_ms == 8.0
    assert markdown([]) == []
