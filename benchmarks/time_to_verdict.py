"""Time to verdict over the example zoo: how long ``advisor diagnose`` takes and where it goes.

For every example named in examples/expected.json (or those given) this runs
``advisor diagnose --format json`` (through :func:`zoo.run_advisor`, so a hung run is killed
whole) and prints one row per example from the report's ``timing`` (issue #16): the whole
diagnose, the capture, the trial runs and their count, the share that was overhead (everything
but measured steps: processes starting, imports, the script's set-up, warm-up, exports,
analysis), the biggest overhead phase, and each trial's verdict and the kept fixes. The load
average is printed before and after: on a shared machine it moves every figure.

Usage::

    .venv/bin/python benchmarks/time_to_verdict.py                      # the whole zoo
    .venv/bin/python benchmarks/time_to_verdict.py tiny_model --repeats 2
    .venv/bin/python benchmarks/time_to_verdict.py --json ttv.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zoo import load_manifest, run_advisor  # noqa: E402 - a sibling script, not a package

OVERHEAD_PHASES = ("process", "imports", "setup", "warmup", "finishing")


def load() -> str:
    """The 1, 5 and 15 minute load averages, as ``uptime`` prints them."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} cores"


def row(name: str, report: dict, wall: float) -> dict:
    """One example's figures from its report (``timing`` and ``trials``)."""
    timing = report.get("timing") or {}
    total = timing.get("total_s") or wall
    phases = timing.get("phases_s") or {}
    worst = max(OVERHEAD_PHASES, key=lambda p: phases.get(p, 0.0))
    return {
        "example": name,
        "wall_s": round(wall, 1),
        "total_s": total,
        "capture_s": timing.get("capture_s"),
        "trial_runs": timing.get("trial_runs", 0),
        "trials_s": timing.get("trials_s"),
        "overhead_share": (timing.get("overhead_s") or 0.0) / total if total else None,
        "largest_overhead": f"{worst} {phases.get(worst, 0.0):.0f}s",
        "verdicts": {t["fix"]: t["verdict"] for t in report.get("trials") or ()},
        "kept": list(report.get("kept_fixes") or ()),
    }


def show(r: dict) -> str:
    """One printed line."""
    share = "n/a" if r["overhead_share"] is None else f"{r['overhead_share']:.0%}"
    verdicts = ", ".join(f"{k}={v}" for k, v in r["verdicts"].items()) or "-"
    return (
        f"{r['example']:<20} {r['total_s']:>7.1f}s  capture {r['capture_s'] or 0:>6.1f}s  "
        f"{r['trial_runs']:>3} trial runs {r['trials_s'] or 0:>7.1f}s  overhead {share:>4}  "
        f"(largest: {r['largest_overhead']})  kept: {'+'.join(r['kept']) or '-'}  [{verdicts}]"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("examples", nargs="*", help="example names (default: every one in the manifest)")
    p.add_argument("--repeats", type=int, default=3, help="--repeats passed to advisor diagnose")
    p.add_argument("--timeout", type=float, default=3600.0, help="per example, seconds")
    p.add_argument("--json", type=Path, help="also write the rows as JSON here")
    opts = p.parse_args()
    manifest = load_manifest()
    names = opts.examples or [n for n in manifest if not manifest[n].get("skip")]
    unknown = [n for n in names if n not in manifest]
    if unknown:
        p.error(f"unknown example(s) {', '.join(unknown)}; known: {', '.join(manifest)}")
    print(f"before: {load()}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="advisor-ttv-") as tmp:
        for name in names:
            args = list(manifest[name].get("args", []))
            try:
                report, wall = run_advisor(name, args, Path(tmp), ["--repeats", str(opts.repeats)], opts.timeout)
            except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
                print(f"{name:<20} failed: {exc}", flush=True)
                continue
            rows.append(row(name, report, wall))
            print(show(rows[-1]), flush=True)
    total = sum(r["total_s"] for r in rows)
    overhead = sum((r["overhead_share"] or 0.0) * r["total_s"] for r in rows)
    if rows:
        print(f"zoo total {total:.1f}s over {len(rows)} example(s), overhead {overhead / total:.0%}")
    print(f"after: {load()}")
    if opts.json:
        opts.json.write_text(json.dumps({"rows": rows, "load": load()}, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
