"""Does a training script's allocator give its memory back to the kernel every step? Timed plainly.

Runs a script as written and with glibc's malloc told to keep freed memory
(``MALLOC_TRIM_THRESHOLD_`` and ``MALLOC_MMAP_THRESHOLD_``), in turn, ``--pairs`` times each.
It prints, per run, the wall time, the system time and the minor page faults of the whole
process tree (``os.wait4``), then the medians and the median of the pair ratios, with the
load average before and after.

Why: a CPU PyTorch process whose per-step buffers fall outside malloc's heap (or are trimmed
from its top) maps fresh zeroed pages every step. On a script of ours it took 145,000-194,000
faults in 50 steps, 0.2-0.45 s of system time in 0.7-1.1 s, in some runs and none in others.
advisor records none of this yet; this script is the evidence for that, outside advisor.

Usage (from the script's folder, as a user runs it)::

    python benchmarks/allocator_churn.py [--pairs 8] train.py [script args]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

TUNED = {"MALLOC_TRIM_THRESHOLD_": str(4 << 30), "MALLOC_MMAP_THRESHOLD_": str(32 << 20)}
"""Keep up to 4 GiB free at the heap's top; map nothing under 32 MiB (glibc's largest threshold) apart."""


def run(cmd: list[str], env: dict[str, str]) -> dict[str, float]:
    """One run: wall seconds, and the system seconds and minor faults of the processes it reaped."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode(errors='replace').strip()[-300:]}")
    sys_s, faults = _children_usage()
    return {"wall_s": wall, "sys_s": sys_s, "faults": faults}


_last = [0.0, 0]


def _children_usage() -> tuple[float, int]:
    """System seconds and minor faults of the children reaped since the last call (their own children included)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    delta = (ru.ru_stime - _last[0], ru.ru_minflt - _last[1])
    _last[0], _last[1] = ru.ru_stime, ru.ru_minflt
    return delta


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=8, help="runs of each, in turn")
    p.add_argument("script", help="the training script")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    opts = p.parse_args()
    cmd = [sys.executable, opts.script, *opts.args]
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)
    _children_usage()
    runs: dict[str, list[dict[str, float]]] = {"as written": [], "malloc keeps": []}
    for k in range(opts.pairs):
        order = ("as written", "malloc keeps") if k % 2 == 0 else ("malloc keeps", "as written")
        for kind in order:
            env = dict(os.environ) if kind == "as written" else {**os.environ, **TUNED}
            r = run(cmd, env)
            runs[kind].append(r)
            print(f"{k + 1:2d} {kind:12s} wall {r['wall_s']:6.2f} s  system {r['sys_s']:5.2f} s  "
                  f"minor faults {r['faults']:9,d}", flush=True)
    for kind, rs in runs.items():
        print(f"{kind:12s} median wall {statistics.median(r['wall_s'] for r in rs):.2f} s, system "
              f"{statistics.median(r['sys_s'] for r in rs):.2f} s, faults {statistics.median(r['faults'] for r in rs):,.0f}")
    ratios = [a["wall_s"] / b["wall_s"] for a, b in zip(runs["as written"], runs["malloc keeps"], strict=True)]
    print(f"as written / malloc keeps, wall: median {statistics.median(ratios):.2f}x "
          f"(pairs {min(ratios):.2f}-{max(ratios):.2f})")
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
