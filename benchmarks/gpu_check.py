"""The prepared GPU check (issue #28): the zoo's GPU examples diagnosed on a CUDA machine, checked.

One command for the lent GPU machine (``make gpu-check``; see docs/gpu.md for the ``run`` call):
it reports the environment (GPU, driver, torch, CUDA, NVML), runs ``advisor diagnose`` from the
source tree on each example of ``examples/expected.json`` that has a GPU expectation, and checks
each against it: the primary category, every fix trial having run (no crash, loss parity), GPU
time seen in the trace (CUPTI) and NVML sampled. A summary goes to ``$OUT/gpu-check.json`` and
``$OUT/gpu-check.md``, rewritten after every example so that a run cut short still returns what
it measured; the reports, diffs, logs and traces (14 MiB of them) go to ``$OUT/runs.tar.gz``. The time is
bounded: a total budget is shared out between the examples (each diagnose gets ``--budget``), a
part of it kept back for the plain timings, and an example that cannot start in time is listed as
not run.

After the diagnoses, two kept fixes are reproduced by hand: the examples whose kept fixes made a
source diff (the fastest first) are copied, the diff applied with advisor's own ``write_diff``
(what ``--write`` does), and the original and the fixed script are timed plainly in turn. The
char-level GPT's hand-tuned twin is timed the same way beside its original.

``--dry-run`` (or no CUDA device) checks the plumbing only: the manifest, the examples, the
environment report and the summary files, with every CUDA case skipped and the reason given.
It runs in ``make test`` so the check never rots between GPU sessions.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zoo import REPO, run_group  # noqa: E402 - a sibling script: kills the whole group on a timeout

# NOTE: run as `python3 benchmarks/gpu_check.py` its folder is on the path, not the repository:
# advisor's own write_diff (reproduce) and the environment report import it from the source tree.
if str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))

EXAMPLES = REPO / "examples"
MANIFEST = EXAMPLES / "expected.json"
TOTAL_BUDGET_S = 420.0
"""Seconds for the whole check: the issue's 8 minutes on one H100, less start-up and margin."""
TRIALS = ("pageable_copies",)
"""Examples whose fix trials run (the rest are diagnosed with --no-fixes). On the H200 (2026-11-27)
each trial run starts CUDA cold in about 10 s, so a fix costs a minute: the 8 minutes hold the
diagnosis of every example and one example's fix loop. ``--trials chargpt`` proves the compute
fixes in a run of its own (docs/gpu.md)."""
DIAGNOSE_S = 90.0
"""Most seconds a diagnose without fix trials may take (each took 15-40 s on the H200)."""
PLAIN_RESERVE_S = 90.0
"""Seconds of the budget kept back for the plain timings (the twin, the two diffs reproduced)."""
PLAIN_PAIRS = 2
"""Original/fixed pairs timed in turn for each plain comparison (each a fresh process)."""
REPRODUCED = 2
"""Examples whose kept diff is applied and timed plainly (issue #28 asks for at least two)."""
TRACES_BYTES = 14 << 20
"""Bytes of gzip traces brought back (one file of $OUT may hold 16 MiB)."""
KEPT_FILES = (".json", ".diff", ".md", ".log", ".txt")
"""What of a run folder comes back in runs.tar.gz besides its gzip traces: reports, diffs and logs."""
MIN_EXAMPLE_S = 25.0
"""An example is not started with less than this left (its capture alone takes about that)."""
MIN_LOOP_S = 60.0
"""A fix loop is not started with less than this for it (one fix's runs, started cold on a GPU)."""
TWIN_TIMED = ("chargpt",)
"""Examples whose hand-tuned twin is timed plainly beside the original after the diagnose (issue #28)."""
SETUP_S = 15.0
"""Seconds of an example's share that go to its capture, kept run and report, not its fix loop."""
GRACE_S = 20.0
"""Seconds a diagnose past its time gets after a Ctrl-C to save what it measured (report.json)."""
SCANNER_RESERVE_S = 15.0
"""Seconds of the budget kept for that comparison (a tenth of the budget at most): in both calls of
the third H200 check the plain timings spent the budget first, and no trace was compared."""
SCANNER_S = 45.0
"""Most seconds spent loading the check's own traces twice, natively scanned and through msgspec."""
DONE = re.compile(r"^done: (\d+) steps, ([0-9.]+) samples/s", re.M)


@dataclass
class Case:
    """One example's result on the GPU (or why it did not run)."""

    name: str
    expected: str | None
    found: str | None = None
    status: str = "not run"  # ok, mismatch, failed, skipped, not run
    reason: str = ""
    kept: list[str] = field(default_factory=list)
    speedup: float | None = None
    trials: list[dict] = field(default_factory=list)
    trial_problems: list[str] = field(default_factory=list)
    starts: dict[str, int] = field(default_factory=dict)  # trial runs per start kind (warm, cold)
    twin_speedup: float | None = None  # the hand-tuned twin over the original, timed plainly
    plain_speedup: float | None = None  # the kept diff applied, over the original, timed plainly
    plain_rates: dict[str, list[float | None]] = field(default_factory=dict)  # samples/s per variant, in turn
    gpu_time_frac: float | None = None
    nvml_sampled: bool | None = None
    seconds: float = 0.0


def environment() -> dict:
    """What the machine is: Python, torch, CUDA, the GPU, the driver, NVML, the carried packages."""
    env: dict = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        env["cuda_available"] = bool(torch.cuda.is_available())
        if env["cuda_available"]:
            props = torch.cuda.get_device_properties(0)
            env["gpu"] = props.name
            env["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
            env["capability"] = f"{props.major}.{props.minor}"
    except Exception as exc:  # noqa: BLE001 - the report says what failed, whatever it was
        env["torch_error"] = repr(exc)[:200]
    try:
        import pynvml

        pynvml.nvmlInit()
        env["driver"] = pynvml.nvmlSystemGetDriverVersion()
        env["nvml"] = "ok"
    except Exception as exc:  # noqa: BLE001
        env["nvml"] = f"unavailable: {exc}"[:200]
    for name in ("msgspec", "libcst", "monai", "torch_tb_profiler", "advisor", "advisor.trace._scan"):
        try:
            module = __import__(name)
            env[f"import_{name}"] = getattr(module, "__version__", "ok")
        except Exception as exc:  # noqa: BLE001
            env[f"import_{name}"] = f"failed: {exc}"[:200]
    return env


def gpu_cases() -> list[Case]:
    """The manifest's examples with a GPU expectation (null expectations are run, not judged)."""
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))["examples"]
    return [Case(name, spec["expected"].get("gpu")) for name, spec in manifest.items()]


def plumbing(cases: list[Case]) -> list[str]:
    """Problems with the check itself: a missing example script."""
    return [f"examples/{c.name}.py is missing" for c in cases if not (EXAMPLES / f"{c.name}.py").is_file()]


def run_case(case: Case, spec: dict, work: Path, share_s: float | None, timeout_s: float) -> None:
    """Diagnose one example on the GPU and fill ``case`` from its report.

    With a ``share_s`` its fix loop gets the share less the capture's set-up, else no fix is
    tried; past ``timeout_s`` it is interrupted and judged on the report it saved of what it had
    measured.
    """
    run_dir, report_path = work / "runs" / case.name, work / "runs" / f"{case.name}.json"
    shutil.rmtree(run_dir, ignore_errors=True)
    report_path.unlink(missing_ok=True)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    fixes = ["--no-fixes"] if share_s is None else ["--unsafe-fixes", "--budget", str(max(10, int(share_s - SETUP_S)))]
    cmd = [
        sys.executable, "-m", "advisor", "diagnose", "--format", "json", "-o", str(report_path), "--out", str(run_dir),
        "-q", *fixes, *(spec.get("advisor_args") or []),
        str(EXAMPLES / f"{case.name}.py"), *(spec.get("args") or []),
    ]
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    t0 = time.perf_counter()
    try:
        proc = run_group(cmd, timeout_s, env=env, interrupt_grace=GRACE_S)
        code, err = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as exc:  # interrupted: judged on the report it saved
        code, err = None, exc.stderr or ""
    case.seconds = round(time.perf_counter() - t0, 1)
    (work / "runs" / f"{case.name}.stderr.log").write_text(err[-200_000:], encoding="utf-8")
    if not report_path.is_file() and (run_dir / "report.json").is_file():
        report_path = run_dir / "report.json"  # an interrupted diagnose saves it there
    if not report_path.is_file():
        tail = (err.strip().splitlines() or ["no output"])[-1]
        case.status, case.reason = "failed", f"exit {code} without a report: {tail[:300]}"
        return
    read_report(case, json.loads(report_path.read_text(encoding="utf-8")))
    if code is None:
        case.reason = "; ".join(r for r in (f"interrupted after {timeout_s:.0f} s", case.reason) if r)


def plain_rate(script: Path, args: list[str], timeout: float) -> float | None:
    """Samples/s a script prints on its ``done:`` line when run plainly (None: it did not finish)."""
    try:
        proc = run_group([sys.executable, str(script), *args], timeout, cwd=script.parent)
    except subprocess.TimeoutExpired:
        return None
    m = DONE.search(proc.stdout)
    return float(m.group(2)) if m else None


def time_in_turn(case: Case, variants: dict[str, Path], args: list[str], deadline: float) -> None:
    """Time each variant plainly, in turn, ``PLAIN_PAIRS`` rounds; rates go to ``case.plain_rates``.

    The variants alternate within each round (original first in even rounds, last in odd ones) so
    that a drift of the machine falls on both alike.
    """
    names = list(variants)
    for r in range(PLAIN_PAIRS):
        for name in names if r % 2 == 0 else reversed(names):
            left = deadline - time.monotonic()
            if left < 5:
                return
            # NOTE: a failed run is kept as None so that rounds stay paired.
            case.plain_rates.setdefault(name, []).append(plain_rate(variants[name], args, min(120.0, left)))


def paired_ratio(rates: dict[str, list[float | None]], name: str) -> float | None:
    """The median over rounds of ``name``'s rate over the original's (None without a full pair).

    Two rounds give the mean of their two ratios; every rate stays in ``plain_rates`` for the record.
    """
    pairs = [b / a for a, b in zip(rates.get("original", []), rates.get(name, []), strict=False) if a and b]
    return round(statistics.median(pairs), 3) if pairs else None


def plain_args(spec: dict) -> list[str]:
    """The arguments of a plain timing: the manifest's ``plain_args`` (a longer timed window where
    the default one is about a second on a GPU), else the example's own."""
    return list(spec.get("plain_args") or spec.get("args") or [])


def has_source_diff(run_dir: Path) -> bool:
    diff = run_dir / "fix.diff"
    return diff.is_file() and "\n--- a/" in "\n" + diff.read_text(encoding="utf-8")


def apply_kept(case: Case, work: Path) -> Path | None:
    """A copy of the examples with ``case``'s kept diff applied by advisor's own ``write_diff``
    (what ``--write`` does); None, with the reason in ``trial_problems``, where it did not apply."""
    from advisor.fixes.diff import write_diff

    copy = work / "repro" / case.name
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(EXAMPLES, copy, ignore=shutil.ignore_patterns("__pycache__", "fixed"))
    fixed = copy / f"{case.name}.py"
    try:
        write_diff(fixed, (work / "runs" / case.name / "fix.diff").read_text(encoding="utf-8"))
    except Exception as exc:  # noqa: BLE001 - the summary says what failed, whatever it was
        case.trial_problems.append(f"the kept diff did not apply: {exc}"[:200])
        return None
    return fixed


def reproduce(case: Case, spec: dict, work: Path, deadline: float) -> None:
    """Apply the kept diff to a copy of the examples and time the original and the fixed in turn."""
    fixed = apply_kept(case, work)
    if fixed is None:
        return
    time_in_turn(case, {"original": EXAMPLES / f"{case.name}.py", "advisor": fixed},
                 plain_args(spec), deadline)
    case.plain_speedup = paired_ratio(case.plain_rates, "advisor")


def time_twin(case: Case, spec: dict, work: Path, deadline: float) -> None:
    """Time the original and its hand-tuned twin plainly, in turn, and keep the median ratio; where
    advisor kept a source diff for it, that diff applied runs in the same rounds (issue #28: advisor's
    kept stack against the twin, side by side in one run)."""
    variants = {"original": EXAMPLES / f"{case.name}.py", "twin": EXAMPLES / "fixed" / f"{case.name}.py"}
    fixed = apply_kept(case, work) if has_source_diff(work / "runs" / case.name) else None
    if fixed is not None:
        variants["advisor"] = fixed
    time_in_turn(case, variants, plain_args(spec), deadline)
    case.twin_speedup = paired_ratio(case.plain_rates, "twin")
    if fixed is not None:
        case.plain_speedup = paired_ratio(case.plain_rates, "advisor")


def pack_runs(work: Path, out: Path, trace_limit: int = TRACES_BYTES) -> list[str]:
    """Every run's reports, diffs and logs, and its gzip traces smallest first while under
    ``trace_limit``, into ``out/runs.tar.gz`` (one file: a session gets 8 back).

    Real GPU traces of the examples are what rules are checked on here, where no GPU is (the
    first run's were left on the machine). Returns the traces left out for the limit.
    """
    runs = work / "runs"
    if not runs.is_dir():
        return []
    traces = sorted((p for p in runs.glob("*/traces/*.json.gz") if p.is_file()), key=lambda p: p.stat().st_size)
    left, total = [], 0
    with tarfile.open(out / "runs.tar.gz", "w:gz") as tar:
        for path in sorted(runs.rglob("*")):
            if (path.is_file() and path.suffix in KEPT_FILES and "traces" not in path.parts
                    and path.stat().st_size < 4 << 20):
                tar.add(path, arcname=str(path.relative_to(work)))
        for path in traces:
            size = path.stat().st_size
            if total + size > trace_limit:
                left.append(str(path.relative_to(work)))
                continue
            total += size
            tar.add(path, arcname=str(path.relative_to(work)))
    return left


def read_report(case: Case, report: dict) -> None:
    """Judge one report: the primary, the trials, GPU time in the trace, NVML."""
    case.found = (report.get("primary") or {}).get("category")
    summary = report.get("summary") or {}
    gpu = summary.get("gpu_compute_frac")
    case.gpu_time_frac = None if gpu is None else round(float(gpu), 4)
    case.nvml_sampled = summary.get("gpu_util_frac") is not None
    case.kept = list(report.get("kept_fixes") or [])
    case.starts = dict((report.get("timing") or {}).get("starts") or {})
    combined = report.get("combined") or {}
    case.speedup = combined.get("speedup")
    for t in report.get("trials") or []:
        case.trials.append({k: t.get(k) for k in ("fix", "verdict", "speedup", "ci_low", "ci_high", "reason")})
        reason = str(t.get("reason") or "")
        if t.get("verdict") == "failed" and "loss" in reason:
            case.trial_problems.append(f"{t.get('fix')}: loss parity: {reason[:160]}")
        elif t.get("verdict") == "failed":
            case.trial_problems.append(f"{t.get('fix')}: {reason[:160]}")
    status = (report.get("run") or {}).get("status")
    if status in ("crashed", "timeout", "no_steps"):
        case.status, case.reason = "failed", f"capture {status}: {(report.get('run') or {}).get('error') or ''}"[:300]
    elif not case.gpu_time_frac:
        case.status, case.reason = "failed", "no GPU time in the trace: kernels missing (CUPTI?)"
    elif case.expected is not None and case.found != case.expected:
        case.status, case.reason = "mismatch", f"expected {case.expected}, found {case.found}"
    else:
        case.status = "ok"


def scanner_check(root: Path, seconds: float) -> dict:
    """Load every trace under ``root`` with the native trace scanner and with msgspec alone, and compare.

    The scanner was held against recorded traces here; these were written by the GPU machine's
    torch, whose events may carry fields or values those did not. ``differ`` names each trace
    whose two tables are not the same (a bug to fix), ``refused`` counts the batches the scanner
    gave to msgspec (allowed, but each says which field it could not take).
    """
    from advisor.trace import native
    from advisor.trace.load import load_trace

    out: dict = {"built": native.Scanner is not None, "traces": 0, "same": 0, "differ": [], "scanned": 0, "refused": 0}
    if native.Scanner is None:
        return out
    add, before, t0 = native.NativeScan.add, os.environ.get("ADVISOR_NATIVE_SCAN"), time.monotonic()

    def counted(self, *args):  # noqa: ANN001, ANN002, ANN202
        ok = add(self, *args)
        out["scanned" if ok else "refused"] += 1
        return ok

    native.NativeScan.add = counted
    try:
        for path in sorted(root.rglob("*.pt.trace.json*")):
            if time.monotonic() - t0 > seconds:
                out["not_checked"] = f"{seconds:.0f} s were spent before {path.relative_to(root)}"
                break
            tables = []
            for flag in ("1", "0"):
                os.environ["ADVISOR_NATIVE_SCAN"] = flag
                try:
                    tables.append(load_trace(path).events)
                except Exception as exc:  # noqa: BLE001 - the same error both ways is the same answer
                    tables.append(f"{type(exc).__name__}: {exc}"[:200])
            out["traces"] += 1
            a, b = tables
            try:
                if isinstance(a, str) or isinstance(b, str):
                    if a != b:
                        raise AssertionError(f"{a} / {b}")
                else:
                    native.check_same_events(a, b)
                out["same"] += 1
            except AssertionError as exc:
                out["differ"].append(f"{path.relative_to(root)}: {' '.join(str(exc).split())[:160]}")
    finally:
        native.NativeScan.add = add
        if before is None:
            os.environ.pop("ADVISOR_NATIVE_SCAN", None)
        else:
            os.environ["ADVISOR_NATIVE_SCAN"] = before
    out["seconds"] = round(time.monotonic() - t0, 1)
    return out


def markdown(env: dict, cases: list[Case], dry: bool, took: float) -> str:
    lines = ["# advisor GPU check", "", f"{'Dry run (no CUDA): plumbing only. ' if dry else ''}Took {took:.0f} s.", ""]
    lines += [f"- **{k}**: {v}" for k, v in env.items()]
    lines += ["", "| example | expected | found | status | kept | speedup | kept diff (plain) | twin (plain) | starts | GPU time | NVML | trial problems | s |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in cases:
        sp = "—" if c.speedup is None else f"{c.speedup:.2f}x"
        gt = "—" if c.gpu_time_frac is None else f"{c.gpu_time_frac:.0%}"
        why = f"{c.status}: {c.reason}" if c.reason else c.status
        lines.append(f"| {c.name} | {c.expected or '—'} | {c.found or '—'} | {why} | {', '.join(c.kept) or '—'} | "
                     f"{sp} | {'—' if c.plain_speedup is None else f'{c.plain_speedup:.2f}x'} | {'—' if c.twin_speedup is None else f'{c.twin_speedup:.2f}x'} | {_starts(c.starts)} | {gt} | {c.nvml_sampled if c.nvml_sampled is not None else '—'} | "
                     f"{'; '.join(c.trial_problems) or '—'} | {c.seconds} |")
    return "\n".join(lines) + "\n"


def _starts(starts: dict[str, int]) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in sorted(starts.items())) or "—"


def write_summary(out: Path, env: dict, cases: list[Case], problems: list[str], dry: bool, took: float,
                  extra: dict | None = None) -> None:
    data = {"environment": env, "dry_run": dry, "problems": problems, "seconds": round(took, 1), **(extra or {}),
            "cases": [asdict(c) for c in cases]}
    (out / "gpu-check.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    (out / "gpu-check.md").write_text(markdown(env, cases, dry, took), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu-check-out"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/advisor-gpu-check"),
                    help="where the runs go (only their reports, diffs and logs come back, packed)")
    ap.add_argument("--dry-run", action="store_true", help="check the plumbing only, run no example")
    ap.add_argument("--budget", type=float, default=TOTAL_BUDGET_S, help="seconds for the whole check")
    ap.add_argument("--trials", action="append", metavar="EXAMPLE",
                    help=f"an example whose fix trials run, repeatable (default: {' '.join(TRIALS)}; none: no fix loop); the rest get --no-fixes")
    ap.add_argument("--warm-gpu", action="store_true",
                    help="fork trial runs from a warm-start server beside the GPU (ADVISOR_WARM_GPU=1, experimental)")
    ap.add_argument("--plain-s", type=float, default=PLAIN_RESERVE_S,
                    help="seconds kept back for the plain timings (at most a quarter of --budget unless given)")
    ap.add_argument("examples", nargs="*", help="only these examples, in this order (default: every one in the manifest)")
    opts = ap.parse_args(argv)
    if opts.warm_gpu:
        os.environ["ADVISOR_WARM_GPU"] = "1"  # the diagnoses inherit it (advisor.capture.warm_preload)
    t0 = time.monotonic()
    deadline = t0 + opts.budget
    opts.out.mkdir(parents=True, exist_ok=True)
    env = environment()
    by_name = {c.name: c for c in gpu_cases()}
    cases = [by_name[n] for n in dict.fromkeys(opts.examples) if n in by_name] if opts.examples else list(by_name.values())
    problems = plumbing(cases) + [f"{n} is not an example of the manifest" for n in opts.examples if n not in by_name]
    dry = opts.dry_run or not env.get("cuda_available")
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))["examples"]
    extra: dict = {}
    trials = set(TRIALS if opts.trials is None else opts.trials) - {"none"}  # --trials none: no fix loop
    # NOTE: time is kept back for plain timings only where some will run: a twin, or a fix loop's diff.
    timed = any(c.name in TWIN_TIMED or c.name in trials for c in cases)
    given = opts.plain_s != PLAIN_RESERVE_S
    plain_reserve = (opts.plain_s if given else min(PLAIN_RESERVE_S, opts.budget / 4)) if timed else 0.0
    scanner_reserve = min(SCANNER_RESERVE_S, opts.budget / 10)
    # NOTE: every example is diagnosed first, the fix loops then share what is left.
    order = [c for c in cases if c.name not in trials] + [c for c in cases if c.name in trials]
    for i, case in enumerate(order):
        if dry:
            case.status, case.reason = "skipped", "dry run" if opts.dry_run else "no CUDA device"
            continue
        left = deadline - plain_reserve - scanner_reserve - time.monotonic()
        looping = case.name in trials
        share = left / sum(1 for c in order[i:] if c.name in trials) if looping else None
        if left < MIN_EXAMPLE_S:
            case.reason = f"{left:.0f} s of the budget left"
            continue
        if share is not None and share < MIN_LOOP_S + SETUP_S:
            case.reason, share = f"no fix loop: {left:.0f} s of the budget left", None
        # NOTE: a diagnose may overrun its share by a trial or a compile, never past the check's end.
        timeout = min(DIAGNOSE_S if share is None else share + 60.0, deadline - GRACE_S - time.monotonic())
        run_case(case, manifest[case.name], opts.work, share, max(10.0, timeout))
        print(f"{case.name}: {case.status} {case.reason} ({case.seconds} s)", flush=True)
        write_summary(opts.out, env, cases, problems, dry, time.monotonic() - t0)
    if not dry:
        twins = [c for c in cases if c.name in TWIN_TIMED and c.status == "ok"]
        diffs = sorted((c for c in cases if c.status == "ok" and c.name not in TWIN_TIMED
                        and has_source_diff(opts.work / "runs" / c.name)),
                       key=lambda c: -(c.speedup or 0))[:REPRODUCED]
        for case in twins:
            time_twin(case, manifest[case.name], opts.work, deadline - scanner_reserve)
            print(f"{case.name}: twin {case.twin_speedup} {case.plain_rates}", flush=True)
        for case in diffs:
            reproduce(case, manifest[case.name], opts.work, deadline - scanner_reserve)
            print(f"{case.name}: kept diff {case.plain_speedup} {case.plain_rates}", flush=True)
        extra["scanner"] = scanner_check(opts.work / "runs", max(0.0, min(SCANNER_S, deadline - time.monotonic())))
        if extra["scanner"]["differ"]:
            problems.append(f"the trace scanner and msgspec differ on {len(extra['scanner']['differ'])} traces")
        print(f"trace scanner: {extra['scanner']}", flush=True)
        extra["traces_left_out"] = pack_runs(opts.work, opts.out)
    write_summary(opts.out, env, cases, problems, dry, time.monotonic() - t0, extra)
    print(f"wrote {opts.out / 'gpu-check.md'}", flush=True)
    bad = problems or [c for c in cases if c.status in ("failed", "mismatch")]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
