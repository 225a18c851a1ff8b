"""Scoreboard for the example zoo: advisor's diagnosis and fixes vs each hand-fixed twin.

For every example named in examples/expected.json this:

1. times the example and its hand-fixed twin (examples/fixed/<name>.py) *plainly*, side by side,
   interleaved (A B, B A, ...), parsing each run's final ``done: N steps, X samples/s`` line;
2. runs ``advisor diagnose --format json -o <file> [advisor_args] examples/<name>.py [args]`` and reads the
   report: primary category, the kept fixes' trial (the combined trial of the kept fixes, else
   the one kept fix's trial) with its baseline and after samples/s and speedup, and how long the
   advisor took (with nothing kept, both rates are the diagnose run's);
3. prints one table row per example: expected vs found primary category (the expectation for the
   device the run used), baseline and best samples/s, the advisor's speedup, the twin's speedup
   and the advisor's wall time.

A failing example never stops the table: its row says ``failed`` and why.

Usage::

    .venv/bin/python benchmarks/zoo.py                    # all examples, unsafe fixes allowed
    .venv/bin/python benchmarks/zoo.py data_loading tiny_model --repeats 5
    .venv/bin/python benchmarks/zoo.py --no-advisor       # only plain vs twin timings
    .venv/bin/python benchmarks/zoo.py --no-fixes         # diagnosis only (fast)
    .venv/bin/python benchmarks/zoo.py -o zoo.md --json zoo.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
MANIFEST = EXAMPLES / "expected.json"
DONE = re.compile(r"^done: (\d+) steps, ([0-9.]+) samples/s", re.M)


@dataclass
class Row:
    """One example's line in the scoreboard (None where not measured)."""

    name: str
    device: str = ""
    expected: str | None = None
    found: str | None = None
    match: bool | None = None
    baseline_sps: float | None = None
    best_sps: float | None = None
    speedup: float | None = None
    kept: list[str] = field(default_factory=list)
    plain_sps: float | None = None
    twin_sps: float | None = None
    twin_speedup: float | None = None
    advisor_s: float | None = None
    status: str = "ok"
    reason: str = ""


def load() -> str:
    """The 1-, 5- and 15-minute load averages and the core count, as the benchmarks print them."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} cores"


def compile_advisor(*trees: Path) -> None:
    """Byte-compile each checkout's ``advisor`` package, as an installation has it (pip compiles a wheel's modules).

    Where ``PYTHONDONTWRITEBYTECODE`` is set (this project's machine), every fresh process of a
    tree without bytecode compiles the advisor modules it imports: all 236 took 0.80 s against
    0.55 s compiled, a handicap for one side of a comparison only.
    """
    for tree in trees:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "advisor")], check=True,
                       stdout=subprocess.DEVNULL)


def load_manifest() -> dict:
    """Name -> manifest entry, from examples/expected.json."""
    return json.loads(MANIFEST.read_text(encoding="utf-8"))["examples"]


def detect_device() -> str:
    """'gpu' when torch sees CUDA, else 'cpu' (the examples' ``--device auto`` does the same)."""
    try:
        import torch

        return "gpu" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def run_plain(script: Path, args: list[str], timeout: float) -> float:
    """Run a script plainly; return the samples/s its ``done:`` line reports."""
    proc = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True,
        timeout=timeout, cwd=REPO, env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{script.name} exited {proc.returncode}: {tail[:200]}")
    m = DONE.search(proc.stdout)
    if not m:
        raise RuntimeError(f"{script.name} printed no 'done: ... samples/s' line")
    return float(m.group(2))


def time_twins(name: str, args: list[str], repeats: int, timeout: float) -> tuple[float, float, float]:
    """Interleaved plain/twin timings; return (median plain, median twin, median paired ratio)."""
    plain, twin = [], []
    for i in range(repeats):
        # Alternate which goes first (A B, B A, ...) so drift in machine load cancels out.
        order = [(plain, EXAMPLES / f"{name}.py"), (twin, EXAMPLES / "fixed" / f"{name}.py")]
        for out, script in order if i % 2 == 0 else order[::-1]:
            out.append(run_plain(script, args, timeout))
    ratios = [t / p for p, t in zip(plain, twin, strict=True) if p > 0]
    return statistics.median(plain), statistics.median(twin), statistics.median(ratios)


def best_after_fixes(report: dict) -> tuple[float | None, float | None, float | None, list[str]]:
    """(baseline samples/s, best samples/s, speedup, kept fix ids) for the fixes advisor kept.

    The kept set's measurement is :attr:`advisor.report.model.Report.kept_trial`. Its baseline
    is that trial's own (interleaved, unprofiled) baseline runs, so the row's two rates and its
    speedup agree; the diagnose run's rate (``run.samples_per_s``) is used only when nothing was
    kept.
    """
    from advisor._serde import from_dict
    from advisor.report.model import Report

    kept = list(report.get("kept_fixes") or [])
    run_rate = (report.get("run") or {}).get("samples_per_s")
    if not kept:
        return run_rate, run_rate, 1.0, []
    trial = from_dict(Report, report).kept_trial
    if trial is None:
        return run_rate, None, None, kept
    base = trial.baseline_samples_per_s or run_rate
    return base, trial.samples_per_s, trial.speedup, kept


def run_group(
    cmd: list[str], timeout: float, cwd: Path = REPO, env: dict[str, str] | None = None,
    interrupt_grace: float | None = None,
) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own process group; on timeout kill the whole group (advisor's trial children too).

    ``interrupt_grace``: on timeout first send the group a Ctrl-C, as a terminal does, and give it
    that many seconds to save what it measured before the kill. The TimeoutExpired raised then
    carries what the command wrote (``output``, ``stderr``).
    """
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env,
        process_group=0,  # its own group in our session: a session of its own is scheduled apart
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = err = None
        if interrupt_grace is not None:
            _signal_group(proc.pid, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                out, err = proc.communicate(timeout=interrupt_grace)
        _signal_group(proc.pid, signal.SIGKILL)  # whatever of the group is left
        if proc.returncode is None:
            out, err = proc.communicate()
        raise subprocess.TimeoutExpired(cmd, timeout, output=out, stderr=err) from exc
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def run_advisor(
    name: str, args: list[str], out_dir: Path, advisor_args: list[str], timeout: float, exe: str | None = None,
) -> tuple[dict, float]:
    """Run ``advisor diagnose`` on one example; return (JSON report, wall seconds).

    ``exe`` is another advisor to run (an older checkout's, for a before/after): an executable, or
    a checkout's directory, whose sources are imported (``python -P -m advisor`` with it on
    ``PYTHONPATH``); by default the one installed beside this interpreter. It runs in ``out_dir``:
    from the repository root, ``python -m advisor`` (and the capture child advisor starts the same
    way) would import the current checkout instead of the one asked for.
    """
    run_dir = out_dir / name
    json_path = out_dir / f"{name}.json"
    shutil.rmtree(run_dir, ignore_errors=True)
    json_path.unlink(missing_ok=True)
    env = None
    if exe is not None and Path(exe).is_dir():
        prefix = [sys.executable, "-P", "-m", "advisor"]
        env = {**os.environ, "PYTHONPATH": str(Path(exe).resolve())}
    else:
        prefix = [exe or shutil.which("advisor", path=str(Path(sys.executable).parent)) or "advisor"]
    cmd = [
        *prefix, "diagnose", "--format", "json", "-o", str(json_path), "--out", str(run_dir), "-q",
        *advisor_args, str(EXAMPLES / f"{name}.py"), *args,
    ]
    t0 = time.perf_counter()
    proc = run_group(cmd, timeout, cwd=out_dir, env=env)
    wall = time.perf_counter() - t0
    if not json_path.is_file():
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"advisor exited {proc.returncode} without a report: {tail[:200]}")
    report = json.loads(json_path.read_text(encoding="utf-8"))
    status = (report.get("run") or {}).get("status")
    if proc.returncode == 3 or status in ("crashed", "timeout", "no_steps"):
        error = (report.get("run") or {}).get("error") or status
        raise RuntimeError(f"script failed under advisor ({error})")
    return report, wall


def score(name: str, entry: dict, opts: argparse.Namespace, device: str) -> Row:
    """Measure one example; never raises (a failure is recorded in the row)."""
    row = Row(name=name, device=device, expected=entry["expected"].get(device))
    args = list(entry.get("args", []))
    try:
        if not opts.no_twins:
            row.plain_sps, row.twin_sps, row.twin_speedup = time_twins(
                name, args, opts.repeats, opts.timeout
            )
        if not opts.no_advisor:
            report, row.advisor_s = run_advisor(
                name, args, opts.out, [*opts.advisor_args, *entry.get("advisor_args", [])], opts.timeout
            )
            primary = report.get("primary") or {}
            row.found = primary.get("category")
            row.device = "gpu" if (report.get("run") or {}).get("environment", {}).get(
                "device", "cpu"
            ).startswith("cuda") else device
            row.expected = entry["expected"].get(row.device)
            row.match = None if row.expected is None else row.found == row.expected
            row.baseline_sps, row.best_sps, row.speedup, row.kept = best_after_fixes(report)
    except subprocess.TimeoutExpired as exc:
        row.status, row.reason = "failed", f"timed out after {exc.timeout:.0f} s"
    except (RuntimeError, OSError, ValueError) as exc:
        row.status, row.reason = "failed", str(exc)
    return row


def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def render(rows: list[Row]) -> str:
    """The scoreboard as a Markdown table."""
    head = (
        "| example | device | expected | found | baseline samples/s | best samples/s "
        "| advisor speedup | kept fixes | plain samples/s | twin samples/s | twin speedup "
        "| advisor s | status |"
    )
    lines = [head, "|" + " --- |" * 13]
    for r in rows:
        mark = {True: " ✓", False: " ✗", None: ""}[r.match]
        status = r.status if not r.reason else f"{r.status}: {r.reason}"
        lines.append(
            f"| {r.name} | {r.device} | {r.expected or '-'} | {(r.found or '-') + mark} "
            f"| {_f(r.baseline_sps, '.1f')} | {_f(r.best_sps, '.1f')} | {_f(r.speedup, '.2f')}x "
            f"| {', '.join(r.kept) or '-'} | {_f(r.plain_sps, '.1f')} | {_f(r.twin_sps, '.1f')} "
            f"| {_f(r.twin_speedup, '.2f')}x | {_f(r.advisor_s, '.0f')} | {status} |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Run advisor over the example zoo and score it.")
    p.add_argument("names", nargs="*", help="examples to run (default: all in the manifest)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved plain/twin timing pairs")
    p.add_argument("--timeout", type=float, default=900, help="seconds per command")
    p.add_argument("--out", type=Path, default=REPO / "advisor-runs" / "zoo")
    p.add_argument("--no-advisor", action="store_true", help="only time plain vs twin")
    p.add_argument("--no-twins", action="store_true", help="skip the plain/twin timings")
    p.add_argument("--no-fixes", action="store_true", help="diagnose only (advisor --no-fixes)")
    p.add_argument("--safe-only", action="store_true", help="do not pass --unsafe-fixes")
    p.add_argument("-o", "--output", type=Path, help="also write the Markdown table here")
    p.add_argument("--json", type=Path, help="also write the rows as JSON here")
    opts = p.parse_args(argv)
    opts.advisor_args = (
        ["--no-fixes"] if opts.no_fixes else ([] if opts.safe_only else ["--unsafe-fixes"])
    )
    return opts


def main(argv=None) -> int:
    opts = parse_args(argv)
    manifest = load_manifest()
    unknown = [n for n in opts.names if n not in manifest]
    if unknown:
        print(f"unknown example(s): {', '.join(unknown)}; known: {', '.join(manifest)}")
        return 2
    opts.out.mkdir(parents=True, exist_ok=True)
    device = detect_device()
    rows = []
    for name in opts.names or list(manifest):
        print(f"zoo: {name} ...", file=sys.stderr, flush=True)
        rows.append(score(name, manifest[name], opts, device))
        print(render(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    table = render(rows)
    print(table)
    if opts.output:
        opts.output.write_text(table, encoding="utf-8")
    if opts.json:
        opts.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    return 0 if all(r.status == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
