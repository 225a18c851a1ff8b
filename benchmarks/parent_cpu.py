"""How much CPU advisor's own parent process takes while it times a script, beside idle processes.

While a run is measured, advisor's parent samples the run's process tree (utilisation, the memory
watchdog, its own CPU). Whatever that costs comes out of the cores the script is being timed on.
This diagnoses an example with ``--sleepers`` idle processes on the machine (``sleep``: a desktop
runs hundreds), reads the parent's own CPU time from ``/proc/PID/stat`` until it exits (not its
children's), and prints it as a share of one core over the diagnose's wall time. With
``--against DIR`` it does the same with advisor imported from another checkout (``git worktree
add ../before HEAD~1``), the two in turn, ``--repeats`` pairs, so the figures are side by side.
The load average is printed before and after.

Usage::

    .venv/bin/python benchmarks/parent_cpu.py [--sleepers 600] [--repeats 2] [--against ../before] [--example data_loading]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def load() -> str:
    """Return the load averages, for the head and foot of the output."""
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def own_cpu_s(pid: int) -> float | None:
    """User + system seconds of ``pid`` alone (its children's are not counted), None once gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def diagnose(checkout: Path, example: str, out: Path) -> tuple[float, float, int]:
    """Diagnose ``example`` with advisor from ``checkout``; return (parent CPU s, wall s, exit code)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    cmd = [sys.executable, "-m", "advisor", "diagnose", "--out", str(out), f"{example}.py"]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO / "examples", env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cpu = 0.0
    while proc.poll() is None:
        cpu = own_cpu_s(proc.pid) or cpu  # the last reading before it exits
        time.sleep(0.05)
    return cpu, time.perf_counter() - start, proc.returncode


def main(argv: list[str] | None = None) -> int:
    """Run the pairs and print one line per diagnose and a summary per checkout."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sleepers", type=int, default=600, help="idle processes started beside the diagnose")
    parser.add_argument("--repeats", type=int, default=2, help="diagnoses per checkout, in turn")
    parser.add_argument("--against", type=Path, help="another checkout to time in turn with this one")
    parser.add_argument("--example", default="data_loading", help="the example under examples/ to diagnose")
    args = parser.parse_args(argv)
    checkouts = {"this checkout": REPO, **({f"{args.against.name}": args.against.resolve()} if args.against else {})}
    print(f"before: {load()} on {os.cpu_count()} cores; {args.sleepers} idle processes beside", flush=True)
    sleepers = [subprocess.Popen(["sleep", "3600"]) for _ in range(args.sleepers)]
    shares: dict[str, list[float]] = {name: [] for name in checkouts}
    try:
        with tempfile.TemporaryDirectory(prefix="advisor-parent-cpu-") as tmp:
            for i in range(args.repeats):
                for name, checkout in checkouts.items():
                    cpu, wall, rc = diagnose(checkout, args.example, Path(tmp) / f"{name.replace(' ', '_')}-{i}")
                    shares[name].append(cpu / wall)
                    print(f"{name:>16}  run {i + 1}: parent CPU {cpu:6.2f} s over {wall:5.1f} s "
                          f"({100 * cpu / wall:4.1f}% of a core), exit {rc}", flush=True)
    finally:
        for proc in sleepers:
            proc.kill()
        for proc in sleepers:
            proc.wait()
    for name, values in shares.items():
        print(f"{name:>16}  {100 * min(values):.1f}-{100 * max(values):.1f}% of a core")
    print(f"after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
