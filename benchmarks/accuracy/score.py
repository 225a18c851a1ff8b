"""Run advisor on a case and score its diagnosis against the truth."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from zoo import run_group

from accuracy.cases import Case
from accuracy.truth import Truth

MIN_SHARE = 0.10
"""An injection that costs at least this share of the step must be the primary."""
NO_SHARE = 0.03
"""One that costs less is no bottleneck at all: the case counts as healthy."""
ALARM = ("warning", "error")
"""Severities a healthy case must not get (info findings are notes, not alarms)."""

ADVISOR_ARGS = ["--no-fixes", "--warmup", "3", "--steps", "10", "--profile-steps", "3", "-q"]


@dataclass
class Row:
    """One case scored."""

    case: Case
    truth: Truth | None = None
    expected: str | None = None  # category, None for healthy
    scored: bool = True  # False: a share between NO_SHARE and MIN_SHARE (borderline)
    found: str | None = None  # advisor's primary category
    alarms: list[str] = field(default_factory=list)  # warning/error finding codes
    located: bool | None = None  # a finding location on the injected lines (None: not applicable)
    error: str = ""
    seconds: float = 0.0

    @property
    def right(self) -> bool | None:
        """Primary right (healthy: no alarm); None when not scored."""
        if self.error or not self.scored:
            return None
        if self.expected is None:
            return not self.alarms
        return self.found == self.expected

    def to_json(self) -> dict:
        return {
            **self.case.to_json(), "share": None if self.truth is None else round(self.truth.share, 4),
            "input_share": None if self.truth is None else round(self.truth.input_share, 4),
            "on_ms": None if self.truth is None else round(self.truth.on_ms, 3),
            "off_ms": None if self.truth is None else round(self.truth.off_ms, 3),
            "expected": self.expected, "scored": self.scored, "found": self.found, "alarms": self.alarms,
            "located": self.located, "right": self.right, "error": self.error, "seconds": round(self.seconds, 1),
        }


def expectation(case: Case, truth: Truth) -> tuple[str | None, bool]:
    """(expected primary, scored) from the measured shares, never from advisor's output.

    Two shares compete: the input path's (``next()`` of the batch iterator, data_loading, whatever
    the kind) and, for an injection outside it, the injection's (what switching it off gave back,
    in its kind's category). The larger is the expected primary; under :data:`NO_SHARE` the case
    is healthy, between the two thresholds it is borderline and not scored. A healthy case whose
    plain input path costs a real share is therefore expected to read data_loading. An injection
    into the input path is read through the input share alone: it is timed inside the same steps
    as the whole, while the on/off difference compares different rounds, which a loaded machine
    moves far more (a 1 ms sleep read as 49% of a 25 ms step at load 7).
    """
    shares = {"data_loading": truth.input_share}
    if case.category is not None and case.category != "data_loading":
        shares[case.category] = truth.share
    category, share = max(shares.items(), key=lambda kv: kv[1])
    if share < NO_SHARE:
        return None, True
    return category, share >= MIN_SHARE


def injected(script: Path) -> tuple[set[int], set[str]]:
    """Lines marked ``# INJECTED`` and the functions that hold them."""
    text = script.read_text(encoding="utf-8")
    lines = {i for i, line in enumerate(text.splitlines(), 1) if "# INJECTED" in line}
    funcs = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and any(node.lineno <= n <= (node.end_lineno or 0) for n in lines):
            funcs.add(node.name)
    return lines, funcs


def run_advisor(script: Path, out: Path, timeout: float, args: Sequence[str] = tuple(ADVISOR_ARGS)) -> dict:
    """``advisor diagnose ARGS`` (``--no-fixes`` by default) on the case, from its folder; return report.json."""
    shutil.rmtree(out, ignore_errors=True)
    exe = shutil.which("advisor", path=str(Path(sys.executable).parent)) or "advisor"
    proc = run_group([exe, "diagnose", *args, "--out", str(out), script.name], timeout, cwd=script.parent)
    path = out / "report.json"
    if not path.is_file():
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"advisor exited {proc.returncode} without a report: {tail[:200]}")
    return json.loads(path.read_text(encoding="utf-8"))


def score(row: Row, script: Path, report: dict) -> None:
    """Fill ``row`` from advisor's report."""
    row.found = (report.get("primary") or {}).get("category")
    findings = report.get("findings") or []
    row.alarms = [f["code"] for f in findings if f.get("severity") in ALARM]
    if row.expected is None or row.expected != row.case.category:
        return  # no bottleneck, or the input path's own cost: no injected line to point at
    lines, funcs = injected(script)
    spots = [*(report.get("locations") or []), *(loc for f in findings for loc in (f.get("locations") or []))]
    mine = [s for s in spots if Path(str(s.get("file", ""))).name == script.name]
    if row.case.kind in ("oversubscribed",):
        return  # a thread count has no line to point at in the trace
    row.located = any(s.get("line") in lines or s.get("function") in funcs for s in mine)


def run_case(case: Case, script: Path, runs: Path, measure, timeout: float) -> Row:
    """Truth, then advisor, then the score; an error is the row's, never the benchmark's."""
    row, t0 = Row(case), time.perf_counter()
    try:
        row.truth = measure(script, case.kind)
        row.expected, row.scored = expectation(case, row.truth)
        score(row, script, run_advisor(script, runs / script.stem, timeout))
    except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError) as exc:
        row.error = str(exc)[:300]
    row.seconds = time.perf_counter() - t0
    return row
