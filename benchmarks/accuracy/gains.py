"""advisor-bench's estimate against measured gains, on a sample of cases whose fix is mechanical.

For cases whose injection a runtime fix can remove or hide (worker processes for input work in
the Dataset, a sane thread count for oversubscribed threads), advisor runs once more *with* its
fix trials. Three figures are set side by side for each:

* the truth: the plain script's step with the injection on over the step with it off, the gain
  of removing the injection outright (:mod:`accuracy.truth`, no advisor involved);
* advisor's estimate: the primary's Amdahl bound from the diagnosis (``estimated_speedup``);
* advisor's measurement: the kept fixes' combined speedup from its own trials, or 1.0 when it
  kept nothing.

A fix need not reach the truth (two worker processes on two cores can hide input work, not
remove it), and the estimate is an upper bound: the table shows how far each one lands.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accuracy.score import Row, run_advisor  # noqa: E402

FIX_FOR = {"cpu_transform": "dataloader_workers", "io_wait": "dataloader_workers", "oversubscribed": "cpu_threads"}
"""Kinds whose fix is mechanical, and the fix that addresses each."""

ADVISOR_ARGS = ["--warmup", "3", "--steps", "10", "--profile-steps", "3", "-q"]


@dataclass(frozen=True)
class Gain:
    """One case's three figures (speedups; None where a run gave none)."""

    case: str
    fix: str
    truth: float
    estimate: float | None
    measured: float | None
    kept: tuple[str, ...]
    load: float
    error: str = ""

    def to_json(self) -> dict:
        return {"case": self.case, "fix": self.fix, "truth": round(self.truth, 3),
                "estimate": self.estimate, "measured": None if self.measured is None else round(self.measured, 3),
                "kept": list(self.kept), "load": round(self.load, 2), "error": self.error}


def sample(rows: list[Row], n: int) -> list[Row]:
    """Up to ``n`` scored cases with a mechanical fix, taken in turn from each kind (in id order)."""
    by_kind: dict[str, list[Row]] = {}
    for r in sorted(rows, key=lambda r: r.case.id):
        if r.case.kind in FIX_FOR and r.right is not None and r.truth is not None and r.expected is not None:
            by_kind.setdefault(r.case.kind, []).append(r)
    out: list[Row] = []
    while len(out) < n and any(by_kind.values()):
        for kind in sorted(by_kind):
            if by_kind[kind] and len(out) < n:
                out.append(by_kind[kind].pop(0))
    return out


def measure_gain(row: Row, script: Path, out: Path, timeout: float) -> Gain:
    """Diagnose ``script`` with its fix trials and read the three figures."""
    assert row.truth is not None
    truth = row.truth.on_ms / row.truth.off_ms if row.truth.off_ms > 0 else float("nan")
    load = os.getloadavg()[0]
    try:
        report = run_advisor(script, out, timeout, ADVISOR_ARGS)
    except RuntimeError as exc:
        return Gain(row.case.id, FIX_FOR[row.case.kind], truth, None, None, (), load, str(exc)[:200])
    primary = report.get("primary") or {}
    kept = tuple(report.get("kept_fixes") or ())
    combined = report.get("combined") or {}
    measured = float(combined["speedup"]) if kept and combined.get("speedup") else 1.0
    return Gain(row.case.id, FIX_FOR[row.case.kind], truth, primary.get("estimated_speedup"), measured, kept, load)


def run_gains(rows: list[Row], scripts: dict[str, Path], runs: Path, n: int, timeout: float) -> list[Gain]:
    """Measure the gains of a sample of ``n`` cases; print one line each."""
    out = []
    for row in sample(rows, n):
        t0 = time.perf_counter()
        gain = measure_gain(row, scripts[row.case.id], runs / f"{scripts[row.case.id].stem}-fixes", timeout)
        out.append(gain)
        print(f"gain {gain.case}: truth {gain.truth:.2f}x, estimate {gain.estimate}, measured {gain.measured} "
              f"kept {list(gain.kept)} {gain.error} ({time.perf_counter() - t0:.0f}s)", flush=True)
    return out


def markdown(gains: list[Gain]) -> list[str]:
    """The section of docs/accuracy.md: one row per sampled case."""
    if not gains:
        return []
    fmt = lambda v: "—" if v is None else f"{v:.2f}x"  # noqa: E731
    lines = [
        "## Estimate against measured gain (fix trials on a sample)", "",
        "| case | fix that addresses it | truth: injection removed | advisor's estimate | advisor kept | "
        "advisor measured | load |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for g in gains:
        kept = ", ".join(g.kept) or "nothing"
        lines.append(f"| {g.case} | {g.fix} | {fmt(g.truth)} | {fmt(g.estimate)} | {kept if not g.error else g.error} | "
                     f"{fmt(g.measured)} | {g.load:.1f} |")
    return lines


def rows_from_json(path: Path) -> list[Row]:
    """The scored rows of an earlier run's ``--json`` (case, truth, expectation), to sample gains from."""
    from accuracy.cases import Case
    from accuracy.truth import Truth

    rows = []
    for r in json.loads(path.read_text(encoding="utf-8"))["rows"]:
        case = Case(r["id"], r["family"], r["batch"], r["kind"], r["severity"], r["inject_ms"], r["seed"])
        row = Row(case, expected=r["expected"], scored=r["scored"], found=r["found"], alarms=r["alarms"], error=r["error"])
        if r.get("on_ms") is not None:
            # NOTE: the input part is given back as the share it was: on_ms * input_share
            row.truth = Truth(r["on_ms"], r["off_ms"], r["on_ms"] * (r.get("input_share") or 0.0))
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Sample an earlier run's cases (``--from`` its JSON, ``--work`` its folder) and print the section."""
    import argparse

    ap = argparse.ArgumentParser(description="advisor-bench: estimate against measured gain, on a sample")
    ap.add_argument("--from", dest="source", type=Path, required=True, help="an earlier run's --json")
    ap.add_argument("--work", type=Path, required=True, help="that run's --work folder (its cases/ are reused)")
    ap.add_argument("-n", type=int, default=6, help="cases in the sample")
    ap.add_argument("--timeout", type=float, default=300.0)
    opts = ap.parse_args(argv)
    rows = rows_from_json(opts.source)
    scripts = {r.case.id: opts.work / "cases" / f"{r.case.id.replace('-', '_')}.py" for r in rows}
    print(f"load average {'{:.2f}, {:.2f}, {:.2f}'.format(*os.getloadavg())}", flush=True)
    gains = run_gains(rows, scripts, opts.work / "runs", opts.n, opts.timeout)
    print(f"load average {'{:.2f}, {:.2f}, {:.2f}'.format(*os.getloadavg())}", flush=True)
    print("\n".join(markdown(gains)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
