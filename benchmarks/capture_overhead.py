"""What does a capture cost? Wall time of a capture vs the same steps run plainly, side by side.

For a script that takes ``--steps N``, runs (interleaved, ``--repeats`` times each):

* plain:   ``python SCRIPT --steps N``, N = warm-up + timed + profiled + cProfile steps;
* capture: ``advisor.capture.run.capture`` of the same script and arguments with the default
  phases, which stops the script after those same N steps.

Both include interpreter start-up and the script's own set-up. Prints each run's wall time and
CPU time (user+sys of the child processes, less sensitive to other load on a shared machine),
the medians and the ratios capture/plain. Not a test: numbers depend on the machine (2 shared cores here).

    .venv/bin/python benchmarks/capture_overhead.py [--script examples/data_loading.py]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from advisor.capture.model import RunSpec
from advisor.capture.phases import Phases
from advisor.capture.run import capture

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--script", type=Path, default=REPO / "examples" / "data_loading.py")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--warmup", type=int, default=RunSpec.warmup_steps)
    p.add_argument("--timed", type=int, default=RunSpec.timed_steps)
    p.add_argument("--profiled", type=int, default=RunSpec.profiled_steps)
    p.add_argument("extra", nargs="*", help="more arguments for the script (after --)")
    a = p.parse_args()

    phases = Phases.for_spec(RunSpec(script=a.script, warmup_steps=a.warmup,
                                     timed_steps=a.timed, profiled_steps=a.profiled))
    steps = phases.total
    args = ("--steps", str(steps), *a.extra)
    print(f"script: {a.script.relative_to(REPO) if a.script.is_relative_to(REPO) else a.script}")
    print(f"steps: {steps} (warm-up {a.warmup}, timed {a.timed}, profiled {a.profiled}, "
          f"cProfile {phases.cprofile}); repeats: {a.repeats}, interleaved")
    plain: list[float] = []
    captured: list[float] = []
    plain_cpu: list[float] = []
    captured_cpu: list[float] = []
    with tempfile.TemporaryDirectory(prefix="advisor-bench-") as tmp:
        for i in range(a.repeats):
            c, t = _children_cpu(), time.perf_counter()
            subprocess.run([sys.executable, str(a.script), *args], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            plain.append(time.perf_counter() - t)
            plain_cpu.append(_children_cpu() - c)

            spec = RunSpec(script=a.script, args=args, out_dir=Path(tmp) / f"run{i}",
                           warmup_steps=a.warmup, timed_steps=a.timed, profiled_steps=a.profiled)
            c, t = _children_cpu(), time.perf_counter()
            result = capture(spec)
            captured.append(time.perf_counter() - t)
            captured_cpu.append(_children_cpu() - c)
            if result.steps_seen != steps:
                raise SystemExit(f"capture saw {result.steps_seen} steps, expected {steps} "
                                 f"(status {result.status}); see {spec.out_dir}")
            timed = result.timed
            step_ms = statistics.median(timed.step_times_ms) if timed.step_times_ms else float("nan")
            trace_mb = sum((Path(result.run_dir) / f).stat().st_size for f in result.trace_files) / 1e6
            print(f"  repeat {i + 1}: plain {plain[-1]:6.2f} s (cpu {plain_cpu[-1]:5.2f} s) | "
                  f"capture {captured[-1]:6.2f} s (cpu {captured_cpu[-1]:5.2f} s; status {result.status}, first step after {timed.time_to_first_step_s:.2f} s, "
                  f"timed step median {step_ms:.1f} ms, trace {trace_mb:.1f} MB)")
    mp, mc = statistics.median(plain), statistics.median(captured)
    print(f"median wall: plain {mp:.2f} s, capture {mc:.2f} s -> ratio {mc / mp:.2f}x "
          f"(+{mc - mp:.2f} s)")
    pc, cc = statistics.median(plain_cpu), statistics.median(captured_cpu)
    print(f"median cpu:  plain {pc:.2f} s, capture {cc:.2f} s -> ratio {cc / pc:.2f}x "
          f"(+{cc - pc:.2f} s)")


def _children_cpu() -> float:
    """User+sys seconds of this process's waited-for children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
