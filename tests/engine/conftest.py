"""Fixtures for the rule engine tests: rule cases from YAML, and Metrics built by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from advisor.metrics.model import Metrics, SourceLocation

CASES_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "rules"


def load_case_files() -> dict[str, dict[str, Any]]:
    """Rule code -> its parsed case file."""
    return {p.stem: yaml.safe_load(p.read_text(encoding="utf-8")) for p in sorted(CASES_DIR.glob("*.yaml"))}


def make_metrics(summary: dict[str, Any], locations: list[dict[str, Any]] | None = None, source: str = "test") -> Metrics:
    """Metrics with the given summary (other declared names absent, i.e. None)."""
    return Metrics(
        source=source,
        summary=dict(summary),
        steps=pd.DataFrame(),
        ranks=pd.DataFrame(),
        locations=tuple(SourceLocation(**loc) for loc in (locations or [])),
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Expand ``rule_case`` into one test per named case: ``DL001-fail-resnet50_num_workers_0``."""
    if "rule_case" not in metafunc.fixturenames:
        return
    params = []
    for code, data in load_case_files().items():
        for kind in ("fail", "pass"):
            for case in data.get(kind) or []:
                params.append(pytest.param((code, kind, case), id=f"{code}-{kind}-{case['name']}"))
    metafunc.parametrize("rule_case", params)
