"""Every rule against its YAML cases: ``fail`` cases fire with the expected message, ``pass`` cases do not."""

from __future__ import annotations

import pytest

from advisor.engine.evaluate import diagnose, evaluate_rule
from advisor.engine.model import EngineConfig
from advisor.engine.rules import default_rules

from .conftest import make_metrics


def test_rule_case(rule_case):
    code, kind, case = rule_case
    rule = default_rules().get(code)
    assert rule is not None, f"tests/fixtures/rules/{code}.yaml names no loaded rule"
    metrics = make_metrics(case.get("metrics") or {}, case.get("locations"))
    finding = evaluate_rule(rule, metrics.summary, metrics.locations)
    if kind == "pass":
        assert finding is None, f"{code} fired on a pass case: {finding.message if finding else ''}"
        return
    assert finding is not None, f"{code} did not fire on {case['name']}"
    for fragment in case.get("message") or []:
        assert fragment in finding.message, f"{fragment!r} not in {finding.message!r}"
    # ``message_absent``: text an optional ``[[...]]`` segment must have dropped (e.g. ``n/a``).
    for fragment in case.get("message_absent") or []:
        assert fragment not in finding.message, f"{fragment!r} in {finding.message!r}"
    if "impact" in case:
        assert finding.impact_frac == pytest.approx(case["impact"], abs=1e-3)
    if "expect_locations" in case:
        assert [f"{loc.file}:{loc.line}" for loc in finding.locations] == case["expect_locations"]
    # Every name the rule reads is in the evidence, with the value it was given.
    for name in rule.evidence_names:
        assert finding.evidence[name] == (case["metrics"] or {}).get(name)
    # The same case through the full engine, with only this rule selected.
    diagnosis = diagnose(metrics, EngineConfig(select=(code,)))
    assert [f.code for f in diagnosis.findings] == [code]
