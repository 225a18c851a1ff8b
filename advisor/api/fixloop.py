"""The fix loop as ``advisor diagnose`` runs it: warm-started trial runs, the report saved after every run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from advisor._proc import interrupt_once
from advisor.api.process import (
    capture_function,
    interrupt_signal,
    signals_ignored,
)
from advisor.capture.model import RunCapture, RunSpec
from advisor.engine.model import Diagnosis
from advisor.fixes.model import FixOutcome
from advisor.report.model import Report


@dataclass(frozen=True)
class FixOptions:
    """How the fix loop runs.

    Attributes:
        enabled: False skips the loop (``--no-fixes``).
        unsafe: Also try fixes that may change numerics (``--unsafe-fixes``).
        only: Try only these fix ids (``--fix``, repeatable).
        repeats: Interleaved baseline/variant repeats per fix.
        write: Apply the diff to the user's script, keeping a ``.bak`` copy (``--write``).
        budget_s: Seconds the whole fix loop may take (``--budget``); None: no limit.
        exhaustive: Measure every suggested fix for every planned round with the full warm-up
            (``--exhaustive``): no Amdahl skips, no early stops, no shortened warm-up, no fix
            skipped as inert on top of its rung.
        cold_start: Start every trial run in a fresh interpreter (``--cold-start``) instead of
            forking it from the warm-start server (:mod:`advisor.capture.warm`).
    """

    enabled: bool = True
    unsafe: bool = False
    only: tuple[str, ...] = ()
    repeats: int = 3
    write: bool = False
    budget_s: float | None = None
    exhaustive: bool = False
    cold_start: bool = False


def try_fixes(
    spec: RunSpec,
    diagnosis: Diagnosis,
    options: FixOptions,
    progress: Callable[[Any], None] | None = None,
    checkpoint: Callable[[FixOutcome], None] | None = None,
    server: Any = None,
    gpu_busy: float | None = None,
) -> FixOutcome:
    """Measure the fixes the findings suggest (or ``options.only``); the loop also builds the diff.

    Trial runs go to ``<run>/trials/``; the user's script is only written with ``--write``.
    Single-process trial runs are forked from a warm-start server unless ``options.cold_start``
    (:func:`advisor.capture.warm.warm_runner`; it falls back to cold starts by itself).
    ``server``: one :func:`launch_server` started earlier, which the loop uses and ends.
    ``gpu_busy``: on a GPU run, the diagnosed share of the step the GPU is busy (bounds the
    fixes that only make kernels faster).
    """
    from advisor.capture.warm import warm_runner
    from advisor.fixes.diff import write_diff
    from advisor.fixes.diff_home import training_file
    from advisor.fixes.loop import run_trials

    trial_spec, setup = _warm_start(spec, options)
    with warm_runner(trial_spec, capture_function(spec), launched=server, **setup) as (runner, started):
        outcome = run_trials(
            trial_spec,
            _suggested_fixes(diagnosis.findings),
            unsafe=options.unsafe,
            only=options.only,
            repeats=options.repeats,
            runner=runner,
            progress=progress,
            checkpoint=checkpoint,
            breakdown=None if options.exhaustive else diagnosis.breakdown,
            impacts=_fix_impacts(diagnosis.findings),
            gpu_busy=gpu_busy,
            **_peak(diagnosis.findings),
            budget_s=options.budget_s,
            early_stop=not options.exhaustive,
            settle_warmup=not options.exhaustive,
            skip_inert=not options.exhaustive,
            profile_kept=spec.profiled_steps > 0,
        )
    if started.start_s:
        # NOTE: the server's own start belongs to no run; it is overhead the loop paid once, as
        # long as the loop waited for it (a server launched before the analysis ran beside it).
        outcome = replace(outcome, phases_s={**outcome.phases_s, "server": round(started.waited_s, 4)})
    outcome = replace(outcome, notes=(*outcome.notes, *started.notes(), *_rechecked(spec, diagnosis)))
    if outcome.diff and options.write:
        backup = write_diff(Path(spec.script), outcome.diff)
        written = training_file(Path(spec.script))
        outcome = replace(outcome, notes=(*outcome.notes, f"applied the diff to {written} (backup: {backup})"))
    return outcome


def _rechecked(spec: RunSpec, diagnosis: Diagnosis) -> tuple[str, ...]:
    """Say what the baseline runs showed: their spread, and where the findings read from per-run counters held."""
    from advisor.api.baselines import baseline_notes
    from advisor.api.rules import rule_set

    return baseline_notes(Path(spec.out_dir), diagnosis, rule_set())


def launch_server(spec: RunSpec, options: FixOptions, capture: RunCapture | None = None) -> Any:
    """Start the fix loop's warm-start server now, without waiting (None where the trials start cold).

    The diagnose calls it before the capture (``capture`` None), so that the server imports torch
    beside the capture's own start and is ready when the analysis ends; :func:`fit_server` then
    checks it against the capture, and :func:`try_fixes` takes it as ``server``. Whoever does not
    pass it on must ``close()`` it. A module the script imports only by what it does (an
    optimizer's ``torch._dynamo``) is left out when ``capture``'s first step had not imported
    it, unless unsafe fixes (``torch.compile``) may run or the fixes were named (``--fix``);
    without a capture it is imported (most training scripts build a ``torch.optim`` optimizer).
    """
    if not options.enabled:
        return None
    from advisor.capture.warm import launch_early

    trial_spec, setup = _warm_start(spec, options)
    return launch_early(trial_spec, capture_function(spec), skip=_lazy_skip(options, capture), **setup)


EARLY_FREE_CORES = 1.5
"""Free cores the server needs to start beside the capture: one for each, less some slack."""


def launch_early_server(spec: RunSpec, options: FixOptions) -> Any:
    """Launch the trials' server before the capture when two cores are free for the two; else None.

    Beside a busy process on two cores, its imports took a core from the capture's start-up,
    which the report gives as the script's (45% longer); :func:`fit_server` then launches it
    after the capture, as it is launched where nothing forks.
    """
    if not options.enabled or options.cold_start:
        return None
    from advisor.capture.spare import free_cores

    free = free_cores()
    return launch_server(spec, options) if free is not None and free >= EARLY_FREE_CORES else None


def fit_server(server: Any, spec: RunSpec, options: FixOptions, capture: RunCapture) -> Any:
    """Return ``server`` if it imports what ``capture`` showed the trials need, else one launched now for it.

    A server launched before the capture imported every lazy module; a script whose first step
    imported none of them gets a server without them (its cold runs would not have them either),
    and one seen to compile gets compile's imported into it (:meth:`WarmServer.extend`).
    Without a server (none launched early), one is launched now, while the capture is analysed.
    """
    wanted = _lazy_skip(options, capture)
    if server is not None and tuple(server.skip) == wanted:
        return server
    if server is not None and set(wanted) <= set(server.skip) and server.extend([m for m in server.skip if m not in wanted]):
        return server  # it imports what the capture showed (compile's) on top of what it has
    if server is not None:
        server.close()
    return launch_server(spec, options, capture)


def _lazy_skip(options: FixOptions, capture: RunCapture | None) -> tuple[str, ...]:
    """Return the server modules to leave out.

    Those are the lazy ones the capture saw the script go without, and compile's unless the
    capture saw the script compile (the torch_compile fix's runs then pay their compiler's
    start, as the user would: it is that fix's cost, not the script's).
    """
    from advisor.capture.warm_preload import LAZY_MODULES, ON_SIGHT_MODULES

    seen = None if capture is None else capture.lazy_imports
    guessed = () if seen is None or options.unsafe or options.only else tuple(m for m in LAZY_MODULES if m not in seen)
    return (*guessed, *(m for m in ON_SIGHT_MODULES if seen is None or m not in seen))


def _warm_start(spec: RunSpec, options: FixOptions) -> tuple[RunSpec, dict[str, Any]]:
    """Return the trial runs' spec and their warm-start server's set-up, for :func:`try_fixes` and :func:`launch_server` alike."""
    from advisor.fixes.loop import installer_modules
    from advisor.rundir import TRIALS_DIR

    setup = {"enabled": not options.cold_start, "modules": installer_modules(),
             "log": Path(spec.out_dir) / TRIALS_DIR / "warm-start.log"}
    return replace(spec, quiet=True), setup


def trials_wanted(findings: Sequence[Any], options: FixOptions) -> bool:
    """Whether the fix loop has a fix to try: ``--fix`` ids, or a suggestion it may run (unsafe ones with ``--unsafe-fixes``).

    The diagnose ends the server it launched early as soon as this says no: the server's imports
    would only slow the rest of the analysis down.
    """
    if not options.enabled:
        return False
    if options.only:
        return True
    from advisor.fixes.loop.plan import choose

    wanted, _, _ = choose(_suggested_fixes(findings), (), options.unsafe)
    return bool(wanted)


MEMORY_FIXES = frozenset({"activation_checkpointing", "fit_accumulation"})


def _peak(findings: Sequence[Any]) -> dict[str, Any]:
    """Where the peak is allocated and the activations' share, from the first finding that suggests a memory fix and names lines."""
    for f in findings:
        if f.locations and MEMORY_FIXES & {r.id for r in f.fixes}:
            where = tuple(loc.where + (f" ({loc.function})" if loc.function else "") for loc in f.locations)
            frac = f.evidence.get("peak_activation_frac")
            return {"peak_at": where, "peak_activation_frac": float(frac) if isinstance(frac, int | float) else None}
    return {}


def _fix_loop_saved(
    report: Report, spec: RunSpec, diagnosis: Diagnosis, fix_options: FixOptions,
    trial_progress: Callable[[Any], None] | None, run_dir: Path, started: float, server: Any = None,
    base: RunCapture | None = None,
) -> Report:
    """Run the fix loop with ``report.json`` saved before it and after every trial run.

    ``server``: the warm-start server :func:`launch_server` started, passed on to :func:`try_fixes`.
    ``base``: the diagnosed capture, whose projection the kept fixes are set against
    (:func:`with_kept_whole`).

    Ctrl-C or SIGTERM during the loop stops the trial's children (the capture stage ends its
    process group on any exception), saves the report with status ``interrupted`` and what was
    measured, and raises :class:`~advisor.errors.Interrupted` (exit 128 + the signal: 130, 143, 129).
    """
    import os
    import time

    from advisor.errors import Interrupted
    from advisor.report.model import ReportStatus, timing_of, with_fixes

    pid = os.getpid()
    last = [FixOutcome()]
    capture = RunCapture(wall_s=report.timing.get("capture_s"), phases_s=report.timing.get("phases_s") or {})

    def saved(outcome: FixOutcome, status: str, pid: int | None = None) -> Report:
        timing = timing_of(time.perf_counter() - started, capture, outcome)
        return replace(with_fixes(report, outcome, status, pid), timing=timing)

    asked_to_stop: list[Any] = [False]

    def checkpoint(outcome: FixOutcome) -> None:
        last[0] = outcome
        saved(outcome, ReportStatus.RUNNING, pid).save(run_dir)
        if asked_to_stop[0]:
            # NOTE: the signal's KeyboardInterrupt was swallowed where Python ignores exceptions
            # (a __del__, a weakref callback: "Exception ignored in ...") and the loop went on;
            # the stop request still holds, at the latest after the run in flight.
            raise KeyboardInterrupt

    checkpoint(FixOutcome())  # the diagnosis is on disk before the first trial run starts
    try:
        with interrupt_once(asked_to_stop):
            outcome = try_fixes(spec, diagnosis, fix_options, trial_progress, checkpoint=checkpoint, server=server,
                                gpu_busy=_gpu_busy(report.summary))
    except KeyboardInterrupt as exc:
        signum = interrupt_signal(exc, asked_to_stop[0])
        with signals_ignored():  # a second ^C must not cut the final write short
            done = saved(last[0], ReportStatus.INTERRUPTED)
            done.save(run_dir)
        n = sum(1 for t in done.trials if not t.unfinished)
        raise Interrupted(
            f"interrupted during the fix trials; the diagnosis and {n} finished trial(s) are saved in "
            f"{run_dir} (advisor report {run_dir})",
            signum=signum,
        ) from None
    done = saved(outcome, ReportStatus.COMPLETE)
    return with_kept_whole(done, base, run_dir / outcome.kept_run if outcome.kept_run else None)


def with_kept_whole(report: Report, base: RunCapture | None, kept_dir: Path | None) -> Report:
    """Return ``report`` with the kept fixes projected over the whole run (:mod:`advisor.metrics.whole`).

    ``kept_dir``: where the kept fixes ran under the profiler (their periodic work), or None.
    """
    from advisor.errors import AdvisorError
    from advisor.metrics.whole import EpochArms, kept_whole_run

    trial = report.kept_trial
    if base is None or trial is None:
        return report
    kept = None
    if kept_dir is not None:
        try:
            kept = RunCapture.load(kept_dir)
        except (AdvisorError, OSError, ValueError):
            kept = None  # NOTE: its periodic work is then the baseline's, and the report says so
    change = None
    if trial.time_to_first_step_s is not None and trial.baseline_time_to_first_step_s is not None:
        change = trial.time_to_first_step_s - trial.baseline_time_to_first_step_s
    before, after = trial.baseline_epoch_change_s, trial.epoch_change_s
    epoch = EpochArms((before, after)) if before is not None and after is not None else None
    whole = kept_whole_run(base, kept, trial.speedup, trial.ci_low, trial.ci_high, change,
                           gain_steps=_gain_steps(report), epoch=epoch)
    return replace(report, kept_whole=whole)


def _gain_steps(report: Report) -> int | None:
    """Return the steps a kept fix alone has something to gain on (``Fix.gains_until``), None for all of them."""
    from advisor.fixes import catalog

    if len(report.kept_fixes) != 1:
        return None  # NOTE: a set's speedup cannot be split between its fixes
    fix = catalog.get_fixes().get(report.kept_fixes[0])
    value = report.summary.get(fix.gains_until) if fix is not None and fix.gains_until else None
    return int(value) if isinstance(value, int | float) and value >= 0 else None


def _suggested_fixes(findings: Sequence[Any]) -> list[Any]:
    """Fix references from the findings, highest-impact finding first, each id once."""
    seen: dict[str, Any] = {}
    for finding in sorted(findings, key=lambda f: -f.impact_frac):
        for fix in finding.fixes:
            seen.setdefault(fix.id, fix)
    return list(seen.values())


def _fix_impacts(findings: Sequence[Any]) -> dict[str, float]:
    """Fix id -> the largest share of step time any finding suggesting it could recover."""
    out: dict[str, float] = {}
    for finding in findings:
        for fix in finding.fixes:
            out[fix.id] = max(out.get(fix.id, 0.0), float(finding.impact_frac or 0.0))
    return out


def _gpu_busy(summary: dict[str, float | None]) -> float | None:
    """Read the share of the step the GPU is busy, on a run whose trace has GPU work (else None)."""
    busy = summary.get("gpu_busy_frac")
    return float(busy) if summary.get("has_gpu_flag") == 1 and busy is not None else None
