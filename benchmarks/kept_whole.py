"""The kept fixes' whole-run projection against the plain script timed with and without ``fix.diff``.

``advisor diagnose`` reports the kept trial's step speedup and, in the "Kept, whole run" row, what
the whole run should gain (:mod:`advisor.metrics.whole`). This checks that figure the way a user
would: it diagnoses the script (with fixes, as ``make demo`` does), applies the run's
``fix.diff`` to a copy of the script, and times the original and the copy as whole processes,
in alternating pairs (the order flips each pair), with the load average before each pair::

    .venv/bin/python benchmarks/kept_whole.py --pairs 4
    .venv/bin/python benchmarks/kept_whole.py --script /tmp/mine/train.py --args "--epochs 2"
    .venv/bin/python benchmarks/kept_whole.py --script /tmp/mine/train.py --advisor-args "--fix malloc_thresholds"

Prints one row per pair (wall times and their ratio), then the projection beside the plain
ratios' median and range. The script and its arguments are run from the script's own folder.
A run that kept nothing, kept a fix with no mechanical diff (``cpu_threads`` says
"not made mechanical"), or whose diff touches another file, cannot be timed this way: exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable


@dataclass(frozen=True)
class Claim:
    """What the report claimed: the kept fixes, their step speedup, and the whole-run projection."""

    kept: tuple[str, ...]
    step: float | None
    whole: float | None
    low: float | None
    high: float | None
    scope: str

    def text(self) -> str:
        """``dataloader_workers: steps 1.68x, whole run 1.40x [1.12-1.70]``."""
        step = f"{self.step:.2f}x" if self.step else "—"
        whole = f"{self.whole:.2f}x" if self.whole else "—"
        interval = f" [{self.low:.2f}-{self.high:.2f}]" if self.low and self.high else ""
        return f"{'+'.join(self.kept) or 'nothing'}: steps {step}, whole {self.scope or '—'} {whole}{interval}"


def claim_of(report: dict) -> Claim:
    """Read the claim out of a ``report.json`` document."""
    kept = tuple(report.get("kept_fixes") or ())
    trial = report.get("combined") or {}
    if trial and set(trial.get("fixes") or (trial.get("fix"),)) != set(kept):
        trial = next((t for t in report.get("trials") or () if t.get("fix") in kept), {}) if len(kept) == 1 else {}
    whole = report.get("kept_whole") or {}
    ratio = whole["before_s"] / whole["after_s"] if whole.get("after_s") else None
    return Claim(kept, trial.get("speedup"), ratio, whole.get("low"), whole.get("high"), whole.get("scope") or "")


def diff_target(diff: str) -> str | None:
    """The one file a unified diff changes (its ``+++ b/...`` path), None when it changes several or none."""
    from advisor.verify.patch import diff_targets  # the one `advisor verify` reads

    targets = diff_targets(diff)
    return targets[0] if len(targets) == 1 else None


def _time(cmd: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> int:
    """Diagnose, patch a copy, time the pairs, print the table; the exit status says whether it could."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--script", type=Path, default=REPO / "examples" / "data_loading.py")
    ap.add_argument("--args", default="", help="the script's arguments, as one shell-quoted string")
    ap.add_argument("--advisor-args", default="", help="options for advisor diagnose (--fix ID), one shell-quoted string")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None, help="the diagnose's run folder (default: a temporary one)")
    args = ap.parse_args()
    script = args.script.resolve()
    script_args = shlex.split(args.args)
    with tempfile.TemporaryDirectory() as tmp:
        out = (args.out or Path(tmp) / "run").resolve()
        options = shlex.split(args.advisor_args)
        print(f"load {os.getloadavg()[0]:.2f}: advisor diagnose {args.advisor_args} {script.name} {args.args}".rstrip())
        t0 = time.perf_counter()
        subprocess.run([PY, "-m", "advisor", "diagnose", *options, "--replace", "--out", str(out), str(script),
                        *script_args],
                       check=True, cwd=script.parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
        print(f"diagnose took {time.perf_counter() - t0:.1f} s")
        claim = claim_of(json.loads((out / "report.json").read_text(encoding="utf-8")))
        print(f"claimed: {claim.text()}")
        diff_file = out / "fix.diff"
        diff = diff_file.read_text(encoding="utf-8") if diff_file.is_file() else ""
        if not claim.kept or not diff.strip() or diff_target(diff) is None:
            print("cannot time it plainly: " + ("nothing was kept" if not claim.kept else
                  "the kept fixes have no mechanical diff" if not diff.strip() else "the diff changes several files"))
            return 2
        fixed_dir = Path(tmp) / "fixed"
        shutil.copytree(script.parent, fixed_dir, ignore=shutil.ignore_patterns(out.name, "advisor-runs"))
        subprocess.run(["patch", "-s", str(fixed_dir / script.name), str(diff_file)], check=True)
        plain = [PY, str(script), *script_args]
        fixed = [PY, str(fixed_dir / script.name), *script_args]
        ratios = []
        print("| pair | load | original s | with fix.diff s | ratio |")
        print("| --- | --- | --- | --- | --- |")
        for i in range(args.pairs):
            load = os.getloadavg()[0]
            if i % 2 == 0:
                a, b = _time(plain, script.parent), _time(fixed, fixed_dir)
            else:
                b, a = _time(fixed, fixed_dir), _time(plain, script.parent)
            ratios.append(a / b)
            print(f"| {i + 1} | {load:.2f} | {a:.2f} | {b:.2f} | {a / b:.2f}x |")
        med = statistics.median(ratios)
        inside = claim.low is not None and claim.high is not None and claim.low <= med <= claim.high
        print(f"plain: {med:.2f}x median ({min(ratios):.2f}-{max(ratios):.2f}) over {len(ratios)} pairs; "
              f"claimed whole {claim.scope} {claim.whole or float('nan'):.2f}x"
              + (f" [{claim.low:.2f}-{claim.high:.2f}]: the median is {'inside' if inside else 'outside'}"
                 if claim.low and claim.high else "")
              + f"; load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
