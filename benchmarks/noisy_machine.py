"""The reproducing script of issue #26 beside busy processes: advisor's verdicts vs plain timing.

``tests/scripts/char_transformer.py`` (an infinite 4-worker DataLoader, two intra-op threads, a
tiny model) is diagnosed with ``advisor diagnose`` while ``--busy`` processes spin beside it
(default 1; 0 for an idle machine), then timed *plainly*, interleaved, with the threads it has
and with one intra-op thread (``OMP_NUM_THREADS=1``: what the ``cpu_threads`` fix sets), under
the same load. Each plain run prints its own steady samples/s. The table puts every trial advisor
ran beside the plain figure for the same change, so a kept fix that plain timing does not
reproduce shows at once. The load average is printed before and after.

Usage::

    .venv/bin/python benchmarks/noisy_machine.py [--busy 1] [--plain-repeats 4] [--iters 150]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "scripts" / "char_transformer.py"
RATE = re.compile(r"([0-9.]+) samples/s")
# The plain equivalent of each fix advisor may keep for this script (env set before start-up).
PLAIN_ENV = {"cpu_threads": {"OMP_NUM_THREADS": "1"}}


def load() -> str:
    """Return the load averages, for the table's head and foot."""
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def plain(iters: int, env: dict[str, str]) -> float | None:
    """Run the script plainly (from its folder, in our session); return its printed samples/s."""
    proc = subprocess.run(
        [sys.executable, SCRIPT.name, "--iters", str(iters)], capture_output=True, text=True,
        cwd=SCRIPT.parent, env={**os.environ, **env}, check=False,
    )
    found = RATE.findall(proc.stdout)
    return float(found[-1]) if proc.returncode == 0 and found else None


def diagnose(out: Path) -> dict:
    """Run ``advisor diagnose`` on the script; return its report.json."""
    report = out / "report.json"
    subprocess.run(
        [sys.executable, "-m", "advisor", "diagnose", "--out", str(out / "run"), "--format", "json",
         "-o", str(report), SCRIPT.name, "--iters", "100000"],
        cwd=SCRIPT.parent, capture_output=True, text=True, check=False,
    )
    return json.loads(report.read_text())


def main(argv: list[str] | None = None) -> int:
    """Print advisor's trials beside the plain timing of the same changes."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy", type=int, default=1, help="busy processes beside the runs (0: idle)")
    ap.add_argument("--plain-repeats", type=int, default=4)
    ap.add_argument("--iters", type=int, default=150)
    args = ap.parse_args(argv)
    busy = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(args.busy)]
    try:
        print(f"{args.busy} busy process(es); {load()}", flush=True)
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            report = diagnose(Path(tmp))
        took = time.perf_counter() - t0
        rates: dict[str, list[float]] = {"baseline": [], **{f: [] for f in PLAIN_ENV}}
        for _ in range(args.plain_repeats):  # interleaved: baseline, then each fix, in turn
            for arm in rates:
                r = plain(args.iters, PLAIN_ENV.get(arm, {}))
                if r is not None:
                    rates[arm].append(r)
        print(f"diagnose took {took:.0f} s; kept {report.get('kept_fixes') or 'nothing'}; {load()}")
    finally:
        for p in busy:
            p.kill()
    base = statistics.median(rates["baseline"]) if rates["baseline"] else None
    print(f"plain baseline: {', '.join(f'{r:.0f}' for r in rates['baseline'])} samples/s")
    print(f"{'fix':<20} {'advisor':<34} {'verdict':<14} {'plain (median of runs)':<26}")
    for t in report.get("trials", []):
        fix = t["fix"]
        said = "—" if t.get("speedup") is None else f"{t['speedup']:.2f}x"
        if t.get("ci_low") is not None:
            kind = "range" if t.get("interval") == "run_range" else "95% CI"
            said += f" [{t['ci_low']:.2f}-{t['ci_high']:.2f}] {kind}"
        got = rates.get(fix)
        by_hand = f"{statistics.median(got) / base:.2f}x ({', '.join(f'{r:.0f}' for r in got)})" if got and base else "—"
        print(f"{fix:<20} {said:<34} {t['verdict']:<14} {by_hand}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
