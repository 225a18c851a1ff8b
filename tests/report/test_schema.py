"""Issue #20: the JSON Schema of report.json is generated from the model, checked in, and real reports validate."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from advisor import api
from advisor.report.model import Report
from advisor.report.schema import report_schema, schema_text

ROOT = Path(__file__).resolve().parents[2]
CHECKED_IN = ROOT / "docs" / "report.schema.json"
GOLDEN = ROOT / "tests" / "golden" / "report.json"
TRACES = ROOT / "tests" / "data"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(CHECKED_IN.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _errors(validator: jsonschema.Draft202012Validator, doc: object) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]


def test_the_checked_in_schema_is_the_generated_one() -> None:
    assert CHECKED_IN.read_text(encoding="utf-8") == schema_text(), (
        "docs/report.schema.json is stale: run `make docs`"
    )


def test_the_schema_covers_every_field_of_the_report() -> None:
    schema = report_schema()
    props = schema["$defs"]["Report"]["properties"]
    assert set(props) == set(Report().to_dict())
    assert set(schema["$defs"]["Trial"]["properties"]) >= {"fix", "speedup", "ci_low", "ci_high", "verdict"}
    assert schema["$defs"]["Severity"]["enum"]  # vocabularies are enums, not free strings


def test_the_golden_report_validates(validator) -> None:  # type: ignore[no-untyped-def]
    doc = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert _errors(validator, doc) == []


@pytest.mark.parametrize("trace", ["cpu_small", "gpu_small"])
def test_a_report_analyzed_from_a_real_trace_validates(validator, trace: str) -> None:  # type: ignore[no-untyped-def]
    report = api.analyze_report(TRACES / trace)
    doc = json.loads(report.to_json())
    assert doc["findings"] or doc["breakdown"]  # a real report, not an empty shell
    assert _errors(validator, doc) == []


def test_a_wrong_document_does_not_validate(validator) -> None:  # type: ignore[no-untyped-def]
    good = json.loads(GOLDEN.read_text(encoding="utf-8"))
    bad = copy.deepcopy(good)
    bad["findings"][0]["severity"] = "catastrophic"
    assert any("catastrophic" in e for e in _errors(validator, bad))
    bad = copy.deepcopy(good)
    bad["trials"][0]["speedup"] = "fast"
    assert any("'fast'" in e for e in _errors(validator, bad))
    bad = copy.deepcopy(good)
    bad["run"]["steps_measured"] = 2.5
    assert _errors(validator, bad)


def test_a_non_finite_number_saved_as_null_validates(validator) -> None:  # type: ignore[no-untyped-def]
    doc = json.loads(GOLDEN.read_text(encoding="utf-8"))
    doc["breakdown"]["data_loading"] = None  # what advisor._serde writes for NaN
    assert _errors(validator, doc) == []


def test_the_schema_reads_the_same_under_every_msgspec() -> None:
    # msgspec before 0.23 kept a docstring's indentation and stated no empty-dict default; the
    # checked-in copy is 0.23's form, so an older msgspec's output is brought to it
    from advisor.report.schema import _as_msgspec_writes_it

    older = {"$defs": {"Run": {
        "description": "What ran.\n\n    Attributes:\n        env: the environment.",
        "properties": {"env": {"type": "object"}, "name": {"type": "string"}, "steps": {"type": "object"}},
        "required": ["name", "steps"],
    }}}
    run = _as_msgspec_writes_it(older)["$defs"]["Run"]
    assert run["description"] == "What ran.\n\nAttributes:\n    env: the environment."
    assert run["properties"]["env"]["default"] == {}
    assert "default" not in run["properties"]["steps"] and "default" not in run["properties"]["name"]
    newer = copy.deepcopy(_as_msgspec_writes_it(copy.deepcopy(older)))
    assert _as_msgspec_writes_it(newer) == newer
