"""The whole-run projection against the script's plain wall time and a plain cProfile (issue 29).

For each round, one after the other on the same machine:

1. ``python SCRIPT`` with nothing attached: its wall time, and the share the script timed itself
   when it prints a ``self-timed share: 0.4170`` line (``periodic_eval.py`` does: the truth no
   profiler bends; cProfile slows the training step's Python more than the evaluation's);
2. ``python -m cProfile SCRIPT``: the share of its wall time inside the periodic function
   (cumulative time of ``--function`` over the script's ``<module>``);
3. ``advisor diagnose --no-fixes SCRIPT`` (stopped after its phases, as a user runs it): the
   projected whole run, the periodic share, the step source and HB002;
4. ``python SCRIPT`` again: the projection is set against the mean of the two plain runs that
   bracket it, and ``plain again`` (the second plain run against the first) is the error a
   perfect projection would still show on this machine: its own drift over a round.

Prints one row per round with the load average before it, then the medians. The script's
default is ``tests/scripts/periodic_eval.py`` (evaluation at iteration 0 and every 50 of 1,000).
``--metric`` and ``--rule`` check another share of the projection against cProfile's, as
sampling without a KV cache (issue 29 item 3)::

    .venv/bin/python benchmarks/projection.py --rounds 3
    .venv/bin/python benchmarks/projection.py --script tests/scripts/char_generate.py \
        --args "nocache 1000 20 200" --function generate --metric generation_frac --rule HB003
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable


def _run(cmd: list[str], cwd: Path | None = None) -> float:
    return _run_out(cmd, cwd)[0]


def _run_out(cmd: list[str], cwd: Path | None = None) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=cwd, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    return time.perf_counter() - t0, done.stdout


def self_timed(stdout: str) -> float | None:
    """The share the script timed itself (a ``self-timed share: 0.4170`` line), when it prints one."""
    found = re.findall(r"^self-timed share: ([0-9.]+)$", stdout, flags=re.M)
    return float(found[-1]) if found else None


def cprofile_share(script: Path, args: list[str], function: str, out: Path) -> float:
    """Share of the script's ``<module>`` time inside ``function`` under a plain cProfile."""
    _run([PY, "-m", "cProfile", "-o", str(out), str(script), *args])
    stats = pstats.Stats(str(out)).stats  # type: ignore[attr-defined]
    total = max(v[3] for k, v in stats.items() if k[2] == "<module>" and k[0] == str(script))
    inside = sum(v[3] for k, v in stats.items() if k[2] == function and k[0] == str(script))
    return inside / total


def advisor_projection(script: Path, args: list[str], out: Path, metric: str, rule: str) -> dict[str, object]:
    """Diagnose without fixes; return the projection's figures from its report."""
    _run([PY, "-m", "advisor", "diagnose", "--no-fixes", "--out", str(out), str(script), *args])
    report = json.loads(subprocess.run(
        [PY, "-m", "advisor", "report", str(out), "--format", "json"], check=True, capture_output=True,
        text=True, env={**os.environ, "PYTHONPATH": str(REPO)}).stdout)
    summary = report["summary"]
    return {
        "projected_s": summary["projected_run_s"], "share": summary[metric],
        "source": report["run"]["step_source"],
        "fired": any(f["code"] == rule for f in report["findings"]),
    }


def main() -> None:
    """Run the rounds and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--script", type=Path, default=REPO / "tests" / "scripts" / "periodic_eval.py")
    ap.add_argument("--args", default="", help="the script's arguments, as one shell-quoted string")
    ap.add_argument("--function", default="estimate_loss")
    ap.add_argument("--metric", default="periodic_work_frac", help="the advisor share set against cProfile's")
    ap.add_argument("--rule", default="HB002", help="the rule whose firing is reported")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    script = args.script.resolve()
    script_args = shlex.split(args.args)
    rows = []
    print(f"| round | load | plain s | plain again | projected s | error | self-timed share | cProfile share "
          f"| advisor share | source | {args.rule} |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            load = os.getloadavg()[0]
            first, out = _run_out([PY, str(script), *script_args])
            own = self_timed(out)
            share = cprofile_share(script, script_args, args.function, Path(tmp) / f"p{i}.pstats")
            got = advisor_projection(script, script_args, Path(tmp) / f"run{i}", args.metric, args.rule)
            second, out = _run_out([PY, str(script), *script_args])
            owns = [x for x in (own, self_timed(out)) if x is not None]
            own = statistics.fmean(owns) if owns else None
            plain, again = (first + second) / 2, second / first - 1
            err = (got["projected_s"] or 0) / plain - 1
            rows.append((plain, again, got["projected_s"], err, own if own is not None else float("nan"), share,
                         got["share"]))
            print(f"| {i + 1} | {load:.1f} | {plain:.1f} | {again:+.0%} | {got['projected_s']:.1f} | {err:+.0%} | "
                  f"{'—' if own is None else f'{own:.1%}'} | {share:.1%} | {got['share']:.1%} | {got['source']} | {got['fired']} |")
    med = [statistics.median(col) for col in zip(*rows, strict=True)]
    spread = statistics.median(abs(r[1]) for r in rows)
    print(f"| median | | {med[0]:.1f} | ±{spread:.0%} | {med[2]:.1f} | {med[3]:+.0%} | {med[4]:.1%} | {med[5]:.1%} "
          f"| {med[6]:.1%} | | |")


if __name__ == "__main__":
    main()
