"""The library API the CLI calls: whole pipelines, stage by stage.

``diagnose_script``: RunSpec -capture-> RunCapture -metrics-> Metrics -rules-> Diagnosis
-fixes-> FixOutcome -report-> Report, saved in the run directory as ``report.json``.
``analyze_report``: the same from metrics on, for traces a user already has.

Stage modules are imported inside the functions so that reading traces never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from advisor.capture.model import RunCapture, RunSpec
from advisor.engine.model import Diagnosis
from advisor.errors import InputError
from advisor.fixes.model import FixOutcome
from advisor.metrics.model import Metrics
from advisor.report.model import Report, build_report


@dataclass(frozen=True)
class FixOptions:
    """How the fix loop runs.

    Attributes:
        enabled: False skips the loop (``--no-fixes``).
        unsafe: Also try fixes that may change numerics (``--unsafe-fixes``).
        only: Try only these fix ids (``--fix``, repeatable).
        repeats: Interleaved baseline/variant repeats per fix.
        write: Apply the diff to the user's script, keeping a ``.bak`` copy (``--write``).
    """

    enabled: bool = True
    unsafe: bool = False
    only: tuple[str, ...] = ()
    repeats: int = 3
    write: bool = False


@dataclass(frozen=True)
class DiagnoseResult:
    """What ``diagnose_script`` produced: the report, the capture, and where they are on disk."""

    report: Report
    capture: RunCapture
    run_dir: Path


def _timeline(traces: Sequence[Any]) -> tuple[dict[str, Any], ...]:
    """Events of one representative step of the first rank, for the HTML timeline."""
    if not traces:
        return ()
    from advisor.metrics.timeline import step_timeline

    try:
        return tuple(step_timeline(traces[0]))
    except Exception:  # NOTE: the timeline is decoration; never fail a report over it
        return ()


def evaluate(
    metrics: Metrics, engine_config: Any = None, search_dirs: Sequence[Path] = (), inline_ignores: bool = True
) -> Diagnosis:
    """Run the rule engine over metrics, then drop findings ``# advisor: ignore`` comments cover.

    ``search_dirs`` are where relative source paths from the trace are looked up.
    """
    from advisor.engine.evaluate import diagnose
    from advisor.engine.suppress import apply_inline_ignores

    diagnosis = diagnose(metrics, engine_config)
    return apply_inline_ignores(diagnosis, search_dirs) if inline_ignores else diagnosis


def analyze_report(path: str | Path, engine_config: Any = None, inline_ignores: bool = True) -> Report:
    """Diagnose a trace file, a directory of traces, or a saved run directory.

    ``inline_ignores=False`` (``--no-inline-ignores``) keeps findings that comments suppress.

    Raises:
        InputError: the path is missing or holds no readable trace (TraceError).
    """
    from advisor.metrics.compute import compute_metrics, load_input

    path = Path(path)
    if not path.exists():
        raise InputError(f"{path} does not exist; pass a .json/.json.gz trace, a folder of traces or a run directory")
    traces, capture, pstats = load_input(path)
    metrics = compute_metrics(traces, capture=capture, pstats_path=pstats, source=str(path))
    # NOTE: profiler stacks name bare files (``train.py``): look beside the trace and the script too.
    dirs = (Path.cwd(), path if path.is_dir() else path.parent, *([Path(capture.script).parent] if capture and capture.script else []))
    diagnosis = evaluate(metrics, engine_config, dirs, inline_ignores)
    return build_report(metrics, diagnosis, capture=capture, timeline=_timeline(traces))


def diagnose_script(
    spec: RunSpec,
    *,
    engine_config: Any = None,
    fix_options: FixOptions = FixOptions(),
    progress: Callable[[Any], None] | None = None,
    trial_progress: Callable[[Any], None] | None = None,
    inline_ignores: bool = True,
) -> DiagnoseResult:
    """Capture a script, diagnose it, try the suggested fixes, and save ``report.json``.

    Script failures do not raise here: the capture records them (``capture.status``) and the
    report is still written, so the caller decides the exit code with everything on disk.
    """
    from advisor.metrics.compute import compute_metrics, load_run_traces

    capture = _runner(spec)(spec, progress)
    run_dir = Path(capture.run_dir or spec.out_dir)
    # NOTE: only the traces the capture lists (a crashed run may have none): loaded once, for
    # the metrics and the timeline alike.
    traces = load_run_traces(run_dir, capture)
    pstats = run_dir / capture.pstats_file if capture.pstats_file else None
    metrics = compute_metrics(traces, capture=capture, pstats_path=pstats if pstats and pstats.is_file() else None)
    diagnosis = evaluate(metrics, engine_config, (spec.cwd or Path.cwd(), Path(spec.script).parent), inline_ignores)
    outcome: FixOutcome | None = None
    if fix_options.enabled and capture.ok:
        outcome = try_fixes(spec, diagnosis, fix_options, trial_progress)
    report = build_report(metrics, diagnosis, capture=capture, fixes=outcome, timeline=_timeline(traces))
    report.save(run_dir)
    return DiagnoseResult(report=report, capture=capture, run_dir=run_dir)


def _runner(spec: RunSpec) -> Callable[..., RunCapture]:
    """Pick the capture function for ``spec``: torchrun for multi-process jobs, a plain child otherwise."""
    if spec.nproc_per_node > 1 or spec.nnodes > 1:
        from advisor.capture.launch import capture_distributed

        return capture_distributed
    from advisor.capture.run import capture

    return capture


def try_fixes(
    spec: RunSpec,
    diagnosis: Diagnosis,
    options: FixOptions,
    progress: Callable[[Any], None] | None = None,
) -> FixOutcome:
    """Measure the fixes the findings suggest (or ``options.only``); the loop also builds the diff.

    Trial runs go to ``<run>/trials/``; the user's script is only written with ``--write``.
    """
    from advisor.fixes.diff import write_diff
    from advisor.fixes.trials import run_trials

    outcome = run_trials(
        replace(spec, quiet=True),
        _suggested_fixes(diagnosis.findings),
        unsafe=options.unsafe,
        only=options.only,
        repeats=options.repeats,
        runner=_runner(spec),
        progress=progress,
    )
    if outcome.diff and options.write:
        backup = write_diff(Path(spec.script), outcome.diff)
        outcome = replace(outcome, notes=(*outcome.notes, f"applied the diff to {spec.script} (backup: {backup})"))
    return outcome


def _suggested_fixes(findings: Sequence[Any]) -> list[Any]:
    """Fix references from the findings, highest-impact finding first, each id once."""
    seen: dict[str, Any] = {}
    for finding in sorted(findings, key=lambda f: -f.impact_frac):
        for fix in finding.fixes:
            seen.setdefault(fix.id, fix)
    return list(seen.values())
