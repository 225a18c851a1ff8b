"""A/A test of ``advisor compare``: unchanged code against itself must come out "no measurable change".

For each example, ``--pairs`` pairs of ``advisor diagnose --no-fixes`` runs of the *same* script
(short: ``--steps``/``--profile-steps``), run one after the other; each pair is compared with
``advisor compare A B`` (in-process, through :func:`advisor.api.compare_paths`) and checked
against ``--fail-on-regression PCT``. Nothing changed between the two runs, so any "faster" or
"slower" is a false alarm, and a gate that fires would fail a CI job on noise.

It prints the load average at the start and the end (on a shared machine the load moves every
figure), one row per pair, and a table per example: how many pairs said "no measurable effect",
how many "not measurable" (a run measured on a busy machine, see compare's notes), how many
called a change, whether the gate fired, and the range of the pairs' ratios. ``--markdown``
prints the table for the docs (docs/benchmarks-compare.md).

Usage::

    .venv/bin/python benchmarks/compare_aa.py                                # 20 pairs, 3 examples
    .venv/bin/python benchmarks/compare_aa.py --pairs 5 --examples tiny_model
    .venv/bin/python benchmarks/compare_aa.py --keep runs/aa                 # keep the run dirs
    .venv/bin/python benchmarks/compare_aa.py --from runs/aa                 # re-compare kept runs
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zoo import EXAMPLES, load_manifest  # noqa: E402 - a sibling script, not a package

from advisor import api  # noqa: E402
from advisor.errors import UsageError  # noqa: E402

DEFAULT_EXAMPLES = ("tiny_model", "compute_bound", "pageable_copies")
"""Three of the zoo's fastest examples on CPU (7-22 s per short diagnose on a 2-core machine)."""
NO_CHANGE = "no measurable effect"


@dataclass(frozen=True)
class Pair:
    """One A/A pair's comparison."""

    example: str
    index: int
    verdict: str
    speedup: float | None
    ci: str
    band: float | None
    contended: tuple[str, ...]
    gate_fired: bool
    gate_error: str = ""
    loads: tuple[float, ...] = ()


def load() -> str:
    """Return the 1, 5 and 15 minute load averages, in words."""
    return "load average {:.2f}, {:.2f}, {:.2f}".format(*os.getloadavg())


def diagnose(name: str, args: list[str], out: Path, steps: int, profile_steps: int, timeout: float) -> None:
    """Run one short ``advisor diagnose --no-fixes`` of ``examples/<name>.py`` into ``out``."""
    cmd = [
        sys.executable, "-m", "advisor", "diagnose", "--no-fixes", "-q", "--out", str(out),
        "--steps", str(steps), "--profile-steps", str(profile_steps), str(EXAMPLES / f"{name}.py"), *args,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if not (out / "report.json").is_file():
        raise RuntimeError(f"{name}: diagnose wrote no report (exit {done.returncode}): {done.stderr[-800:]}")


def compare_pair(name: str, index: int, a: Path, b: Path, fail_pct: float) -> Pair:
    """Compare one pair as ``advisor compare A B --fail-on-regression PCT`` would."""
    cmp = api.compare_paths(a, b)
    fired, error = False, ""
    try:
        fired = api.regression(cmp, fail_pct) is not None
    except UsageError as exc:  # no speedup: the CLI exits 2, which a CI job also reads as failure
        fired, error = True, str(exc)
    ci = "" if cmp.ci_low is None else f"[{cmp.ci_low:.2f}-{cmp.ci_high:.2f}]"
    # NOTE: each run's own load average while it ran (its report), not the load when comparing.
    loads = tuple(
        float(v) for v in (json.loads((run / "report.json").read_text())["summary"].get("load_avg") for run in (a, b))
        if v is not None
    )
    return Pair(name, index, cmp.verdict, cmp.speedup, ci, cmp.noise_band, cmp.contended, fired, error, loads)


def summarize(pairs: list[Pair]) -> list[list[str]]:
    """Return one table row per example: counts of verdicts, gate firings and the ratios' range."""
    rows = []
    for name in dict.fromkeys(p.example for p in pairs):
        group = [p for p in pairs if p.example == name]
        ratios = [p.speedup for p in group if p.speedup]
        spread = f"{min(ratios):.2f}x-{max(ratios):.2f}x" if ratios else "-"
        logs = [abs(math.log(r)) for r in ratios]
        rows.append([
            name,
            str(len(group)),
            str(sum(p.verdict == NO_CHANGE for p in group)),
            str(sum(p.verdict == "not measurable" for p in group)),
            str(sum(p.verdict in ("faster", "slower") for p in group)),
            str(sum(p.gate_fired for p in group)),
            str(sum(bool(p.contended) for p in group)),
            spread,
            f"{math.exp(max(logs)):.2f}x" if logs else "-",
            _range([v for p in group for v in p.loads]),
        ])
    return rows


HEADER = ["example", "pairs", "no measurable change", "not measurable (busy)", "change called",
          "--fail-on-regression fired", "pairs with a busy side", "A/A ratio range", "largest factor apart",
          "runs' load average"]


def _range(values: list[float]) -> str:
    return f"{min(values):.1f}-{max(values):.1f}" if values else "-"


def print_table(rows: list[list[str]], markdown: bool) -> None:
    """Print the summary as aligned text, or as a Markdown table."""
    if markdown:
        print("| " + " | ".join(HEADER) + " |")
        print("|" + "|".join(" --- " for _ in HEADER) + "|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
        return
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADER)]
    for r in (HEADER, *rows):
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))))


def main(argv: list[str] | None = None) -> int:
    """Run the A/A pairs (or re-compare kept ones) and print the verdict counts; 1 when the target is missed."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", nargs="+", default=list(DEFAULT_EXAMPLES))
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per run (diagnose --steps)")
    ap.add_argument("--profile-steps", type=int, default=2, help="profiled steps per run (diagnose --profile-steps)")
    ap.add_argument("--fail-pct", type=float, default=5.0, help="the --fail-on-regression allowance checked")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--keep", type=Path, default=None, help="keep the run directories here")
    ap.add_argument("--from", dest="source", type=Path, default=None, help="re-compare runs kept by --keep")
    ap.add_argument("--markdown", action="store_true", help="print the summary as a Markdown table")
    opts = ap.parse_args(argv)
    manifest = load_manifest()
    # NOTE: with --from the load printed is the re-compare's; the runs' own is in the table.
    print(f"start: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, {load()}" + (" (re-comparing kept runs)" if opts.source else ""),
          flush=True)
    root = opts.source or opts.keep or Path(tempfile.mkdtemp(prefix="compare-aa-"))
    pairs: list[Pair] = []
    # NOTE: pair i of every example before pair i + 1 of any: the machine's load drifts, and a
    # run stopped early still has pairs of every example.
    for i in range(1, opts.pairs + 1):
        for name in opts.examples:
            args = list(manifest[name].get("args") or [])
            a, b = root / name / f"pair{i:02d}-a", root / name / f"pair{i:02d}-b"
            if opts.source is None:
                for run in (a, b):
                    diagnose(name, args, run, opts.steps, opts.profile_steps, opts.timeout)
            elif not (b / "report.json").is_file():
                continue
            p = compare_pair(name, i, a, b, opts.fail_pct)
            pairs.append(p)
            band = "" if p.band is None else f"band x{1 + p.band:.2g}"
            print(f"{name:16} pair {i:2}: {p.speedup or float('nan'):.2f}x {p.ci} {p.verdict:22} {band:10} "
                  f"busy: {','.join(p.contended) or '-':12} gate: {'FIRED' if p.gate_fired else 'quiet'} "
                  f"{p.gate_error}  ({load()})", flush=True)
    print(f"end: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, {load()}")
    print(f"runs in {root}")
    print()
    print_table(summarize(pairs), opts.markdown)
    missed = [
        name for name in dict.fromkeys(p.example for p in pairs)
        if sum(p.verdict in ("faster", "slower") for p in pairs if p.example == name)
        > len([p for p in pairs if p.example == name]) // 20
        or any(p.gate_fired for p in pairs if p.example == name)
    ]
    if missed:
        print(f"target missed (at least 19 of 20 without a change called, the gate never firing): {', '.join(missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
