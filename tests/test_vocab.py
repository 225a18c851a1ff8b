"""Vocabularies are enums that read, compare and serialise exactly as their words; one finite, one median."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from advisor._serde import from_dict, to_jsonable
from advisor.capture.model import RunCapture, RunStatus
from advisor.engine.model import Category, Finding, Safety, Severity, severity_rank, sort_findings
from advisor.errors import EXIT_FINDINGS, EXIT_OK
from advisor.fixes.model import Trial, Verdict
from advisor.report.gate import gate
from advisor.report.model import Report


def test_a_member_is_its_word() -> None:
    v = Verdict.NO_EFFECT
    assert v == "no_effect" and str(v) == "no_effect" and f"{v}" == "no_effect" and f"{v!r}" == "'no_effect'"
    assert {"no_effect": 1}[v] == 1 and json.dumps({v: [v]}) == '{"no_effect": ["no_effect"]}'
    assert Category.values()[0] == "data_loading" and Severity.values() == ("info", "warning", "error")


def test_models_load_members_and_write_words(tmp_path: Path) -> None:
    capture = from_dict(RunCapture, {"status": "crashed"})
    assert capture.status is RunStatus.CRASHED
    assert to_jsonable(capture)["status"] == "crashed" and type(to_jsonable(capture)["status"]) is str
    trial = Trial(fix="pin_memory", safety="safe", verdict="improved")  # producers may pass words
    assert trial.verdict is Verdict.IMPROVED and trial.safety is Safety.SAFE


def test_an_unknown_word_from_a_newer_writer_is_kept() -> None:
    capture = from_dict(RunCapture, {"status": "preempted"})
    assert capture.status == "preempted" and not isinstance(capture.status, RunStatus)
    assert Verdict.parse("regressed") == "regressed"


def _finding(code: str, severity: str) -> Finding:
    return Finding(code=code, name="x", category=Category.SYNC, severity=severity, message="m", evidence={})  # type: ignore[arg-type]


def test_an_unknown_severity_is_not_taken_for_the_most_severe() -> None:
    assert severity_rank("critical") == -1 < severity_rank(Severity.INFO)
    findings = (_finding("ZZ001", "critical"), _finding("AA001", "info"), _finding("BB001", "error"))
    assert [f.code for f in sort_findings(findings)] == ["BB001", "AA001", "ZZ001"]
    report = dataclasses.replace(Report(), findings=findings[:1])
    assert gate(report, "info") == EXIT_OK  # the CI gate agrees with the sort order
    assert gate(dataclasses.replace(report, findings=findings), "error") == EXIT_FINDINGS


def test_one_finite_and_one_median() -> None:
    import numpy as np

    from advisor._num import finite, median

    assert [finite(v) for v in (1, 2.5, np.int64(3), np.float32(0.5))] == [1.0, 2.5, 3.0, 0.5]
    assert all(finite(v) is None for v in (None, float("nan"), float("inf"), True, "1.5", [1]))
    assert median([3, None, 1, float("nan"), 2]) == 2.0 and median([1, 2]) == 1.5 and median([None]) is None
