"""Scored predictions: what each diagnosis estimated for a fix beside what its trial measured.

Every measured trial against the plain baseline carries the speedup the diagnosis predicted for
it before it ran (``Trial.estimate``: the Amdahl bound on the fix's categories, or the findings'
recoverable estimate). This prints them side by side over saved diagnose runs, and marks a
measurement whose interval lies wholly above its Amdahl bound: that bound is wrong.

Usage::

    .venv/bin/python benchmarks/predictions.py RUN_DIR [RUN_DIR ...]
    .venv/bin/python benchmarks/predictions.py --diagnose examples/data_loading.py [--diagnose ...]

``--diagnose SCRIPT`` first runs ``advisor diagnose`` on SCRIPT (from its folder, into a
temporary run directory), then scores it with the others. The load average is printed before and
after, as for every benchmark here.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from advisor.report.model import Report  # noqa: E402


def rows(run_dir: Path) -> list[list[str]]:
    """Return one row per measured single-fix trial of the run saved in ``run_dir``."""
    report = Report.load(run_dir)
    out = []
    for t in report.trials:
        if t.speedup is None or t.reference or len(t.fixes) != 1:
            continue
        est = "—" if t.estimate is None else f"≤ {t.estimate:.2f}× ({t.estimate_basis})"
        ci = "" if t.ci_low is None else f" [{t.ci_low:.2f}–{t.ci_high:.2f}]"
        held = "—" if t.estimate is None else ("BEATEN" if t.beat_estimate else "held")
        out.append([Path(report.run.script or run_dir.name).name, t.fix, est, f"{t.speedup:.2f}×{ci}", str(t.verdict), held])
    return out


def diagnose(script: Path, tmp: Path) -> Path:
    """Run ``advisor diagnose`` on ``script`` from its folder; return the run directory."""
    out = tmp / script.stem
    subprocess.run(
        [sys.executable, "-m", "advisor", "diagnose", "--out", str(out), "--format", "json", "-o", os.devnull,
         script.name], cwd=script.parent, check=False,
    )
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the scoreboard; exit 1 when any Amdahl bound was beaten."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", type=Path, help="saved diagnose run directories")
    ap.add_argument("--diagnose", action="append", type=Path, default=[], help="diagnose this script first")
    args = ap.parse_args(argv)
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        runs = [*args.runs, *(diagnose(s.resolve(), Path(tmp)) for s in args.diagnose)]
        table = [r for run in runs for r in rows(run)]
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    header = ["script", "fix", "estimated", "measured", "verdict", "estimate"]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *table, strict=False)]
    for line in [header, *table]:
        print("  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=False)))
    wrong = [r for r in table if r[-1] == "BEATEN" and "amdahl" in r[2]]
    if wrong:
        print(f"{len(wrong)} Amdahl bound(s) beaten: the breakdown or the fix's categories are wrong")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
