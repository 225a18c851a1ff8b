"""Real code as a standing check: ``advisor diagnose`` on every script in ``../shared/real``.

``../shared/real`` (next to the repository) holds a subset of pytorch/examples, copied unchanged:
training code this project did not write. Its README says how each script is run and what a user
would expect on a machine with no GPU and no network. For each script this:

1. prepares what the script needs in a temporary folder (generated word lists for the language
   model, the sine-wave file for the LBFGS example), never in ``../shared``;
2. runs ``advisor diagnose`` on it unmodified, from that folder, with small phases and a timeout;
3. prints one table row: script, exit code, step source, primary bottleneck (or, for exit 3, the
   one-line reason advisor gave), kept fixes and their speedup, wall time.

Each case carries what the README expects (``expect``): exit 0 with a step source, or exit 3
with words the reason must contain; the ``ok`` column says whether the run met it. The slow test
``tests/examples/test_real_scripts.py`` runs the same cases and asserts ``ok``.

Usage::

    .venv/bin/python benchmarks/real.py                  # every case, safe fixes tried
    .venv/bin/python benchmarks/real.py --no-fixes       # diagnosis only (faster)
    .venv/bin/python benchmarks/real.py regression -o real.md
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REAL = REPO.parent / "shared" / "real"
# NOTE: small phases: the point is that every script is diagnosed, not a precise figure.
PHASES = ("--warmup", "2", "--steps", "6", "--profile-steps", "3")


def _wikitext(tmp: Path) -> list[str]:
    """Small files of random words where word_language_model reads wikitext-2."""
    folder = tmp / "data" / "wikitext-2"
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    words = [f"w{i}" for i in range(300)]
    for name, lines in (("train", 3000), ("valid", 100), ("test", 100)):
        text = "\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(lines))
        (folder / f"{name}.txt").write_text(text + "\n")
    return ["--data", str(folder)]


def _sine_wave(tmp: Path) -> list[str]:
    """``generate_sine_wave.py`` writes traindata.pt into the working folder (tmp)."""
    subprocess.run(
        [sys.executable, str(REAL / "time_sequence_prediction" / "generate_sine_wave.py")],
        cwd=tmp, check=True, capture_output=True, timeout=300,
    )
    return []


@dataclass(frozen=True)
class Case:
    """One script run: how to prepare and call it, and what the README expects."""

    name: str
    script: str
    args: tuple[str, ...] = ()
    prepare: Callable[[Path], list[str]] | None = None
    exit_code: int = 0
    step_source: str | None = None  # expected when exit_code is 0
    reason: tuple[str, ...] = ()  # for exit 3: the reason must contain one of these


TORCHVISION = ("torchvision::nms does not exist", "No module named 'torchvision'")
# NOTE: these scripts import torchvision first and download MNIST/BSDS next: whichever fails
# first on this machine is the script's own reason.
DOWNLOAD = ("URLError", "urlopen", "Temporary failure", "Name or service", "HTTP", "download",
            "Connection", "resolve", "Errno", "No module named", *TORCHVISION)

CASES = (
    Case("regression", "regression/main.py", step_source="backward"),
    Case("word_language_model", "word_language_model/main.py",
         ("--epochs", "1", "--emsize", "64", "--nhid", "64"), _wikitext, step_source="backward"),
    Case("word_language_model --use-optimizer", "word_language_model/main.py",
         ("--epochs", "1", "--emsize", "64", "--nhid", "64", "--use-optimizer"), _wikitext,
         step_source="optimizer"),
    Case("time_sequence_prediction", "time_sequence_prediction/train.py", (), _sine_wave,
         exit_code=3, reason=("weights_only", "No module named 'matplotlib'")),
    Case("dcgan", "dcgan/main.py",
         ("--dataset", "fake", "--batchSize", "16", "--imageSize", "32", "--niter", "1", "--workers", "0"),
         exit_code=3, reason=TORCHVISION),
    Case("imagenet -j 0", "imagenet/main.py", ("-a", "resnet18", "--dummy", "-b", "16", "-j", "0"),
         exit_code=3, reason=TORCHVISION),
    Case("imagenet -j 2", "imagenet/main.py", ("-a", "resnet18", "--dummy", "-b", "16", "-j", "2"),
         exit_code=3, reason=TORCHVISION),
    *(
        Case(name, f"{name}/main.py", ("--epochs", "1"), exit_code=3, reason=DOWNLOAD)
        for name in ("mnist", "vae", "siamese_network", "mnist_rnn", "super_resolution")
    ),
)


@dataclass
class Row:
    """One case's line in the table."""

    name: str
    exit_code: int | None = None
    step_source: str | None = None
    primary: str | None = None
    reason: str | None = None
    kept: list[str] = field(default_factory=list)
    speedup: float | None = None
    wall_s: float = 0.0
    ok: bool = False


def _run_group(cmd: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in its own process group; on timeout end the whole group (the trials' children too)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                            process_group=0)  # a group, not a session: see advisor._proc
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += f"\nadvisor: error: benchmark timeout after {timeout:g} s"
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def run_case(case: Case, fixes: bool, timeout: float, repeats: int = 2) -> Row:
    """Prepare, diagnose and summarise one case (never raises for a failed run)."""
    row = Row(case.name)
    tmp = Path(tempfile.mkdtemp(prefix="advisor-real-"))
    try:
        extra = case.prepare(tmp) if case.prepare else []
        report_file, run_dir = tmp / "report.json", tmp / "run"
        cmd = [sys.executable, "-m", "advisor", "diagnose", "-q", *PHASES, "--timeout", str(timeout),
               "--format", "json", "-o", str(report_file), "--out", str(run_dir),
               *(["--repeats", str(repeats)] if fixes else ["--no-fixes"]),
               str(REAL / case.script), *case.args, *extra]
        start = time.perf_counter()
        # NOTE: the outer limit leaves room for the fix trials after a capture that used its --timeout.
        done = _run_group(cmd, tmp, timeout * 4)
        row.wall_s = time.perf_counter() - start
        row.exit_code = done.returncode
        errors = [line for line in done.stderr.splitlines() if line.startswith("advisor: error:")]
        # NOTE: the temporary folder the reason points at is gone after the run: keep the reason only.
        row.reason = errors[-1][len("advisor: error:"):].split("; its stderr is in")[0].strip() if errors else None
        if (run_dir / "capture.json").is_file():
            row.step_source = json.loads((run_dir / "capture.json").read_text()).get("step_source")
        if report_file.is_file():
            report = json.loads(report_file.read_text())
            row.primary = (report.get("primary") or {}).get("category")
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from zoo import best_after_fixes

            _, _, row.speedup, row.kept = best_after_fixes(report)
        if case.exit_code == 0:
            row.ok = row.exit_code == 0 and row.step_source == case.step_source and row.primary is not None
        else:
            row.ok = row.exit_code == case.exit_code and any(w in (row.reason or "") for w in case.reason)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return row


def table(rows: list[Row]) -> str:
    """Markdown table of the rows."""
    out = ["| script | exit | step source | primary bottleneck / reason | kept fixes (speedup) | wall s | ok |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        what = (r.primary or "none found") if r.exit_code == 0 else (r.reason or "").replace("|", "\\|")
        if r.exit_code != 0 and len(what) > 160:
            what = what[:159] + "…"
        kept = ", ".join(r.kept) if r.kept else "—"
        if r.kept and r.speedup:
            kept += f" ({r.speedup:.2f}×)"
        out.append(f"| {r.name} | {r.exit_code} | {r.step_source or '—'} | {what} | {kept} | "
                   f"{r.wall_s:.0f} | {'yes' if r.ok else 'NO'} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the cases named (default: all) and print the table; exit 1 if any missed its expectation."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="case names (prefixes), default: all")
    parser.add_argument("--no-fixes", action="store_true", help="diagnose only")
    parser.add_argument("--timeout", type=float, default=300.0, help="advisor's --timeout per run")
    parser.add_argument("-o", "--output", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    if not REAL.is_dir():
        print(f"skipped: {REAL} is absent (the real scripts live next to the repository)")
        return 0
    cases = [c for c in CASES if not args.names or any(c.name.startswith(n) for n in args.names)]
    rows = []
    for case in cases:
        row = run_case(case, fixes=not args.no_fixes, timeout=args.timeout)
        print(f"{row.name}: exit {row.exit_code}, {row.step_source}, {row.primary or row.reason}, "
              f"{row.wall_s:.0f} s", file=sys.stderr, flush=True)
        rows.append(row)
    text = table(rows)
    print(text, end="")
    if args.output:
        args.output.write_text(text)
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
