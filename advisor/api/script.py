"""The backend of ``advisor diagnose``: capture a script, diagnose it, run the fix loop, save the report.

``diagnose_script``: RunSpec -capture-> RunCapture -metrics-> Metrics -rules-> Diagnosis
-fixes-> FixOutcome -report-> Report, saved in the run directory as ``report.json``. The checks
the command makes before anything runs (script, ``--fix`` ids, ``--out``) are here too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from advisor.api.analysis import evaluate
from advisor.api.fixloop import (
    FixOptions,
    _fix_loop_saved,
    fit_server,
    launch_early_server,
    trials_wanted,
)
from advisor.api.process import capture_function
from advisor.capture.end_probe import EndProbe
from advisor.capture.model import RunCapture, RunSpec
from advisor.errors import InputError, UsageError
from advisor.report.model import Report, build_report


@dataclass(frozen=True)
class DiagnoseResult:
    """What ``diagnose_script`` produced: the report, the capture, and where they are on disk."""

    report: Report
    capture: RunCapture
    run_dir: Path


def diagnose_script(
    spec: RunSpec,
    *,
    engine_config: Any = None,
    fix_options: FixOptions = FixOptions(),  # noqa: B008 - frozen: one shared default is safe
    progress: Callable[[Any], None] | None = None,
    trial_progress: Callable[[Any], None] | None = None,
    inline_ignores: bool = True,
) -> DiagnoseResult:
    """Capture a script, diagnose it, try the suggested fixes, and save ``report.json``.

    Script failures do not raise here: the capture records them (``capture.status``) and the
    report is still written, so the caller decides the exit code with everything on disk.
    """
    import time

    from advisor._proc import interrupt_once
    from advisor.capture.set_aside import restored_note, saves_set_aside
    from advisor.fixes.fix import is_out_of_memory
    from advisor.report.model import timing_of

    started = time.perf_counter()
    # NOTE: a file the script's runs would save over is set aside and put back as this ends
    with saves_set_aside() as restored:
        # NOTE: the trials' warm-start server imports torch beside the capture's own start (where two
        # cores are free), paused from the capture's first step until the diagnosis wants trials.
        server = launch_early_server(spec, fix_options)
        end = EndProbe(server) if server is not None else None
        if end is not None:
            end.ask()  # NOTE: answered once the server has imported, before the capture's first step or after it
        try:
            # NOTE: one latch over the capture and the save of what it measured: a second ^C typed
            # right after the first hurries the child's save instead of cutting it (and the report) short.
            with interrupt_once():
                try:
                    capture = capture_function(spec)(spec, _pausing(progress, server, end))
                except KeyboardInterrupt as exc:
                    _save_interrupted(spec, exc, engine_config, inline_ignores, started)
                    raise
            run_dir = Path(capture.run_dir or spec.out_dir)
            # NOTE: a script that runs out of memory (over --memory-budget) still gets the memory fixes.
            fix_loop = fix_options.enabled and (capture.ok or is_out_of_memory(capture))
            if fix_loop:  # the answer must be read before the loop's first request; else the server ends
                capture = _with_end(capture, end, run_dir)
            if not fix_loop and server is not None:
                server.close()
            server = fit_server(server, spec, fix_options, capture) if fix_loop else None
            diagnosis, report = _diagnosed(capture, run_dir, spec, engine_config, inline_ignores)
            if server is not None and not trials_wanted(diagnosis.findings, fix_options):
                server.close()  # nothing to try: its imports would only compete with the report for the cores
                server = None
            if server is not None:
                server.resume()  # NOTE: still paused since the capture: the analysis had both cores
            report = replace(report, timing=timing_of(time.perf_counter() - started, capture, None))
            if fix_loop:
                report = _fix_loop_saved(report, spec, diagnosis, fix_options, trial_progress, run_dir, started, server,
                                         base=capture)
        finally:
            if server is not None:
                server.close()  # the loop ends it; this is for a diagnose that failed before the loop
    if restored:
        report = replace(report, notes=(*report.notes, restored_note(restored)))
    report.save(run_dir)
    return DiagnoseResult(report=report, capture=capture, run_dir=run_dir)


def _pausing(progress: Callable[[Any], None] | None, server: Any, end: EndProbe | None = None) -> Callable[[Any], None] | None:
    """Pass the capture's progress on, pausing ``server``'s imports from the capture's first step.

    Its set-up and first step are not measured; the warm-up steps after it, the timed and the
    profiled steps are, and on two cores the server's imports took one of them. A server still
    timing a run's exit for ``end`` (:mod:`advisor.capture.end_probe`) is paused too, ready or not.
    """
    if server is None:
        return progress

    def relay(event: Any) -> None:
        if event.step >= 1:
            server.pause(busy=end is not None and end.asked)
        if progress is not None:
            progress(event)

    return relay


def _with_end(capture: RunCapture, end: EndProbe | None, run_dir: Path) -> RunCapture:
    """Return ``capture`` with the run's end the server timed, saved in its ``capture.json``; as it is without one."""
    seconds = end.collect() if end is not None else None
    if seconds is None or not capture.ok:
        return capture
    capture = replace(capture, end_s=round(seconds, 4))
    with contextlib.suppress(OSError):
        capture.save(run_dir)
    return capture


def _diagnosed(
    capture: RunCapture, run_dir: Path, spec: RunSpec, engine_config: Any, inline_ignores: bool,
) -> tuple[Any, Report]:
    """Metrics, diagnosis and report of one capture (the traces it lists, its pstats file)."""
    from advisor.metrics.compute import compute_metrics, load_run_traces
    from advisor.metrics.headline_scale import on_headline_scale

    # NOTE: only the traces the capture lists (a crashed run may have none): loaded once, for
    # the metrics and the timeline alike.
    traces = load_run_traces(run_dir, capture)
    pstats = run_dir / capture.pstats_file if capture.pstats_file else None
    metrics = compute_metrics(traces, capture=capture, pstats_path=pstats if pstats and pstats.is_file() else None)
    diagnosis = evaluate(on_headline_scale(metrics, capture.timed.step_times_ms), engine_config,
                         (spec.cwd or Path.cwd(), Path(spec.script).parent), inline_ignores)
    report = build_report(metrics, diagnosis, capture=capture, timeline=_timeline(traces, metrics.focus_rank))
    return diagnosis, replace(report, notes=(*report.notes, *_timeline_note(run_dir)))


def _save_interrupted(
    spec: RunSpec, interrupt: KeyboardInterrupt, engine_config: Any, inline_ignores: bool, started: float,
) -> None:
    """Build ``report.json`` from what an interrupted capture saved, then raise :class:`Interrupted`.

    The capture stage has already written ``capture.json`` (status ``interrupted``) with the
    timed steps measured and any profiled steps finished; without a report, ``advisor report``
    and ``advisor runs`` showed nothing of them. When nothing was saved (interrupted before the
    child started) or the analysis itself fails or is interrupted again, the original interrupt
    goes on unchanged: what is on disk stays as it is.
    """
    import time

    from advisor.api.process import interrupt_signal, signals_ignored
    from advisor.errors import AdvisorError, Interrupted
    from advisor.report.model import ReportStatus, timing_of

    run_dir = Path(spec.out_dir).absolute()
    try:
        capture = RunCapture.load(run_dir)
        if not (capture.timed_steps or capture.profiled_steps):
            return
        _, report = _diagnosed(capture, run_dir, spec, engine_config, inline_ignores)
        report = replace(report, status=ReportStatus.INTERRUPTED,
                         timing=timing_of(time.perf_counter() - started, capture, None))
        with signals_ignored():  # a second ^C must not cut the write short
            report.save(run_dir)
    except (AdvisorError, OSError, ValueError, KeyboardInterrupt):
        return  # NOTE: the capture is on disk; `advisor analyze` can still build the report later
    # NOTE: profiled steps count only when their trace was written (an export cut short has none)
    measured = f"{capture.timed_steps} timed step(s)" + (
        f" and {capture.profiled_steps} profiled step(s)" if capture.profiled_steps and capture.trace_files else "")
    raise Interrupted(
        f"interrupted during the capture; the {measured} measured are kept in {run_dir} "
        f"(advisor report {run_dir})",
        signum=interrupt_signal(interrupt),
    ) from None


def _timeline(traces: Sequence[Any], rank: int | None = None) -> tuple[dict[str, Any], ...]:
    """Events of one representative step of ``rank`` (the first rank by default), for the HTML timeline."""
    if not traces:
        return ()
    from advisor.metrics.timeline import step_timeline

    trace = next((t for t in traces if t.rank == rank), traces[0])
    try:
        return tuple(step_timeline(trace))
    except Exception:  # NOTE: the timeline is decoration; never fail a report over it
        return ()


def _timeline_note(run_dir: Path) -> tuple[str, ...]:
    """Say which one file opens the run's whole timeline in Perfetto (merged when there are several traces)."""
    from advisor.report.perfetto import PERFETTO_HOWTO, timeline_file

    try:
        path = timeline_file(run_dir)
    except (InputError, OSError):
        return ()  # NOTE: the timeline file is a convenience; the analysis already read the traces
    return (f"timeline: {PERFETTO_HOWTO.format(path=path)}",) if path is not None else ()


def find_module_file(name: str, search: Sequence[str | Path]) -> Path:
    """Return the file ``python -m name`` runs, found without importing (``diagnose -m``)."""
    from advisor.capture.modules import find_module_file as find

    return find(name, search)


def validate_script(script: Path) -> Path:
    """Return ``script`` resolved, or raise UsageError when it is missing or not Python."""
    from advisor.capture.run import validate_script as _validate

    return _validate(script)


def check_fix_ids(fix_ids: Sequence[str]) -> None:
    """Check ``--fix`` ids against the fix registry before anything runs.

    Raises:
        UsageError: An id is unknown (the message suggests the closest known one).
    """
    if not fix_ids:
        return
    import difflib

    from advisor.fixes.catalog import fix_ids as known_ids

    known = sorted(known_ids())
    for fix_id in fix_ids:
        if fix_id not in known:
            close = difflib.get_close_matches(fix_id, known, n=1)
            tip = f"did you mean {close[0]}?" if close else f"known fixes: {', '.join(known)}"
            raise UsageError(f"unknown fix id {fix_id!r} for --fix; {tip}")


def new_run_dir(base: Path) -> Path:
    """Create a fresh run directory at ``base`` (``base-2``, ``base-3``... when taken) and return it.

    Raises:
        InputError: It cannot be created (read-only or full file system), saying to pass --out.
    """
    from advisor.rundir import create_unique

    return create_unique(base)


def check_out_dir(out_dir: Path, replace: bool = False) -> Path:
    """Refuse an ``--out`` folder a capture could not use, or an existing run unless ``replace``.

    Raises:
        UsageError: The folder is a file, not empty and not an advisor run directory, inside
            another run directory, or a run directory already (without ``replace``: the message
            says what it holds).
    """
    from advisor.rundir import check, check_not_inside_a_run

    check_not_inside_a_run(out_dir)
    return check(out_dir, replace)


def rendezvous_env(
    nnodes: int, node_rank: int | None, endpoint: str | None, backend: str = "c10d", rdzv_id: str = "advisor"
) -> dict[str, str]:
    """Build torchrun's ``PET_*`` variables for a multi-node job (:func:`advisor.distributed.launch.rendezvous_env`)."""
    from advisor.distributed.launch import rendezvous_env as env

    return env(nnodes, node_rank, endpoint, backend, rdzv_id)


def node_dir_name(node_rank: int) -> str:
    """Name node ``node_rank``'s run directory inside a multi-node job's output folder."""
    from advisor.distributed.launch import node_dir_name as name

    return name(node_rank)
