"""Warm start vs cold start for one trial run: is a forked child as fast per step, and how much sooner does it start?

For each example (examples/<name>.py with its manifest args) this runs ``--pairs`` pairs of trial
runs exactly as the fix loop specs them (timed steps only, seeded, losses recorded), one cold
(a fresh ``python -m advisor.capture.child``) and one warm (forked from one
:class:`advisor.capture.warm.WarmServer`), alternating which goes first. Per pair it prints both
runs' median timed step, their ratio (warm / cold: above 1 means the forked child is slower per
step), the time before the first timed step (process start, imports, set-up, warm-up) and the
wall time; then the geometric mean of the ratios with its range, and the load average before
and after (on a shared machine the load moves every figure; the ratios of interleaved pairs
move much less).

Usage::

    .venv/bin/python benchmarks/warm_start.py                          # data_loading, compute_bound, tiny_model
    .venv/bin/python benchmarks/warm_start.py tiny_model --pairs 6
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zoo import EXAMPLES, load_manifest  # noqa: E402 - a sibling script, not a package

from advisor.capture.model import RunCapture, RunSpec  # noqa: E402
from advisor.capture.run import capture  # noqa: E402
from advisor.capture.warm import WarmServer  # noqa: E402
from advisor.fixes.loop.options import MIN_TRIAL_WINDOW_S, installer_modules  # noqa: E402

BEFORE_STEPS = ("process", "imports", "setup", "warmup")


def load() -> str:
    """The 1, 5 and 15 minute load averages."""
    return "load average {:.2f}, {:.2f}, {:.2f}".format(*os.getloadavg())


def trial_spec(name: str, args: list[str], out: Path) -> RunSpec:
    """A plain baseline trial run's spec, as :meth:`advisor.fixes.loop.measure.Measurer.trial_spec` builds it."""
    return RunSpec(
        script=EXAMPLES / f"{name}.py", args=tuple(args), out_dir=out, profiled_steps=0, cprofile_steps=0,
        seed=0, record_loss_steps=3, quiet=True, cwd=Path.cwd(), min_timed_s=MIN_TRIAL_WINDOW_S,
    )


def figures(cap: RunCapture, wall: float) -> tuple[float, float, float]:
    """(median timed step ms, seconds before the first timed step, wall seconds) of one run."""
    if not cap.ok or not cap.timed.step_times_ms:
        raise RuntimeError(f"{cap.run_dir}: {cap.status} {cap.error}")
    before = sum(cap.phases_s.get(p, 0.0) for p in BEFORE_STEPS)
    return statistics.median(cap.timed.step_times_ms), before, wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("examples", nargs="*", default=["data_loading", "compute_bound", "tiny_model"])
    p.add_argument("--pairs", type=int, default=4, help="cold/warm pairs per example")
    opts = p.parse_args()
    manifest = load_manifest()
    print(f"before: {load()} on {os.cpu_count()} cores", flush=True)
    summary = []
    with tempfile.TemporaryDirectory(prefix="advisor-warm-") as tmp:
        for name in opts.examples:
            spec = trial_spec(name, list(manifest[name].get("args", [])), Path(tmp) / name / "run")
            with WarmServer(spec, modules=installer_modules()) as server:
                if not server.start():
                    print(f"{name}: no warm start: {server.refused}")
                    continue
                print(f"{name}: server ready in {server.start_s:.1f} s ({load()})", flush=True)
                ratios, saved = [], []
                for k in range(opts.pairs):
                    got = {}
                    order = ("cold", "warm") if k % 2 == 0 else ("warm", "cold")
                    for kind in order:
                        run = replace(spec, out_dir=Path(tmp) / name / f"{kind}-{k}")
                        t0 = time.perf_counter()
                        cap = capture(run, warm=server if kind == "warm" else None)
                        got[kind] = figures(cap, time.perf_counter() - t0)
                    (cm, cb, cw), (wm, wb, ww) = got["cold"], got["warm"]
                    ratios.append(wm / cm)
                    saved.append(cw - ww)
                    print(f"  pair {k + 1}: step {cm:8.2f} ms cold, {wm:8.2f} ms warm = {wm / cm:.3f}x;  "
                          f"before steps {cb:5.1f} s vs {wb:5.1f} s;  wall {cw:5.1f} s vs {ww:5.1f} s  ({load()})",
                          flush=True)
            gm = math.exp(statistics.fmean(math.log(r) for r in ratios))
            line = (f"{name}: warm/cold step time {gm:.3f}x (geometric mean of {len(ratios)} pairs, range "
                    f"{min(ratios):.3f}-{max(ratios):.3f}); a warm run ends {statistics.median(saved):.1f} s sooner (median)")
            summary.append(line)
            print(line, flush=True)
    print("\n".join(summary))
    print(f"after: {load()}")


if __name__ == "__main__":
    main()
