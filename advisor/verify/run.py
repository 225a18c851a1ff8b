"""Verify one saved run: read its claim and its diff, patch the script in memory, time the pairs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from advisor._files import write_text
from advisor.capture.model import RunCapture
from advisor.errors import InputError
from advisor.metrics.whole import WholeScope
from advisor.report.model import Report
from advisor.verify.measure import time_pairs
from advisor.verify.model import Claim, ClaimScope, Pair, Verification
from advisor.verify.patch import apply_diff, diff_targets

VERIFY_DIR = "verify"
"""Inside the run folder: the two sources the runs execute and each run's output."""


def prepare(run_dir: Path, cwd: Path) -> tuple[Verification, Path, Path]:
    """Read the run, check that it can be verified, and write the two sources; return the empty verification and their paths.

    Raises:
        InputError: the folder is not a run, it kept nothing, its diff is empty or edits another
            file, or the script changed since the diagnose.
    """
    report = Report.load(run_dir)
    capture = RunCapture.load(run_dir)
    if not report.kept_fixes:
        raise InputError(f"{run_dir} kept no fix: there is nothing to verify (advisor report {run_dir} says why)")
    if not report.diff.strip():
        raise InputError(f"the kept fixes of {run_dir} ({', '.join(report.kept_fixes)}) have no source change "
                         "to time: their diff is empty")
    script = Path(capture.script)
    targets = diff_targets(report.diff)
    if len(targets) != 1 or Path(targets[0]).name != script.name:
        raise InputError(f"fix.diff edits {', '.join(targets) or 'no file'}, not the script alone; apply it to a copy "
                         "(git apply) and time that")
    try:
        source = script.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read the script {script} ({exc.strerror or exc}); run advisor verify where it is") from None
    fixed = apply_diff(source, report.diff)
    folder = run_dir / VERIFY_DIR
    original_path, fixed_path = folder / "original.py", folder / "fixed.py"
    write_text(original_path, source, what="run folder")
    write_text(fixed_path, fixed, what="run folder")
    return Verification(str(run_dir), str(script), tuple(capture.args), str(cwd), tuple(report.kept_fixes),
                        claim_of(report)), original_path, fixed_path


def claim_of(report: Report) -> Claim | None:
    """Return the report's claim: the whole-run projection where the run's length was known, else the trial's step speedup."""
    whole = report.kept_whole
    if whole is not None and whole.scope == WholeScope.RUN and whole.after_s > 0:
        return Claim(whole.ratio, whole.low, whole.high, ClaimScope.RUN)
    trial = report.kept_trial
    if trial is not None and trial.speedup:
        return Claim(trial.speedup, trial.ci_low, trial.ci_high, ClaimScope.STEPS)
    return None


def verify_run(run_dir: Path, pairs: int, cwd: Path, on_pair: Callable[[Verification], None] | None = None) -> Verification:
    """Time ``pairs`` pairs of the run's script without and with its ``fix.diff``; ``verify.json`` is saved after each.

    A Ctrl-C ends the run in flight; the pairs already timed stay in ``verify.json`` (``complete`` false).
    """
    verification, original, fixed = prepare(run_dir, cwd)
    done: list[Pair] = []

    def record(pair: Pair) -> None:
        done.append(pair)
        now = replace(verification, pairs=tuple(done), complete=len(done) == pairs)
        now.save(run_dir)
        if on_pair is not None:
            on_pair(now)

    verification.save(run_dir)
    try:
        time_pairs(Path(verification.script), original, fixed, verification.args, cwd, run_dir / VERIFY_DIR, pairs,
                   record)
    except BaseException:
        replace(verification, pairs=tuple(done), complete=False).save(run_dir)
        raise
    return replace(verification, pairs=tuple(done), complete=True)
