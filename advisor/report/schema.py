"""The JSON Schema of ``report.json``, generated from the :class:`~advisor.report.model.Report` model.

The report and everything in it are frozen dataclasses with type hints; msgspec reads those
hints and writes the schema (draft 2020-12), so the schema cannot drift from the model. The
copy in ``docs/report.schema.json`` is what tools outside Python read; ``make docs`` regenerates
it (``python -m advisor.report.schema``) and ``tests/report/test_schema.py`` fails when it is
stale, and validates real reports against it.

The saved JSON differs from the Python values in two ways the schema states: tuples are arrays,
and a float that is not finite is written as ``null`` (JSON has no NaN), so every number field
of the model also admits ``null``.
"""

from __future__ import annotations

import inspect
import json
from typing import Any


def _hook(tp: Any) -> dict[str, Any] | None:
    # NOTE: ``object`` (a fix's parameter values) is any JSON value; msgspec needs a non-empty dict.
    if tp is object:
        return {"description": "any JSON value"}
    return None


def _nullable_numbers(node: Any) -> Any:
    """Let every ``number`` also be ``null``: non-finite floats are saved as null (advisor._serde)."""
    if isinstance(node, dict):
        out = {k: _nullable_numbers(v) for k, v in node.items()}
        if out.get("type") == "number":
            out["type"] = ["number", "null"]
        return out
    if isinstance(node, list):
        return [_nullable_numbers(v) for v in node]
    return node


def _as_msgspec_writes_it(schema: dict[str, Any]) -> dict[str, Any]:
    """Return the schema as msgspec 0.23 and later write it, whichever msgspec is installed.

    Before 0.23 msgspec kept a docstring's indentation in the descriptions and stated no default
    for a field whose default is an empty dict; from 0.23 on it dedents them and states ``{}``.
    """
    for definition in schema["$defs"].values():
        if "description" in definition:
            definition["description"] = inspect.cleandoc(definition["description"])
        required = set(definition.get("required", ()))
        for name, prop in definition.get("properties", {}).items():
            if name not in required and "default" not in prop and prop.get("type") == "object":
                prop["default"] = {}
    return schema


def report_schema() -> dict[str, Any]:
    """Return the JSON Schema (draft 2020-12) of the document :meth:`Report.to_dict` writes."""
    import msgspec

    from advisor.report.model import Report

    schema = msgspec.json.schema(Report, schema_hook=_hook)
    schema = _as_msgspec_writes_it(_nullable_numbers(schema))
    # NOTE: defaults that depend on this build (the advisor version) would make the checked-in
    # copy stale on every release; the field descriptions say what they hold instead.
    schema["$defs"]["Report"]["properties"]["advisor_version"].pop("default", None)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "advisor report.json",
        **schema,
    }


def schema_text() -> str:
    """Return the schema as the text of ``docs/report.schema.json`` (sorted keys, trailing newline)."""
    return json.dumps(report_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":  # pragma: no cover - `make docs`
    import sys

    sys.stdout.write(schema_text())
