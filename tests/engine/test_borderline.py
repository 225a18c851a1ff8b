"""Margins of a condition's thresholds, and the note for a finding that held by a narrow one."""

from __future__ import annotations

import pytest

from advisor.api.rules import rule_set
from advisor.engine.borderline import borderline_notes
from advisor.engine.condition import parse_expression
from advisor.engine.model import Category, Finding, Severity
from advisor.metrics.registry import is_declared


def _expr(text: str):
    return parse_expression(text, is_declared)


def test_margins_are_the_thresholds_every_part_must_clear() -> None:
    expr = _expr("kernel_cpu_frac >= 0.1 and page_faults_per_step_count >= 500")
    kernel, faults = expr.margins({"kernel_cpu_frac": 0.104, "page_faults_per_step_count": 2000})
    assert (kernel.quantity, kernel.op, kernel.threshold) == ("kernel_cpu_frac", ">=", 0.1)
    assert kernel.relative == pytest.approx(0.04)
    assert faults.relative == pytest.approx(3.0)


def test_a_number_on_the_left_and_a_chain_read_from_the_quantity() -> None:
    low, high = _expr("0.1 < kernel_cpu_frac <= 0.5").margins({"kernel_cpu_frac": 0.45})
    assert (low.op, low.threshold, high.op, high.threshold) == (">", 0.1, "<=", 0.5)
    assert high.relative == pytest.approx(0.1)  # 0.05 below a ceiling of 0.5
    (flipped,) = _expr("0.2 <= kernel_cpu_frac").margins({"kernel_cpu_frac": 0.3})
    assert (flipped.op, flipped.threshold) == (">=", 0.2)


def test_no_single_threshold_gives_no_margin() -> None:
    values = {"kernel_cpu_frac": 0.3, "kernel_time_frac": 0.2}
    assert _expr("kernel_cpu_frac >= 0.1 or kernel_time_frac >= 0.1").margins(values) == ()
    assert _expr("kernel_cpu_frac >= kernel_time_frac").margins(values) == ()
    (unknown,) = _expr("kernel_cpu_frac >= 0.1").margins({})
    assert unknown.value is None and unknown.relative is None


def _finding(code: str, **evidence: float) -> Finding:
    return Finding(code=code, name=code.lower(), category=Category.HOST, severity=Severity.WARNING, message="",
                   evidence=dict(evidence))


def test_a_share_just_past_its_threshold_gets_a_note() -> None:
    (note,) = borderline_notes([_finding("HB005", kernel_cpu_frac=0.104, page_faults_per_step_count=2048)],
                               rule_set())
    assert note.startswith("HB005 (hb005) held by a narrow margin: kernel_cpu_frac 10.4% against its threshold >= 10.0%")


def test_shares_well_past_and_counts_at_their_threshold_get_none() -> None:
    rules = rule_set()
    assert borderline_notes([_finding("HB005", kernel_cpu_frac=0.2, page_faults_per_step_count=501)], rules) == ()
    sy002 = rules.get("SY002")
    assert sy002 is not None and "count" in sy002.when.source  # calls per step come from the code, not the run
    evidence = {name: 2.0 for name in sy002.when.names}
    assert borderline_notes([_finding("SY002", **evidence)], rules) == ()
