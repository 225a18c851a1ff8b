"""Findings as SARIF 2.1.0 (``--format sarif``), the format GitHub code scanning and most CI tools read.

One run, one result per finding. Each rule that fired is listed once under ``tool.driver.rules``
and results point to it by ``ruleId`` and ``ruleIndex``. Severities map to SARIF levels
(``error``, ``warning``, ``info`` -> ``note``). A finding's code locations become physical
locations; a finding without one points at the script when the run has a script (code scanning
drops results without a location), else it has none.

Escaping: everything from a trace or script goes through :func:`json.dumps` (quotes, backslashes
and control characters escaped), and file names become URI references with every character
outside a path's unreserved set percent-encoded, so a name with spaces, ``#`` or ``?`` stays one
path.
"""

from __future__ import annotations

import json
import os
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import quote

from advisor import __version__
from advisor.engine.model import Finding, sort_findings
from advisor.report.ci_paths import repo_path
from advisor.report.model import Report

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
LEVELS: dict[str, str] = {"error": "error", "warning": "warning", "info": "note"}
"""advisor severity -> SARIF ``level`` (an unknown severity is a ``note``)."""


def artifact_uri(file: str) -> str:
    """Return a file name as a SARIF ``artifactLocation.uri``, relative to the repository root when under it.

    Relative paths become percent-encoded relative URI references with ``/`` separators;
    absolute paths elsewhere become ``file://`` URIs (:mod:`advisor.report.ci_paths`).
    """
    shown = repo_path(file)
    if os.path.isabs(shown):
        return "file://" + quote(PurePosixPath(shown.replace(os.sep, "/")).as_posix(), safe="/")
    return quote(shown.replace(os.sep, "/"), safe="/")


def _locations(finding: Finding, script: str | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for loc in finding.locations:
        physical: dict[str, Any] = {"artifactLocation": {"uri": artifact_uri(loc.file)}}
        if loc.line and loc.line > 0:
            physical["region"] = {"startLine": int(loc.line)}
        entry: dict[str, Any] = {"physicalLocation": physical}
        if loc.function:
            entry["logicalLocations"] = [{"name": loc.function, "kind": "function"}]
        out.append(entry)
    if not out and script:
        out.append({"physicalLocation": {"artifactLocation": {"uri": artifact_uri(script)}}})
    return out


def sarif_document(report: Report) -> dict[str, Any]:
    """Return the SARIF log of ``report``'s findings as a JSON-able dict."""
    findings = sort_findings(report.findings)
    rules: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    for f in findings:
        if f.code in index:
            continue
        index[f.code] = len(rules)
        rules.append(
            {
                "id": f.code,
                "name": f.name,
                "shortDescription": {"text": f.name.replace("-", " ")},
                "defaultConfiguration": {"level": LEVELS.get(f.severity, "note")},
                "properties": {"category": f.category},
            }
        )
    results = []
    for f in findings:
        result: dict[str, Any] = {
            "ruleId": f.code,
            "ruleIndex": index[f.code],
            "level": LEVELS.get(f.severity, "note"),
            "message": {"text": f.message},
            "locations": _locations(f, report.run.script),
            "properties": {
                "category": f.category,
                "impactFrac": f.impact_frac,
                "fixes": [{"id": x.id, "safety": x.safety} for x in f.fixes],
            },
        }
        results.append(result)
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "advisor",
                        "version": report.advisor_version or __version__,
                        "rules": rules,
                    }
                },
                "results": results,
                "properties": {"source": report.source},
            }
        ],
    }


def render_sarif(report: Report) -> str:
    """Render ``report``'s findings as a SARIF 2.1.0 log (JSON text, ending with a newline)."""
    return json.dumps(sarif_document(report), indent=2) + "\n"
