"""The library API, and the one door the CLI goes through for every command.

``diagnose_script``: RunSpec -capture-> RunCapture -metrics-> Metrics -rules-> Diagnosis
-fixes-> FixOutcome -report-> Report, saved in the run directory as ``report.json``.
``analyze_report``: the same from metrics on, for traces a user already has.
The other commands (``report``, ``compare``, ``runs``, ``rules``, ``config``, ``tensorboard``)
have their functions here too, so ``advisor.cli`` imports no stage package (tests/test_layers.py).

Stage modules are imported inside the functions so that reading traces never imports torch.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from advisor.capture.model import RunCapture, RunSpec, RunStatus
from advisor.config import ANY_OPTION, ResolvedConfig, Setting, describe_source
from advisor.engine.model import Diagnosis, EngineConfig
from advisor.engine.rules import Rule, RuleSet
from advisor.engine.selection import Selection
from advisor.errors import InputError, UsageError
from advisor.fixes.model import FixOutcome
from advisor.metrics.model import Metrics
from advisor.report.model import Report, build_report

if TYPE_CHECKING:
    from advisor.report.compare import Comparison
    from advisor.report.runs import RunSummary
    from advisor.report.tensorboard import PreparedLogdir

__all__ = [
    "DiagnoseResult",
    "EngineConfig",
    "FixOptions",
    "Report",
    "Rule",
    "RuleSet",
    "Selection",
    "ResolvedConfig",
    "RunCapture",
    "RunSpec",
    "RunStatus",
    "Setting",
    "analyze",
    "analyze_report",
    "node_dir_name",
    "rendezvous_env",
    "compare_paths",
    "config_options",
    "config_view",
    "describe_source",
    "diagnose",
    "diagnose_script",
    "engine_config",
    "exit_code_for",
    "explain_fixes",
    "failing_lines",
    "fix_vocabulary",
    "fixes_reference",
    "list_fixes",
    "list_runs",
    "live_progress",
    "load",
    "load_report",
    "load_side",
    "prepare_tensorboard",
    "regression",
    "render_runs",
    "report_schema",
    "rule_set",
    "serve_tensorboard",
    "tensorboard_check",
    "validate_script",
    "write_comparison",
    "write_report",
]


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


@dataclass(frozen=True)
class DiagnoseResult:
    """What ``diagnose_script`` produced: the report, the capture, and where they are on disk."""

    report: Report
    capture: RunCapture
    run_dir: Path


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


def evaluate(
    metrics: Metrics, engine_config: Any = None, search_dirs: Sequence[Path] = (), inline_ignores: bool = True
) -> Diagnosis:
    """Run the rule engine over metrics, then drop findings ``# advisor: ignore`` comments cover.

    ``search_dirs`` are where relative source paths from the trace are looked up.
    """
    from advisor.engine.evaluate import diagnose
    from advisor.engine.suppress import apply_inline_ignores

    diagnosis = diagnose(metrics, engine_config, rules=rule_set())
    return apply_inline_ignores(diagnosis, search_dirs) if inline_ignores else diagnosis


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


def analyze_report(
    path: str | Path | Sequence[str | Path],
    engine_config: Any = None,
    inline_ignores: bool = True,
    *,
    jobs: int | None = None,
) -> Report:
    """Diagnose a trace file, a directory of traces, or a saved run directory.

    Several paths (or a folder of ``node<R>/`` run directories) are the parts of one multi-node
    job, merged (:mod:`advisor.distributed.nodes`); the report names each rank's node.
    ``inline_ignores=False`` (``--no-inline-ignores``) keeps findings that comments suppress.
    ``jobs`` rank files are analysed at a time, in worker processes (None: one per core; see
    :mod:`advisor.distributed.parallel`). ``engine_config`` may be a function returning it: it is
    then called while the workers run (a bad selection still stops them, and is raised).

    Raises:
        InputError: the path is missing or holds no readable trace (TraceError).
    """
    from advisor.distributed.nodes import locate_job, with_nodes
    from advisor.distributed.parallel import analyze_job, default_jobs
    from advisor.metrics.compute import merge_digests
    from advisor.metrics.sources import user_predicate

    paths = [Path(p) for p in ([path] if isinstance(path, (str, Path)) else path)]
    if not paths:
        raise InputError("no path given; pass a .json/.json.gz trace, a folder of traces or a run directory")
    job = locate_job(paths)
    capture = job.capture
    resolved: dict[str, Any] = {}

    def meanwhile() -> None:
        resolved["config"] = engine_config() if callable(engine_config) else engine_config
        _load_evaluation()

    digests, focus = analyze_job(job.files, default_jobs() if jobs is None else jobs, user_predicate(capture),
                                 meanwhile=meanwhile)
    source = " ".join(map(str, paths))
    metrics = with_nodes(merge_digests(digests, capture=capture, pstats_path=job.pstats, source=source, focus=focus), job)
    # NOTE: profiler stacks name bare files (``train.py``): look beside the trace and the script too.
    dirs = (
        Path.cwd(),
        *(p if p.is_dir() else p.parent for p in paths),
        *([Path(capture.script).parent] if capture and capture.script else []),
    )
    diagnosis = evaluate(metrics, resolved["config"], dirs, inline_ignores)
    # the timeline is the straggler's when the tables are (merge_digests' focus)
    shown = focus or (digests[0] if digests else None)
    extras = shown.lead if shown is not None else None
    return build_report(metrics, diagnosis, capture=capture, timeline=extras.timeline if extras else ())


def _load_evaluation() -> None:
    """Import what the rule engine and the renderers need (done while rank workers run)."""
    # NOTE: about a tenth of a second of imports that would otherwise run after the workers,
    # in series; while they run, this process only waits.
    import advisor.engine.evaluate
    import advisor.engine.suppress
    import advisor.report.render  # noqa: F401

    rule_set()


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
    import time

    from advisor.fixes.fix import is_out_of_memory
    from advisor.metrics.compute import compute_metrics, load_run_traces
    from advisor.report.model import timing_of

    started = time.perf_counter()
    capture = _runner(spec)(spec, progress)
    run_dir = Path(capture.run_dir or spec.out_dir)
    # NOTE: only the traces the capture lists (a crashed run may have none): loaded once, for
    # the metrics and the timeline alike.
    traces = load_run_traces(run_dir, capture)
    pstats = run_dir / capture.pstats_file if capture.pstats_file else None
    metrics = compute_metrics(traces, capture=capture, pstats_path=pstats if pstats and pstats.is_file() else None)
    diagnosis = evaluate(metrics, engine_config, (spec.cwd or Path.cwd(), Path(spec.script).parent), inline_ignores)
    report = build_report(metrics, diagnosis, capture=capture, timeline=_timeline(traces, metrics.extra.get("focus_rank")))
    report = replace(report, timing=timing_of(time.perf_counter() - started, capture, None),
                     notes=(*report.notes, *_timeline_note(run_dir)))
    # NOTE: a script that runs out of memory (over --memory-budget) still gets the memory fixes.
    if fix_options.enabled and (capture.ok or is_out_of_memory(capture)):
        report = _fix_loop_saved(report, spec, diagnosis, fix_options, trial_progress, run_dir, started)
    report.save(run_dir)
    return DiagnoseResult(report=report, capture=capture, run_dir=run_dir)


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


def check_fix_ids(fix_ids: Sequence[str]) -> None:
    """Check ``--fix`` ids against the fix registry before anything runs.

    Raises:
        UsageError: An id is unknown (the message suggests the closest known one).
    """
    if not fix_ids:
        return
    import difflib

    from advisor.fixes.registry import fix_ids as known_ids

    known = sorted(known_ids())
    for fix_id in fix_ids:
        if fix_id not in known:
            close = difflib.get_close_matches(fix_id, known, n=1)
            tip = f"did you mean {close[0]}?" if close else f"known fixes: {', '.join(known)}"
            raise UsageError(f"unknown fix id {fix_id!r} for --fix; {tip}")


def _fix_loop_saved(
    report: Report, spec: RunSpec, diagnosis: Diagnosis, fix_options: FixOptions,
    trial_progress: Callable[[Any], None] | None, run_dir: Path, started: float,
) -> Report:
    """Run the fix loop with ``report.json`` saved before it and after every trial run.

    Ctrl-C or SIGTERM during the loop stops the trial's children (the capture stage ends its
    process group on any exception), saves the report with status ``interrupted`` and what was
    measured, and raises :class:`~advisor.errors.Interrupted` (exit 130).
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

    asked_to_stop = [False]

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
        with _sigterm_interrupts(asked_to_stop):
            outcome = try_fixes(spec, diagnosis, fix_options, trial_progress, checkpoint=checkpoint)
    except KeyboardInterrupt:
        with _signals_ignored():  # a second ^C must not cut the final write short
            done = saved(last[0], ReportStatus.INTERRUPTED)
            done.save(run_dir)
        n = sum(1 for t in done.trials if not t.unfinished)
        raise Interrupted(
            f"interrupted during the fix trials; the diagnosis and {n} finished trial(s) are saved in "
            f"{run_dir} (advisor report {run_dir})"
        ) from None
    return saved(outcome, ReportStatus.COMPLETE)


@contextmanager
def _sigterm_interrupts(asked: list[bool] | None = None) -> Iterator[None]:
    """Make SIGTERM act like Ctrl-C (KeyboardInterrupt) inside the block, in the main thread.

    Both SIGTERM and SIGINT also set ``asked[0]``, so a caller can raise again at its next
    checkpoint if the first KeyboardInterrupt was swallowed.
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: Any) -> None:
        if asked is not None:
            asked[0] = True
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, on_term) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def _signals_ignored() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM inside the block (main thread only), restoring them after."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _runner(spec: RunSpec) -> Callable[..., RunCapture]:
    """Pick the capture function for ``spec``: torchrun for multi-process jobs, a plain child otherwise."""
    if spec.nproc_per_node > 1 or spec.nnodes > 1:
        from advisor.distributed.launch import capture_distributed

        return capture_distributed
    from advisor.capture.run import capture

    return capture


def try_fixes(
    spec: RunSpec,
    diagnosis: Diagnosis,
    options: FixOptions,
    progress: Callable[[Any], None] | None = None,
    checkpoint: Callable[[FixOutcome], None] | None = None,
) -> FixOutcome:
    """Measure the fixes the findings suggest (or ``options.only``); the loop also builds the diff.

    Trial runs go to ``<run>/trials/``; the user's script is only written with ``--write``.
    Single-process trial runs are forked from a warm-start server unless ``options.cold_start``
    (:func:`advisor.capture.warm.warm_runner`; it falls back to cold starts by itself).
    """
    from advisor.capture.warm import warm_runner
    from advisor.fixes.diff import write_diff
    from advisor.fixes.trials import INSTALLER, run_trials
    from advisor.rundir import TRIALS_DIR

    trial_spec = replace(spec, quiet=True)
    warm = warm_runner(
        trial_spec, _runner(spec), enabled=not options.cold_start, modules=(INSTALLER,),
        log=Path(spec.out_dir) / TRIALS_DIR / "warm-start.log",
    )
    with warm as (runner, started):
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
            budget_s=options.budget_s,
            early_stop=not options.exhaustive,
            settle_warmup=not options.exhaustive,
            skip_inert=not options.exhaustive,
            profile_kept=spec.profiled_steps > 0,
        )
    if started.start_s:
        # NOTE: the server's own start belongs to no run; it is overhead the loop paid once.
        outcome = replace(outcome, phases_s={**outcome.phases_s, "server": round(started.start_s, 4)})
    outcome = replace(outcome, notes=(*outcome.notes, *started.notes()))
    if outcome.diff and options.write:
        backup = write_diff(Path(spec.script), outcome.diff)
        outcome = replace(outcome, notes=(*outcome.notes, f"applied the diff to {spec.script} (backup: {backup})"))
    return outcome


def sweep_script(
    spec: RunSpec, batch_sizes: Sequence[int], precisions: Sequence[str], repeats: int = 2,
    progress: Callable[[Any], None] | None = None, accumulations: Sequence[int] = (1,),
    runner: Callable[..., RunCapture] | None = None, cold_start: bool = False,
) -> Any:
    """Run ``advisor sweep``: every batch size x precision x accumulation cell at run time; return the SweepTable.

    Cell runs go to ``<spec.out_dir>/trials/``; the table is saved as ``<spec.out_dir>/sweep.json``
    after every run (status ``running``) and at the end, and the recommended cell's diff as
    ``sweep.diff``. Ctrl-C or SIGTERM stops the run in flight (the capture stage ends its process
    group), saves the table with the cells finished so far and status ``interrupted``, and raises
    :class:`~advisor.errors.Interrupted` (exit 130).

    Cell runs are forked from a warm-start server, as the fix loop's trial runs are, unless
    ``cold_start`` (or a ``runner`` of the caller's is given).
    """
    from advisor.capture.warm import warm_runner
    from advisor.errors import Interrupted
    from advisor.fixes.trials import INSTALLER
    from advisor.rundir import SWEEP_DIFF_FILE, SWEEP_FILE, TRIALS_DIR, create_unique
    from advisor.sweep.model import CellStatus, SweepStatus, SweepTable
    from advisor.sweep.render import render_json
    from advisor.sweep.run import parse_cells, run_sweep

    cells = parse_cells(batch_sizes, precisions, accumulations)
    out = create_unique(spec.out_dir)
    last: list[Any] = [SweepTable(script=str(spec.script), args=tuple(spec.args), status=SweepStatus.RUNNING)]
    asked_to_stop = [False]

    def save(table: Any) -> None:
        (out / SWEEP_FILE).write_text(render_json(table), encoding="utf-8")

    def checkpoint(table: Any) -> None:
        last[0] = table
        save(table)
        if asked_to_stop[0]:
            raise KeyboardInterrupt  # a swallowed signal still stops the sweep at the next run's end

    save(last[0])
    cell_spec = replace(spec, out_dir=out, quiet=True)
    warm = warm_runner(
        cell_spec, _runner(spec), enabled=runner is None and not cold_start, modules=(INSTALLER,),
        log=out / TRIALS_DIR / "warm-start.log",
    )
    try:
        with _sigterm_interrupts(asked_to_stop), warm as (warm_run, started):
            table = run_sweep(
                cell_spec, cells, repeats=repeats, runner=runner or warm_run,
                progress=progress, checkpoint=checkpoint,
            )
            table = replace(table, notes=(*table.notes, *started.notes("cell runs")))
    except KeyboardInterrupt:
        with _signals_ignored():  # a second ^C must not cut the final write short
            done = replace(last[0], status=SweepStatus.INTERRUPTED)
            save(done)
        n = sum(1 for x in done.results if x.status != CellStatus.NOT_RUN and not x.unfinished)
        raise Interrupted(
            f"interrupted; {n} finished cell(s) of {len(cells)} are saved in {out / SWEEP_FILE}"
        ) from None
    save(table)
    if table.diff:
        (out / SWEEP_DIFF_FILE).write_text(table.diff, encoding="utf-8")
    return table


def load_sweep(path: Path) -> Any:
    """Read a saved SweepTable from a sweep's run directory or its ``sweep.json``."""
    from advisor.sweep.model import load_table

    return load_table(path)


def sweep_format(fmt: str | None, output: Path | None) -> str:
    """Decide a sweep's output format before it runs: ``fmt``, else ``output``'s extension, else text.

    Raises:
        UsageError: An extension advisor does not know, a format ``advisor sweep`` does not
            write, HTML bound for a terminal, or ``-o`` naming a run directory's own file; all
            before any run is spent.
    """
    from advisor.report.render import resolve_format
    from advisor.rundir import SWEEP_FILE, is_managed_name, refuse_managed_output
    from advisor.sweep.render import RENDERERS

    try:
        chosen = resolve_format(fmt, output)
    except UsageError:
        raise UsageError(
            f"cannot tell the format from {output}; pass --format ({', '.join(RENDERERS)}) or use .txt, .md, .json or .html"
        ) from None
    if chosen not in RENDERERS:
        raise UsageError(f"advisor sweep writes {', '.join(RENDERERS)}, not {chosen!r}")
    if chosen == "html" and (output is None or str(output) == "-") and sys.stdout.isatty():
        raise UsageError("HTML is not written to a terminal; pass -o sweep.html or pipe it")
    if output is not None and str(output) != "-":
        refuse_managed_output(output)
        target = Path(output).absolute()
        if (target.parent / SWEEP_FILE).is_file() and is_managed_name(target.name):
            # NOTE: a sweep's own folder holds no capture, so refuse_managed_output does not know it
            raise UsageError(f"{output} would overwrite {target.name} of the sweep in {target.parent}; choose another -o path")
    return chosen


def write_sweep(table: Any, fmt: str | None, output: Path | None) -> Path | None:
    """Render a SweepTable and write it as diagnose writes reports: to ``output`` (atomically), else stdout.

    The format is ``fmt``, else ``output``'s extension, else text; HTML is refused on a terminal
    and ``-o`` never overwrites a run directory's own files.
    """
    from advisor.report.render import resolve_format, write_output

    chosen = resolve_format(fmt, output)
    return write_output(render_sweep(table, chosen), chosen, output)


def render_sweep(table: Any, fmt: str) -> str:
    """Render a SweepTable as ``text``, ``markdown``, ``json`` or ``html``."""
    from advisor.sweep.render import RENDERERS

    if fmt not in RENDERERS:
        raise UsageError(f"advisor sweep writes {', '.join(RENDERERS)}, not {fmt!r}")
    return RENDERERS[fmt](table)


def _fix_impacts(findings: Sequence[Any]) -> dict[str, float]:
    """Fix id -> the largest share of step time any finding suggesting it could recover."""
    out: dict[str, float] = {}
    for finding in findings:
        for fix in finding.fixes:
            out[fix.id] = max(out.get(fix.id, 0.0), float(finding.impact_frac or 0.0))
    return out


def _suggested_fixes(findings: Sequence[Any]) -> list[Any]:
    """Fix references from the findings, highest-impact finding first, each id once."""
    seen: dict[str, Any] = {}
    for finding in sorted(findings, key=lambda f: -f.impact_frac):
        for fix in finding.fixes:
            seen.setdefault(fix.id, fix)
    return list(seen.values())


# --- the other commands: thin functions so the CLI reaches every stage through this module ---


def new_run_dir(base: Path) -> Path:
    """Create a fresh run directory at ``base`` (``base-2``, ``base-3``... when taken) and return it.

    Raises:
        InputError: It cannot be created (read-only or full file system), saying to pass --out.
    """
    from advisor.rundir import create_unique

    return create_unique(base)


def check_out_dir(out_dir: Path) -> Path:
    """Refuse an ``--out`` folder a capture could not use (a file, or someone else's non-empty folder).

    Raises:
        UsageError: The folder is a file, or not empty and not an advisor run directory.
    """
    from advisor.rundir import check

    return check(out_dir)


def validate_script(script: Path) -> Path:
    """Return ``script`` resolved, or raise UsageError when it is missing or not Python."""
    from advisor.capture.run import validate_script as _validate

    return _validate(script)


def engine_config(
    select: Sequence[str] | None,
    extend_select: Sequence[str] = (),
    ignore: Sequence[str] = (),
    preview: bool = False,
    start: Path | None = None,
    option_keys: Collection[str] = (),
) -> EngineConfig:
    """Layer ``[tool.advisor]`` from the closest config file under the command line's selection.

    Args:
        select: ``--select`` codes, or None/empty to keep the config file's selection.
        extend_select: ``--extend-select`` codes.
        ignore: ``--ignore`` codes.
        preview: ``--preview``; False keeps the config file's setting.
        start: Where the config search starts (default: the current directory).
        option_keys: The command options the file may also set (see :mod:`advisor.config`).
    """
    from advisor.config import resolve_engine_config

    return resolve_engine_config(
        select=tuple(select) if select else None,
        extend_select=tuple(extend_select),
        ignore=tuple(ignore),
        preview=preview or None,
        start=start or Path.cwd(),
        option_keys=option_keys,
    )


def config_options(start: Path | None, option_keys: Collection[str]) -> dict[str, tuple[Any, Path]]:
    """Return the command options ``[tool.advisor]`` sets for ``start``: key -> (value as written, file).

    Raises:
        UsageError: the config file is invalid or holds an unknown key.
    """
    from advisor.config import options_for

    return options_for(start or Path.cwd(), option_keys)


def load_report(run_dir: str | Path) -> Report:
    """Return the report saved in a run directory (or a ``report.json`` file)."""
    return Report.load(Path(run_dir))


def write_report(report: Report, fmt: str | None, output: Path | None) -> Path | None:
    """Render ``report`` and write it to ``output``, or to stdout when ``output`` is None or ``-``.

    Args:
        report: The report to render.
        fmt: ``--format``; None takes the format from ``output``'s extension, else text.
        output: ``-o``.

    Returns:
        The file written, or None for stdout.
    """
    from advisor.report.render import render, resolve_format, use_color, write_output

    chosen = resolve_format(fmt, output)
    return write_output(render(report, chosen, color=use_color(chosen, output)), chosen, output)


def exit_code_for(report: Report, fail_on: str) -> int:
    """Return the exit code ``--fail-on`` gives ``report`` (1 when findings at or above it remain)."""
    from advisor.report.gate import gate

    return gate(report, fail_on)


def failing_lines(report: Report, fail_on: str) -> tuple[str, ...]:
    """Return one line per finding that makes ``--fail-on`` fail (code, severity, message, where)."""
    from advisor.report.gate import failing_lines as _failing_lines

    return _failing_lines(report, fail_on)


def load_side(path: str | Path) -> Report:
    """Return a Report for one side of ``advisor compare``.

    Args:
        path: A run directory holding ``report.json``, a ``report.json`` file, or a trace file
            or directory of traces (analysed with :func:`analyze_report`).

    Raises:
        InputError: The path does not exist or cannot be read as either.
    """
    from advisor.report.compare import looks_like_report

    p = Path(path)
    if not p.exists():
        raise InputError(f"{p} does not exist; pass a run directory, a report.json or a trace")
    if looks_like_report(p):
        return Report.load(p)
    return analyze_report(p)


def compare_paths(
    before: str | Path | Sequence[str | Path], after: str | Path | Sequence[str | Path], *, allow_mismatch: bool = False,
) -> Comparison:
    """Compare runs, reports or traces (``before`` -> ``after``), one or a group of them a side.

    Args:
        before: The run, report or trace before the change, or several runs of it (the
            interval is then over runs).
        after: The one(s) after it.
        allow_mismatch: Compare runs of different scripts anyway (the comparison then gives no
            speedup and says why).

    Raises:
        UsageError: The sides ran different scripts and ``allow_mismatch`` is not set.
    """
    from advisor.report.compare import compare_groups, script_mismatch
    from advisor.report.compare_stats import kept_trial, run_dir_noise

    paths_a = [before] if isinstance(before, (str, Path)) else list(before)
    paths_b = [after] if isinstance(after, (str, Path)) else list(after)
    a, b = [load_side(p) for p in paths_a], [load_side(p) for p in paths_b]
    for path, side in zip((*paths_a[1:], *paths_b), (*a[1:], *b), strict=True):
        mismatch = script_mismatch(a[0], side)
        if mismatch is not None and not allow_mismatch:
            raise UsageError(
                f"not comparing {paths_a[0]} with {path}: {mismatch}; compare runs of the same script, "
                "or pass --allow-mismatch to see the comparison without a speedup"
            )
    # NOTE: a diagnose's baseline trial runs are that script's run-to-run noise, whichever side
    # holds them (RUN/kept reads its parent's); the trial figure only for a single RUN/kept.
    noise = next((n for n in (run_dir_noise(p) for p in (*paths_a, *paths_b)) if n is not None), None)
    trial = kept_trial(paths_b[0]) if len(paths_b) == 1 else None
    return compare_groups(a, b, noise=noise, trial=trial)


def regression(comparison: Comparison, max_pct: float) -> str | None:
    """Return why ``comparison`` fails ``--fail-on-regression max_pct`` (None when it passes).

    Raises:
        UsageError: The comparison has no speedup to check.
    """
    from advisor.report.gate import regression as _regression

    return _regression(comparison, max_pct)


def write_comparison(comparison: Comparison, fmt: str | None, output: Path | None) -> Path | None:
    """Render a comparison and write it to ``output`` or stdout; return the file written, if any."""
    from advisor.report.compare_render import render_comparison
    from advisor.report.render import resolve_format, use_color, write_output

    chosen = resolve_format(fmt, output)
    return write_output(render_comparison(comparison, chosen, color=use_color(chosen, output)), chosen, output)


def list_runs(directory: Path, limit: int | None = None) -> list[RunSummary]:
    """Return the saved runs under ``directory``, newest first (at most ``limit``)."""
    from advisor.report.runs import list_runs as _list_runs

    return _list_runs(directory, limit=limit)


def render_runs(rows: Sequence[RunSummary], directory: Path) -> str:
    """Render the runs table as text, coloured and as wide as the terminal when stdout is one."""
    import shutil

    from advisor.report.render import use_color
    from advisor.report.runs_render import render_runs_text

    color = use_color("text", None)
    width = shutil.get_terminal_size().columns if color else 160
    return render_runs_text(rows, directory, color=color, width=width)


def fix_vocabulary() -> dict[str, str]:
    """Return the fix catalog's vocabulary, fix id -> safety, that rules must use."""
    from advisor.fixes.catalog import get_fixes

    return {fix.id: fix.safety.value for fix in get_fixes().values()}


def rule_set() -> RuleSet:
    """Every rule advisor ships (the files under ``rules/``), validated, fix ids included."""
    from advisor.engine.rules import check_fix_refs, default_rules

    rules = default_rules()
    # NOTE: the engine cannot import the fix catalog (the fix stage depends on the engine), so
    # the door checks the rules' fix ids against it.
    check_fix_refs(rules, fix_vocabulary())
    return rules


def config_view(start: Path, option_keys: Collection[str] = ()) -> tuple[ResolvedConfig, Selection]:
    """Return the configuration the closest config file above ``start`` gives, and the rules it selects."""
    from advisor.config import resolve_config
    from advisor.engine.selection import select_rules

    resolved = resolve_config(start=start, option_keys=option_keys)
    return resolved, select_rules(rule_set(), resolved.engine)


def live_progress(title: str) -> tuple[Callable[[Any], None], Callable[[str], None], Callable[[], None]]:
    """Progress on stderr: a rich bar for the capture, then one line per fix-trial run.

    Returns:
        ``(on_capture_event, on_trial_line, stop)``; ``stop`` ends the bar and may be called twice.
    """
    from rich.markup import escape

    from advisor.capture.progress import LiveProgress, ProgressConsole

    console = ProgressConsole()
    live = LiveProgress(console=console, title=title)
    live.__enter__()
    state = {"live": True}

    status: dict[str, Any] = {"spinner": None, "last": None}

    def stop() -> None:
        if state["live"]:
            state["live"] = False
            live.__exit__(None, None, None)
        if status["spinner"] is not None:
            status["spinner"].stop()
            status["spinner"] = None

    def on_trial(event: Any) -> None:
        if state["live"]:
            state["live"] = False  # the capture bar is finished once trials start
            live.__exit__(None, None, None)
        text = escape(event.line())
        if getattr(event, "in_flight", ""):
            # NOTE: a run in flight updates one transient line on a terminal; in a log (not a
            # terminal) it gets a line per phase, never one per step.
            if console.is_terminal:
                if status["spinner"] is None:
                    status["spinner"] = console.status(f"[dim]fix trial[/dim] {text}")
                    status["spinner"].start()
                else:
                    status["spinner"].update(f"[dim]fix trial[/dim] {text}")
            elif status["last"] != (event.run, event.in_flight):
                status["last"] = (event.run, event.in_flight)
                console.print(f"[dim]fix trial[/dim] {text}", highlight=False, soft_wrap=True)
            return
        # NOTE: soft_wrap: one event, one line, however long; a log cut at rich's 80 columns
        # split "running: starting" across two lines
        console.print(f"[dim]fix trial[/dim] {text}", highlight=False, soft_wrap=True)

    return live, on_trial, stop


def sweep_progress() -> tuple[Callable[[Any], None], Callable[[], None]]:
    """Show the progress of ``advisor sweep`` on stderr: a line per finished run.

    The run in flight gets a transient status line on a terminal, and no line in a log.

    Returns:
        ``(on_event, stop)``; ``stop`` ends the status line and may be called twice.
    """
    from rich.markup import escape

    from advisor.capture.progress import ProgressConsole

    console = ProgressConsole()
    status: dict[str, Any] = {"spinner": None}

    def stop() -> None:
        if status["spinner"] is not None:
            status["spinner"].stop()
            status["spinner"] = None

    def on_event(event: Any) -> None:
        text = escape(event.line())
        if event.started and console.is_terminal:
            if status["spinner"] is None:
                status["spinner"] = console.status(f"[dim]sweep[/dim] {text}")
                status["spinner"].start()
            else:
                status["spinner"].update(f"[dim]sweep[/dim] {text}")
            return
        console.print(f"[dim]sweep[/dim] {text}", highlight=False, soft_wrap=True)

    return on_event, stop


def tensorboard_check() -> None:
    """Raise a clear error when TensorBoard or its PyTorch Profiler plugin is missing."""
    from advisor.report.tensorboard import check_plugin

    check_plugin()


def prepare_tensorboard(run_dir: Path) -> PreparedLogdir:
    """Copy a run's (or a folder of runs') traces into a temporary log folder the plugin reads."""
    from advisor.report.tensorboard import prepare_logdir

    return prepare_logdir(run_dir)


def serve_tensorboard(
    prepared: PreparedLogdir, *, host: str, port: int, echo: Callable[[str], None], say: Callable[[str], None]
) -> int:
    """Serve a prepared log folder until Ctrl-C; return the exit code."""
    from advisor.report.tensorboard import serve

    return serve(prepared, host=host, port=port, echo=echo, say=say)

def list_fixes() -> list[tuple[str, str, str]]:
    """Return every fix in the catalog: id, safety, what it changes (``advisor fixes``)."""
    from advisor.fixes import catalog
    from advisor.fixes.docs import table_rows

    return list(table_rows(catalog.get_fixes().values()))


def fixes_reference() -> str:
    """Return the whole fix reference as Markdown (``docs/fixes.md``)."""
    from advisor.fixes.docs import fixes_markdown

    return fixes_markdown()


def explain_fixes(fix_id: str | None, as_json: bool = False) -> list[Any]:
    """Explain one fix (or every fix when ``fix_id`` is None), as text or JSON-able dicts.

    Raises:
        UsageError: ``fix_id`` is not in the catalog (with a close match when there is one).
    """
    from advisor.engine.condition import did_you_mean
    from advisor.errors import UsageError
    from advisor.fixes import catalog
    from advisor.fixes.docs import doc, explain

    fixes = catalog.get_fixes()
    if fix_id is not None and fix_id not in fixes:
        hint = did_you_mean(fix_id, fixes) or f"; `advisor fixes` lists them ({len(fixes)})"
        raise UsageError(f"unknown fix id {fix_id!r}{hint}")
    chosen = list(fixes.values()) if fix_id is None else [fixes[fix_id]]
    return [doc(f) if as_json else explain(f) for f in chosen]


# -- the Python API: advisor.diagnose / advisor.analyze / advisor.load ------------------------------
# NOTE: thin wrappers over the same functions the commands call, with the command line's option
# names as keyword arguments, so what a notebook gets is what `advisor diagnose` reports.


def diagnose(
    script: str | Path,
    args: Sequence[str] = (),
    *,
    out: str | Path | None = None,
    module: bool = False,
    warmup: int | None = None,
    steps: int | None = None,
    profile_steps: int | None = None,
    full: bool = False,
    timeout: float | None = None,
    fixes: bool = True,
    unsafe_fixes: bool = False,
    fix: Sequence[str] = (),
    repeats: int | None = None,
    seed: int = 0,
    write: bool = False,
    nproc_per_node: int = 1,
    select: Sequence[str] | None = None,
    extend_select: Sequence[str] = (),
    ignore: Sequence[str] = (),
    preview: bool = False,
    inline_ignores: bool = True,
    progress: bool = False,
) -> Report:
    """Run a training script under the profiler, diagnose it, try the fixes; return the report.

    The Python form of ``advisor diagnose``: the keyword arguments are its options (``steps`` is
    ``--steps``, ``fix=["pin_memory"]`` is ``--fix pin_memory``, ``fixes=False`` is
    ``--no-fixes``); an option left out takes the command's default. Rule selection comes from
    ``[tool.advisor]`` as for the command, under ``select``/``ignore``; the file's diagnose
    options are defaults of the command line only, so a call says what it measures.

    Args:
        script: The training script (or a module name with ``module=True``).
        args: Arguments for the script, unchanged.
        out: The run directory (default: ``advisor-runs/<script>-<timestamp>``).
        module: Run ``script`` as a module, as ``python -m`` does.
        warmup: Warm-up steps, not measured (default 5).
        steps: Timed steps without the profiler (default 20).
        profile_steps: Steps under torch.profiler, as many again under cProfile (default 10).
        full: Let the script run to its end.
        timeout: Stop a hung script after this many seconds.
        fixes: Try the suggested fixes (False: diagnose only).
        unsafe_fixes: Also try fixes that may change numerics or batch semantics.
        fix: Try only these fix ids.
        repeats: Interleaved baseline/variant repeats per fix (default 3).
        seed: Seed for the loss-parity checks of the fix trials.
        write: Apply the kept fixes' diff to the script, keeping a ``.bak`` copy.
        nproc_per_node: Launch through torchrun with this many processes.
        select: Only these rules (codes or prefixes).
        extend_select: Add these rules to the selection.
        ignore: Skip these rules.
        preview: Also run preview rules.
        inline_ignores: Honour ``# advisor: ignore[CODE]`` comments.
        progress: Show live progress on stderr.

    Returns:
        The report, also saved as ``report.json`` in ``report.run.run_dir``. A script that
        failed does not raise: ``report.run.status`` says ``crashed``/``timeout``/``no_steps``
        and ``report.run.error`` what happened, with whatever was measured.

    Raises:
        UsageError: a missing script, an unknown fix id or rule code, or a bad config file.
    """
    import datetime as _dt

    if write and not fixes:
        raise UsageError("write=True applies the fixes' diff; it needs fixes=True")
    check_fix_ids(tuple(fix))
    module_name = None
    path = Path(script)
    if module:
        module_name = str(script)
        path = find_module_file(module_name, [Path.cwd()])
    path = validate_script(path)
    config = engine_config(select, extend_select, ignore, preview, start=path.parent, option_keys=ANY_OPTION)
    if out is None:
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        run_dir = new_run_dir(Path("advisor-runs") / f"{path.stem}-{stamp}")
    else:
        run_dir = Path(out)
    given = {"warmup_steps": warmup, "timed_steps": steps, "profiled_steps": profile_steps}
    spec = RunSpec(
        script=path, args=tuple(args), out_dir=run_dir.resolve(), full=full, timeout_s=timeout, seed=seed,
        quiet=not progress, cwd=Path.cwd(), nproc_per_node=nproc_per_node, module=module_name,
        **{k: v for k, v in given.items() if v is not None},
    )
    options = FixOptions(enabled=fixes, unsafe=unsafe_fixes, only=tuple(fix), write=write,
                         **({"repeats": repeats} if repeats is not None else {}))
    on_capture, on_trial, stop = live_progress(path.name) if progress else (None, None, lambda: None)
    try:
        result = diagnose_script(spec, engine_config=config, fix_options=options, progress=on_capture,
                                 trial_progress=on_trial, inline_ignores=inline_ignores)
    finally:
        stop()
    return result.report


def analyze(
    path: str | Path,
    *,
    select: Sequence[str] | None = None,
    extend_select: Sequence[str] = (),
    ignore: Sequence[str] = (),
    preview: bool = False,
    inline_ignores: bool = True,
) -> Report:
    """Diagnose traces you already have: a trace file (``.json``/``.json.gz``), a folder of them, or a run directory.

    The Python form of ``advisor analyze``; no script runs and nothing is written.

    Raises:
        InputError: the path is missing or holds no readable trace.
        UsageError: an unknown rule code or a bad config file.
    """
    config = engine_config(select, extend_select, ignore, preview, option_keys=ANY_OPTION)
    return analyze_report(path, config, inline_ignores=inline_ignores)


def load(run_dir: str | Path) -> Report:
    """Return the report a diagnose saved (a run directory or its ``report.json``), without re-running anything."""
    return load_report(run_dir)


def report_schema() -> dict[str, Any]:
    """Return the JSON Schema of ``report.json``, generated from the report model (draft 2020-12)."""
    from advisor.report.schema import report_schema as schema

    return schema()
