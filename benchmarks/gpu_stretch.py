"""Does the profiler leave the GPU's time alone? Each example profiled with and without Python stacks.

advisor's breakdown of a GPU run keeps the device's parts at their profiled milliseconds and
rescales the host's (:mod:`advisor.metrics.headline_scale`): the profiler stretches the host
(every operator and, with stacks, every Python call recorded), not the kernels. That is an
estimate. This check tests it on the GPU machine: each example is diagnosed twice without a fix
loop, once as usual and once under a trace budget small enough that the capture drops its
Python stacks (``--trace-budget``), which stretches the host far less. If the estimate holds,
the device's milliseconds per step agree between the two while the profiled steps do not.

Usage (the GPU machine, after ``make gpu-check`` installed the wheels)::

    PYTHONPATH=/tmp/advisor-site python3 benchmarks/gpu_stretch.py compute_bound transformer_lm

Writes ``$OUT/stretch.json`` and ``$OUT/stretch.md``; ``--dry-run`` checks the plumbing only.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zoo import REPO, run_group  # noqa: E402 - a sibling script

if str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))

from advisor.metrics.headline_scale import rows_clocks  # noqa: E402

EXAMPLES = REPO / "examples"
RUN_S = 90.0
"""Most seconds one diagnose may take (10-20 s each on the H200)."""
LIGHT_SHARE = 0.35
"""The light run's trace budget: three profiled steps of this share of the usual run's per-step
bytes. Python stacks were 66% of a CPU tiny_model step's trace (389 of 589 KB) and memory events
9%: a budget this small drops both before it drops below three steps."""


def row(example: str, mode: str, report: dict) -> dict:
    """One table row from a report: its profiled and timed steps, and its device time per step."""
    steps = report.get("steps") or []
    run = report.get("run") or {}
    c = rows_clocks(steps, run.get("timed_step_times_ms") or ())
    bound = run.get("trace_bound") or {}
    return {
        "example": example, "mode": mode, "profiled_steps": len(steps), "stacks": bound.get("stacks", True),
        "profiled_ms": None if c is None else round(c.profiled_ms, 3),
        "device_ms": None if c is None else round(c.device_ms, 3),
        "timed_ms": None if c is None else round(c.headline_ms, 3),
        "device_share_of_timed": None if c is None else round(c.device_ms / c.headline_ms, 4),
    }


def light_budget(report: dict, trace_bytes: int) -> int:
    """A trace budget that leaves the light run about :data:`LIGHT_SHARE` of a usual step's bytes for each of three steps."""
    steps = max(1, len(report.get("steps") or []))
    return max(64 << 10, int(3 * LIGHT_SHARE * trace_bytes / steps))


def diagnose(example: str, work: Path, extra: list[str]) -> tuple[dict | None, int]:
    """Diagnose ``example`` without fixes; return its report and its traces' uncompressed bytes."""
    out, report = work / "run", work / "report.json"
    cmd = [sys.executable, "-m", "advisor", "diagnose", "--no-fixes", "-q", "--format", "json", "-o", str(report),
           "--out", str(out), "--replace", *extra, str(EXAMPLES / f"{example}.py")]
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    try:
        run_group(cmd, RUN_S, env=env)
    except subprocess.TimeoutExpired:
        return None, 0
    data = json.loads(report.read_text(encoding="utf-8")) if report.is_file() else None
    size = 0
    for path in out.rglob("*.pt.trace.json.gz"):
        with gzip.open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                size += len(chunk)
    return data, size


def markdown(rows: list[dict]) -> str:
    head = "| example | mode | steps | stacks | profiled ms | device ms | timed ms | device / timed |\n| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |\n"
    return head + "".join(
        f"| {r['example']} | {r['mode']} | {r['profiled_steps']} | {r['stacks']} | {r['profiled_ms']} | {r['device_ms']} | "
        f"{r['timed_ms']} | {r['device_share_of_timed']} |\n" for r in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu-check-out"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/advisor-gpu-stretch"))
    ap.add_argument("--budget", type=float, default=240.0, help="seconds for the whole check")
    ap.add_argument("--dry-run", action="store_true", help="check the plumbing only, run no example")
    ap.add_argument("examples", nargs="*", default=["compute_bound", "transformer_lm"])
    opts = ap.parse_args(argv)
    opts.out.mkdir(parents=True, exist_ok=True)
    missing = [e for e in opts.examples if not (EXAMPLES / f"{e}.py").is_file()]
    rows: list[dict] = []
    deadline = time.monotonic() + opts.budget
    for example in [] if opts.dry_run or missing else opts.examples:
        if deadline - time.monotonic() < 2 * RUN_S / 3:
            break
        usual, size = diagnose(example, opts.work / example / "usual", [])
        if usual is None:
            continue
        rows.append(row(example, "usual", usual))
        light, _ = diagnose(example, opts.work / example / "light", ["--trace-budget", str(light_budget(usual, size))])
        if light is not None:
            rows.append(row(example, "light", light))
        print(markdown(rows[-2:]).splitlines()[-1], flush=True)
    (opts.out / "stretch.json").write_text(json.dumps({"missing": missing, "rows": rows}, indent=1), encoding="utf-8")
    (opts.out / "stretch.md").write_text(markdown(rows), encoding="utf-8")
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
