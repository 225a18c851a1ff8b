"""Does a capture's timed window run like the script run plainly? Step time and page faults, side by side.

For each script, interleaved ``--repeats`` times (the order rotating every round):

* plain: ``python -P`` runs a ten-line harness that imports nothing of advisor, runs the script
  with ``runpy`` and, at each ``torch.optim`` step, reads the clock and ``getrusage``; the
  window is the same steps a capture times (after the same warm-up);
* capture: ``advisor.capture.run.capture`` with the default phases (this tree), and, with
  ``--against DIR``, the same with another checkout's sources (``git worktree add``), each
  reading its window from ``capture.json`` (``timed.step_times_ms``, and ``kernel`` where the
  tree records it).

Per run it prints the median timed step, the window's minor page faults per step and the share
of its CPU time spent in the kernel; then per variant the medians and the ratio of each median
step to the plain one. A capture that changes the process (a profiler run before the timed steps
raises glibc malloc's mmap threshold: :mod:`advisor.capture.budget`) shows here as a step time
and a fault count the plain run does not have. The load average is printed before and after.

    .venv/bin/python benchmarks/capture_fidelity.py /tmp/own/train.py examples/compute_bound.py --repeats 4
    .venv/bin/python benchmarks/capture_fidelity.py examples/compute_bound.py --against ../before
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from zoo import load  # noqa: E402 - a sibling script, not a package

WARMUP, TIMED = 5, 20  # RunSpec's defaults; checked against it in main()

HARNESS = """
import resource, runpy, sys, time, json
from torch.optim.optimizer import register_optimizer_step_post_hook
marks = []
def hook(*_):
    r = resource.getrusage(resource.RUSAGE_SELF)
    marks.append((time.perf_counter(), r.ru_minflt, r.ru_utime, r.ru_stime))
register_optimizer_step_post_hook(hook)
out, script = sys.argv[1], sys.argv[2]
sys.argv = sys.argv[2:]
sys.path.insert(0, __import__("os").path.dirname(script))
try:
    runpy.run_path(script, run_name="__main__")
finally:
    json.dump(marks, open(out, "w"))
"""

CAPTURE = """
import json, sys
from advisor.capture.model import RunSpec
from advisor.capture.run import capture
cap = capture(RunSpec(script=sys.argv[2], args=tuple(sys.argv[3:]), out_dir=sys.argv[1]))
k = getattr(cap, "kernel", None)
json.dump({"steps_ms": list(cap.timed.step_times_ms),
           "kernel": None if k is None else [k.steps, k.minor_faults, k.user_s, k.system_s]},
          open(sys.argv[1] + ".json", "w"))
"""


def plain(script: Path, args: list[str], tmp: Path) -> dict:
    out = tmp / "plain.json"
    subprocess.run([sys.executable, "-P", "-c", HARNESS, str(out), str(script), *args], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=script.parent)
    marks = json.loads(out.read_text())[WARMUP - 1: WARMUP + TIMED]
    if len(marks) < TIMED + 1:
        raise SystemExit(f"{script}: fewer than {WARMUP + TIMED} optimizer steps")
    steps = [(b[0] - a[0]) * 1000 for a, b in zip(marks, marks[1:], strict=False)]
    (_, f0, u0, s0), (_, f1, u1, s1) = marks[0], marks[-1]
    return {"step_ms": statistics.median(steps), "faults": (f1 - f0) / TIMED, "kernel": (s1 - s0) / max(1e-9, u1 - u0 + s1 - s0)}


def captured(tree: Path, script: Path, args: list[str], tmp: Path) -> dict:
    out = tmp / f"cap-{len(list(tmp.iterdir()))}"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, "-P", "-c", CAPTURE, str(out), str(script), *args], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp)
    got = json.loads(Path(str(out) + ".json").read_text())
    row = {"step_ms": statistics.median(got["steps_ms"]), "faults": None, "kernel": None}
    if got["kernel"]:
        steps, faults, user, system = got["kernel"]
        row.update(faults=faults / max(1, steps), kernel=system / max(1e-9, user + system))
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scripts", nargs="+", type=Path)
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--against", type=Path, default=None, help="another checkout whose capture runs beside this one")
    a = p.parse_args()
    from advisor.capture.model import RunSpec

    assert (RunSpec.warmup_steps, RunSpec.timed_steps) == (WARMUP, TIMED), "the harness's window must be the capture's"
    variants = {"plain": None, "capture (this tree)": REPO}
    if a.against is not None:
        variants[f"capture ({a.against})"] = a.against.resolve()
    print(load())
    for script in a.scripts:
        script = script.resolve()
        rows: dict[str, list[dict]] = {name: [] for name in variants}
        names = list(variants)
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(a.repeats):
                for name in names[r % len(names):] + names[: r % len(names)]:
                    tree = variants[name]
                    row = plain(script, [], Path(tmp)) if tree is None else captured(tree, script, [], Path(tmp))
                    rows[name].append(row)
                    faults = "n/a" if row["faults"] is None else f"{row['faults']:,.0f}"
                    kernel = "n/a" if row["kernel"] is None else f"{row['kernel']:.1%}"
                    print(f"  {script.name:24s} round {r + 1}  {name:28s} step {row['step_ms']:7.2f} ms"
                          f"  faults/step {faults:>7s}  kernel {kernel:>6s}", flush=True)
        base = statistics.median(x["step_ms"] for x in rows["plain"])
        print(f"{script.name}: medians over {a.repeats} rounds")
        for name, got in rows.items():
            step = statistics.median(x["step_ms"] for x in got)
            faults = [x["faults"] for x in got if x["faults"] is not None]
            fault_text = f"{statistics.median(faults):,.0f}" if faults else "n/a"
            print(f"  {name:28s} step {step:7.2f} ms  x{step / base:.2f} of plain  faults/step {fault_text}")
    print(load())


if __name__ == "__main__":
    main()
