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
    .venv/bin/python benchmarks/time_to_verdict.py data_loading --compare   # before/after side by side
    .venv/bin/python benchmarks/time_to_verdict.py --against ../old/.venv/bin/advisor   # an older checkout
    .venv/bin/python benchmarks/time_to_verdict.py data_loading --against ../before    # a worktree's sources

``--compare`` runs each example twice in the same session, with the loop's time cuts (Amdahl
skips, sequential stops, warm-up read from the baseline) and with ``--exhaustive`` (every fix,
every round, full warm-up: the loop as it was before them), alternating which goes first, and
prints both rows, their ratio and whether they kept the same fixes. ``--against EXE`` does the
same with another advisor executable (an older checkout's ``.venv/bin/advisor``: the loop as it
was before a change, measured in the same run; its report may lack ``timing``, and then its row
gives the wall time), or with a checkout's directory (``git worktree add ../before HEAD~3``:
its sources run with this interpreter). Every diagnose runs in the temporary folder, not the
repository root, where ``python -m advisor`` would import the current checkout whatever was asked. ``--starts`` does the same
with ``--cold-start`` (every trial run a fresh interpreter) against the default warm start
(trial runs forked from a server that imported torch once). Every row also gives the CPU time
advisor and all its processes used (user + system, from ``getrusage``): on a shared machine it
moves much less with the load than the wall time does.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zoo import REPO, compile_advisor, load, load_manifest, run_advisor  # noqa: E402 - a sibling script, not a package

from advisor.report.style import OVERHEAD_PHASES  # noqa: E402 - after the sibling import, as zoo's


def cpu_s() -> float:
    """User + system CPU seconds of every child process waited for so far (advisor and its descendants)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


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
        "warm_runs": (timing.get("starts") or {}).get("warm", 0),
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
    cpu = f"  cpu {r['cpu_s']:>6.1f}s" if r.get("cpu_s") is not None else ""
    return (
        f"{r['example']:<20} {r['total_s']:>7.1f}s{cpu}  capture {r['capture_s'] or 0:>6.1f}s  "
        f"{r['trial_runs']:>3} trial runs ({r.get('warm_runs', 0)} warm) {r['trials_s'] or 0:>7.1f}s  overhead {share:>4}  "
        f"(largest: {r['largest_overhead']})  kept: {'+'.join(r['kept']) or '-'}  [{verdicts}]"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("examples", nargs="*", help="example names (default: every one in the manifest)")
    p.add_argument("--repeats", type=int, default=3, help="--repeats passed to advisor diagnose")
    p.add_argument("--timeout", type=float, default=3600.0, help="per example, seconds")
    p.add_argument("--json", type=Path, help="also write the rows as JSON here")
    p.add_argument("--compare", action="store_true",
                   help="also run each example with --exhaustive (the loop without its time cuts), side by side")
    p.add_argument("--starts", action="store_true",
                   help="also run each example with --cold-start (no warm start), side by side")
    p.add_argument("--against", metavar="EXE_OR_DIR",
                   help="also run each example with this advisor, side by side: an executable (an older "
                        "checkout's venv's advisor) or a checkout's directory (its sources, e.g. a git worktree)")
    p.add_argument("--budget", type=float, default=None, help="--budget passed to advisor diagnose")
    opts = p.parse_args()
    manifest = load_manifest()
    names = opts.examples or [n for n in manifest if not manifest[n].get("skip")]
    unknown = [n for n in names if n not in manifest]
    if unknown:
        p.error(f"unknown example(s) {', '.join(unknown)}; known: {', '.join(manifest)}")
    compile_advisor(REPO, *([Path(opts.against)] if opts.against and Path(opts.against).is_dir() else []))
    print(f"before: {load()}", flush=True)
    others = [("exhaustive", ["--exhaustive"])] if opts.compare else []
    others += [("cold", ["--cold-start"])] if opts.starts else []
    others += [("before", [])] if opts.against else []
    rows: dict[str, list[dict]] = {mode: [] for mode in ("now", *(m for m, _ in others))}
    base = ["--repeats", str(opts.repeats)] + ([] if opts.budget is None else ["--budget", str(opts.budget)])
    with tempfile.TemporaryDirectory(prefix="advisor-ttv-") as tmp:
        for i, name in enumerate(names):
            args = list(manifest[name].get("args", []))
            modes = [("now", base), *((m, [*base, *extra]) for m, extra in others)]
            if i % 2:  # alternate the order: drift of the machine must not favour one side
                modes.reverse()
            got: dict[str, dict] = {}
            for mode, extra in modes:
                cpu0 = cpu_s()
                try:
                    exe = opts.against if mode == "before" else None
                    report, wall = run_advisor(name, args, Path(tmp), extra, opts.timeout, exe)
                except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
                    print(f"{name:<20} {mode}: failed: {exc}", flush=True)
                    continue
                got[mode] = row(name, report, wall) | {"mode": mode, "load": load(), "cpu_s": round(cpu_s() - cpu0, 1)}
                rows[mode].append(got[mode])
                print(f"{mode:<10} " + show(got[mode]) + f"  ({got[mode]['load']})", flush=True)
            for mode, _ in others:
                if "now" in got and mode in got:
                    a, b = got["now"], got[mode]
                    same = "same kept fixes" if sorted(a["kept"]) == sorted(b["kept"]) else (
                        f"DIFFERENT kept fixes: {'+'.join(a['kept']) or '-'} vs {'+'.join(b['kept']) or '-'}")
                    print(f"{'':<10} {name}: {a['total_s']:.1f}s vs {b['total_s']:.1f}s {mode} "
                          f"= {a['total_s'] / b['total_s']:.2f}x the time, cpu {a['cpu_s']:.1f}s vs {b['cpu_s']:.1f}s "
                          f"= {a['cpu_s'] / max(b['cpu_s'], 1e-9):.2f}x, {a['trial_runs']} vs "
                          f"{b['trial_runs']} trial runs; {same}", flush=True)
    for mode, rs in rows.items():
        if not rs:
            continue
        total = sum(r["total_s"] for r in rs)
        overhead = sum((r["overhead_share"] or 0.0) * r["total_s"] for r in rs)
        label = "zoo total" if mode == "now" else f"{mode} total"
        print(f"{label} {total:.1f}s, cpu {sum(r['cpu_s'] for r in rs):.1f}s over {len(rs)} example(s), "
              f"overhead {overhead / total:.0%}")
    print(f"after: {load()}")
    if opts.json:
        out = {"rows": rows["now"], **{m: rs for m, rs in rows.items() if m != "now"}, "load": load()}
        opts.json.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
