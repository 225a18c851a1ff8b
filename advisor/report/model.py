"""The document every renderer draws from, and what ``report.json`` in a run directory holds.

:func:`build_report` is the last stage of the pipeline: it gathers the capture (when there is
one), the metrics, the diagnosis and the fix trials into one versioned, JSON-able value, so
``advisor report`` and ``advisor compare`` re-render saved runs without re-running anything.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor import __version__
from advisor._serde import check_types, dump_json, from_dict, to_jsonable
from advisor._steady import SteadyState, assess
from advisor._vocab import Vocab
from advisor.capture.budget import TraceBound
from advisor.capture.model import RunCapture
from advisor.engine.model import Diagnosis, Finding, Primary, sort_findings
from advisor.errors import InputError
from advisor.fixes.model import SET_SEPARATOR, FixOutcome, Trial
from advisor.metrics.contention import contention_warnings
from advisor.metrics.gpuview import TABLE_KEYS
from advisor.metrics.model import Metrics, SourceLocation
from advisor.metrics.registry import BREAKDOWN_PARTS
from advisor.metrics.whole import KeptWholeRun
from advisor.report.device_checks import device_warnings, gpu_unseen

REPORT_SCHEMA_VERSION = 3
"""Layout version of ``report.json``.

Bumped when a consumer of the JSON would see a difference in where things are, not for every
new field. History:

* 1: first layout.
* 2: ``warnings`` (rule-selection warnings such as ``unknown rule code ...``) is its own list;
  version 1 mixed them into ``notes``. :meth:`Report.load` moves them out of a version-1 file's
  notes, so old run directories render the same way.
* 3: trials carry fields instead of string protocols: ``fixes`` (the ids a trial measured;
  version 2 joined a combined trial's ids with ``+`` in ``fix``), ``reference`` (the run a trial
  was measured against when not the baseline; version 2 started ``reason`` with ``on top of X``),
  and ``peak_memory_bytes`` / ``baseline_peak_memory_bytes`` / ``memory_kind``. :meth:`Report.load`
  fills ``fixes`` and ``reference`` of an older file from those strings.
"""
from advisor._files import write_text  # noqa: E402
from advisor.rundir import FIX_DIFF_FILE, REPORT_FILE  # noqa: E402


class ReportStatus(Vocab):
    """How far the diagnose that wrote a report got (``status`` in the JSON report).

    ``report.json`` is first written right after the diagnosis, then after every trial run, so a
    stopped diagnose still leaves everything it measured on disk.
    """

    COMPLETE = "complete"
    """Everything ran (or was skipped on purpose): the final report."""
    RUNNING = "running"
    """The fix trials are still running (``pid`` is the advisor process writing it)."""
    INTERRUPTED = "interrupted"
    """Ctrl-C or SIGTERM stopped the trials: the trials finished by then, and the unfinished ones as such."""

_V1_WARNING_PREFIXES = ("unknown rule code",)
"""Note prefixes that were warnings in version-1 reports (see :data:`REPORT_SCHEMA_VERSION`)."""

TIMELINE_LANES: tuple[str, ...] = ("data_loading", "cpu_ops", "gpu_kernels", "copies", "syncs", "communication")
"""Lanes of ``Report.timeline`` events, top to bottom in the HTML timeline (others go below)."""


@dataclass(frozen=True)
class RunInfo:
    """What ran and how it ended (``run`` in the JSON report).

    ``timed_step_times_ms`` and ``timed_samples`` are the timed (unprofiled) steps from the
    capture (``advisor compare`` takes its interval over runs, never over these steps).
    ``step_time_ms`` is *the* step time of the report, the one every format prints: the
    median of their steady part (:mod:`advisor._steady`), from step ``steady_from`` on, with its
    spread (``step_p10_ms``, ``step_p90_ms``) and what the window looked like (``steadiness``).
    Without timed steps these are None and "" (a bare trace: its profiled steps are used).
    ``trace_bound`` says how the profiled window was cut to ``--trace-budget``; None when
    nothing was (:mod:`advisor.capture.budget`).
    """

    status: str = "analyzed"
    script: str | None = None
    args: tuple[str, ...] = ()
    run_dir: str | None = None
    exit_code: int | None = None
    error: str | None = None
    step_source: str | None = None
    step_source_reason: str | None = None
    steps_measured: int = 0
    warmup_steps: int = 0
    timed_steps: int = 0
    profiled_steps: int = 0
    samples_per_s: float | None = None
    time_to_first_step_s: float | None = None
    peak_memory_bytes: int | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    dataloaders: tuple[dict[str, Any], ...] = ()
    notes: tuple[str, ...] = ()
    timed_step_times_ms: tuple[float, ...] = ()
    timed_samples: tuple[int | None, ...] = ()
    step_time_ms: float | None = None
    step_p10_ms: float | None = None
    step_p90_ms: float | None = None
    steady_from: int = 0
    steadiness: str = ""
    trace_bound: TraceBound | None = None


@dataclass(frozen=True)
class Report:
    """The full, JSON-able result of one diagnose/analyze run.

    Attributes:
        schema_version: Layout version of this document.
        advisor_version: The advisor that wrote it.
        created: ISO time it was written.
        source: The trace or run directory it describes.
        run: How the run went.
        primary: The primary bottleneck, or None.
        breakdown: Category (plus ``idle``/``other``) -> mean fraction of step time, as the
            engine maps the metric breakdown parts (see advisor.engine.evaluate.category_breakdown).
        categories: Category -> recoverable share of step time from the findings.
        findings: Findings sorted by severity (highest first), code, location.
        summary: The metric summary (declared names only).
        steps: Per-step rows: rank, step, step_time_ms and every ``<part>_ms``.
        ranks: Per-rank rows for distributed inputs.
        locations: Source locations from the analysis.
        trials: Fix trials; combined: the combined trial of kept fixes.
        diff: Unified diff that makes the kept fixes permanent ("" when none is mechanical).
        timeline: Events of one step for the HTML timeline (lane, name, start_us, dur_us).
        notes: Analysis notes (metrics, fix trials).
        warnings: Problems with how the run was configured that the user should fix:
            ``Diagnosis.warnings`` such as an unknown code in ``select``/``ignore`` or in a
            ``# advisor: ignore`` comment, with a close match (the line counting findings that
            comments suppressed is a note instead). Printed to stderr by the CLI and shown in
            every format.
        device: Device names seen in the trace (``Metrics.device``; empty for CPU-only traces).
        tables: The GPU-time tables of :mod:`advisor.metrics.gpuview` (``idle_functions``,
            ``roofline``, ``modules``, ``collectives``, ``misaligned_ops``): lists of row dicts,
            present when the trace allows them. A new field: older reports load with none.
        status: A :class:`ReportStatus` word: ``complete``, or ``running`` / ``interrupted``
            for a report written while the fix trials ran / when they were stopped.
        pid: The advisor process writing a ``running`` report (None otherwise): ``advisor runs``
            tells a run still going from one that was killed by whether it is alive.
        timing: Where the diagnose's time went (:func:`timing_of`); empty for ``analyze``.
        focus_rank: The rank whose trace gave the source locations, the time tables, the top
            kernels and the timeline when it is not the lowest: the job's straggler
            (:func:`advisor.metrics.compute.straggler_focus`). None otherwise. A new field:
            older reports load with none.
        kept_whole: The kept fixes over the whole run, start-up and periodic work beside the
            kept trial's step speedup (:mod:`advisor.metrics.whole`); None when nothing was
            kept or there is nothing to add to the step's ratio. A new field: older reports
            load with none.
    """

    schema_version: int = REPORT_SCHEMA_VERSION
    advisor_version: str = __version__
    created: str = ""
    source: str = ""
    run: RunInfo = field(default_factory=RunInfo)
    primary: Primary | None = None
    breakdown: dict[str, float] = field(default_factory=dict)
    categories: dict[str, float] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()
    summary: dict[str, float | None] = field(default_factory=dict)
    steps: tuple[dict[str, Any], ...] = ()
    ranks: tuple[dict[str, Any], ...] = ()
    locations: tuple[SourceLocation, ...] = ()
    trials: tuple[Trial, ...] = ()
    combined: Trial | None = None
    kept_fixes: tuple[str, ...] = ()
    diff: str = ""
    timeline: tuple[dict[str, Any], ...] = ()
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    device: tuple[str, ...] = ()
    tables: dict[str, tuple[dict[str, Any], ...]] = field(default_factory=dict)
    status: str = ReportStatus.COMPLETE
    pid: int | None = None
    timing: dict[str, Any] = field(default_factory=dict)
    focus_rank: int | None = None
    kept_whole: KeptWholeRun | None = None

    @property
    def all_notes(self) -> list[str]:
        """The notes every format lists: what bounded the trace, the run's, then the analysis's."""
        bound = self.run.trace_bound.text() if self.run.trace_bound is not None else ""
        return list(dict.fromkeys(n for n in (bound, *self.run.notes, *self.notes) if n))

    @property
    def kept_trial(self) -> Trial | None:
        """The measurement of the fixes advisor kept, or None when nothing was kept.

        The combined trial when it measured exactly the kept set, else the one kept fix's own
        trial: when a combination loses to the best single fix, ``combined`` still holds the
        combination's run (the loop reports what it measured) while only that fix is kept. A
        trial that improved but was not kept is never the answer: its speedup may be relative to
        another fix's run.
        """
        kept = set(self.kept_fixes)
        if not kept:
            return None
        combined = self.combined
        if combined is not None and set(combined.fixes) == kept:
            return combined
        if len(kept) == 1:
            return next((t for t in self.trials if t.fix in kept), None)
        return None

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON document (findings sorted for clean diffs)."""
        # NOTE: sorted here too, not only in build_report, so a hand-built or older report
        # still diffs cleanly.
        return to_jsonable(dataclasses.replace(self, findings=sort_findings(self.findings)))

    def to_json(self) -> str:
        """Return the JSON document as text."""
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def save(self, run_dir: Path) -> Path:
        """Write ``report.json`` into ``run_dir``, and ``fix.diff`` beside it when a diff was made.

        ``fix.diff`` is the diff that makes the kept fixes permanent, ready for ``git apply`` or
        ``patch -p1`` (issue #32: it was only inside the JSON and on the terminal with ``--diff``).
        """
        path = Path(run_dir) / REPORT_FILE
        dump_json(self.to_dict(), path)
        diff_path = Path(run_dir) / FIX_DIFF_FILE
        if self.diff.strip():
            write_text(diff_path, self.diff)
        elif diff_path.is_file():
            diff_path.unlink()  # NOTE: a diff of an earlier save no longer kept
        return path

    @classmethod
    def load(cls, path: Path) -> Report:
        """Read a report from a run directory or a ``report.json`` file."""
        path = Path(path)
        file = path / REPORT_FILE if path.is_dir() else path
        if not file.is_file():
            raise InputError(
                f"no {REPORT_FILE} in {path}; run `advisor diagnose` or `advisor analyze` first"
            )
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise InputError(f"{file} is not valid JSON ({exc}); re-create it with advisor") from exc
        except RecursionError:
            raise InputError(f"{file} is nested too deeply to be an advisor report") from None
        except OSError as exc:
            raise InputError(f"cannot read {file} ({exc.strerror or exc})") from exc
        if not isinstance(data, dict) or "schema_version" not in data:
            raise InputError(f"{file} is not an advisor report (no schema_version)")
        version = data["schema_version"]
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise InputError(f"{file}: schema_version {version!r} is not one advisor writes; re-create the report")
        if version > REPORT_SCHEMA_VERSION:
            raise InputError(
                f"{file} has report schema {version}, newer than this advisor reads ({REPORT_SCHEMA_VERSION}); "
                "upgrade advisor (pip install -U advisor) to read it"
            )
        data = _upgrade(data)
        try:
            check_types(cls, data, "report")
        except TypeError as exc:
            raise InputError(f"{file}: {exc}; re-create it with advisor") from None
        return from_dict(cls, data)


def _step_time(timed_ms: Sequence[float]) -> dict[str, Any]:
    """Return the report's one step time and its spread, from the timed steps' steady part."""
    if not timed_ms:
        return {}
    verdict = assess(timed_ms)
    return {
        "step_time_ms": verdict.median_ms, "step_p10_ms": verdict.p10_ms, "step_p90_ms": verdict.p90_ms,
        "steady_from": verdict.start, "steadiness": str(verdict.state),
    }


def compile_warnings(capture: RunCapture | None) -> tuple[str, ...]:
    """Return the report's warning when torch.compile compiled graphs inside the timed window."""
    n = capture.timed.compiles if capture is not None else 0
    if not n:
        return ()
    return (
        f"torch.compile compiled {n} graph{'s' if n != 1 else ''} during the "
        f"{len(capture.timed.step_times_ms)} timed steps: those steps timed the compiler as well as "
        "the compiled code (more than one is a loop that keeps recompiling: a shape or guard that "
        "changes between steps; TORCH_LOGS=recompiles names it)",
    )


def steadiness_warnings(timed_ms: Sequence[float]) -> tuple[str, ...]:
    """Return the report's warning when its timed steps were not one steady population.

    A slow start that settled is not warned about: the step time already leaves it out and its
    caption says so (:func:`advisor.report.headline.step_time`).
    """
    verdict = assess(timed_ms)
    if verdict.steady:
        return ()
    spread = ""
    if verdict.p10_ms and verdict.p90_ms and verdict.state is not SteadyState.SCATTERED:  # its detail says it
        spread = f" (p10–p90 {verdict.p10_ms:.1f}–{verdict.p90_ms:.1f} ms)"
    return (
        f"the timed steps were not steady: {verdict.detail}; the step time is the median of all "
        f"{verdict.used}{spread}, and a re-run may measure another level",
    )


def _upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """Bring an older report document to the current layout (see :data:`REPORT_SCHEMA_VERSION`)."""
    try:
        version = int(data.get("schema_version") or 0)
    except (TypeError, ValueError):
        return data
    if version < 2 and "warnings" not in data:
        notes = list(data.get("notes") or ())
        moved = [n for n in notes if isinstance(n, str) and n.startswith(_V1_WARNING_PREFIXES)]
        data = {**data, "notes": [n for n in notes if n not in moved], "warnings": moved}
    if version < 3:
        data = {
            **data,
            "trials": [_upgrade_trial(t) for t in data.get("trials") or ()],
            "combined": _upgrade_trial(data.get("combined")),
        }
    return {**data, "schema_version": max(version, REPORT_SCHEMA_VERSION)}


_V2_ON_TOP = "on top of "
"""How a version-2 trial's ``reason`` named the run it was measured against."""


def _upgrade_trial(trial: Any) -> Any:
    """Fill a version-2 trial's ``fixes`` and ``reference`` from its ``fix`` and ``reason`` strings."""
    if not isinstance(trial, dict):
        return trial
    out = dict(trial)
    if not out.get("fixes") and isinstance(out.get("fix"), str):
        out["fixes"] = out["fix"].split(SET_SEPARATOR)
    reason = out.get("reason")
    if out.get("reference") is None and isinstance(reason, str) and reason.startswith(_V2_ON_TOP):
        out["reference"] = reason[len(_V2_ON_TOP):].split(";", 1)[0].strip() or None
    return out


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and type(value).__module__ == "numpy":
        return value.item()
    return value


def build_report(
    metrics: Metrics,
    diagnosis: Diagnosis,
    capture: RunCapture | None = None,
    fixes: FixOutcome | None = None,
    timeline: tuple[dict[str, Any], ...] = (),
) -> Report:
    """Assemble the report document from the pipeline's stage outputs."""
    step_cols = ["rank", "step", "step_time_ms", *(f"{p}_ms" for p in BREAKDOWN_PARTS)]
    steps_df = metrics.steps
    present = [c for c in step_cols if c in steps_df.columns]
    steps = tuple(
        {k: _clean(v) for k, v in row.items()} for row in steps_df[present].to_dict("records")
    )
    ranks = tuple({k: _clean(v) for k, v in row.items()} for row in metrics.ranks.to_dict("records"))
    if capture is not None:
        run = RunInfo(
            status=capture.status,
            script=capture.script,
            args=capture.args,
            run_dir=capture.run_dir,
            exit_code=capture.exit_code,
            error=(f"{capture.error.type}: {capture.error.message}" if capture.error else None),
            step_source=capture.step_source,
            step_source_reason=capture.step_source_reason,
            steps_measured=int(len(steps_df)),
            warmup_steps=capture.warmup_steps,
            timed_steps=capture.timed_steps,
            profiled_steps=capture.profiled_steps,
            samples_per_s=capture.timed.samples_per_s,
            time_to_first_step_s=capture.time_to_first_step_s,
            peak_memory_bytes=capture.peak_memory_bytes,
            environment=to_jsonable(capture.environment),
            dataloaders=tuple(to_jsonable(d) for d in capture.dataloaders),
            notes=capture.notes,
            timed_step_times_ms=tuple(capture.timed.step_times_ms),
            timed_samples=tuple(capture.timed.samples),
            trace_bound=capture.trace_bound if capture.trace_bound is not None and capture.trace_bound.text() else None,
            **_step_time(capture.timed.step_times_ms),
        )
    else:
        run = RunInfo(status="analyzed", steps_measured=int(len(steps_df)))
    primary = diagnosis.primary.category if diagnosis.primary else None
    warnings = tuple(dict.fromkeys((
        *diagnosis.warnings, *contention_warnings(metrics.summary, primary), *steadiness_warnings(run.timed_step_times_ms),
        *compile_warnings(capture), *device_warnings(capture, metrics.summary, steps),
    )))
    if gpu_unseen(capture, metrics.summary):
        diagnosis = dataclasses.replace(diagnosis, primary=None)
    categories: dict[str, float] = {}
    for f in diagnosis.findings:
        categories[f.category] = max(categories.get(f.category, 0.0), f.impact_frac)
    report = Report(
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        source=metrics.source,
        run=run,
        primary=diagnosis.primary,
        breakdown=dict(diagnosis.breakdown),
        categories=categories,
        findings=sort_findings(diagnosis.findings),
        summary={k: _clean(v) for k, v in metrics.summary.items()},
        steps=steps,
        ranks=ranks,
        locations=metrics.locations,
        timeline=timeline,
        notes=(*metrics.notes, *diagnosis.notes),
        warnings=warnings,
        device=tuple(metrics.device),
        tables={k: tuple(metrics.extra[k]) for k in TABLE_KEYS if metrics.extra.get(k)},
        focus_rank=metrics.focus_rank,
    )
    return with_fixes(report, fixes) if fixes else report


MEASURED_PHASES: tuple[str, ...] = ("timed", "profiled", "cprofile")
"""Run phases whose steps are the measurement itself; every other second is overhead."""


def timing_of(total_s: float, capture: RunCapture | None, fixes: FixOutcome | None) -> dict[str, Any]:
    """Where a diagnose's time went: the whole, the capture, the trial runs, and the overhead.

    ``measured_s`` is the time spent in measured steps (:data:`MEASURED_PHASES`) of the capture
    and every trial run; ``overhead_s`` is the rest of ``total_s`` (processes starting,
    imports, the script's set-up, warm-up, exports, advisor's own analysis). ``phases_s`` sums
    each phase over every run (``server``: starting the warm-start server, which no run holds);
    ``starts`` counts the trial runs per start kind (``warm``, ``cold``).
    """
    phases: dict[str, float] = {}
    for part in ((capture.phases_s if capture else None) or {}, (fixes.phases_s if fixes else None) or {}):
        for name, seconds in part.items():
            phases[name] = round(phases.get(name, 0.0) + float(seconds), 4)
    measured = round(sum(phases.get(p, 0.0) for p in MEASURED_PHASES), 4)
    return {
        "total_s": round(total_s, 3),
        "capture_s": capture.wall_s if capture else None,
        "trials_s": fixes.wall_s if fixes else None,
        "trial_runs": fixes.runs if fixes else 0,
        "starts": dict(fixes.starts) if fixes else {},
        "measured_s": measured,
        "overhead_s": round(max(total_s - measured, 0.0), 3),
        "phases_s": phases,
    }


def with_fixes(
    report: Report, fixes: FixOutcome, status: str = ReportStatus.COMPLETE, pid: int | None = None,
) -> Report:
    """Return ``report`` (built without fixes) with the fix loop's outcome, final or so far."""
    return dataclasses.replace(
        report,
        trials=fixes.trials,
        combined=fixes.combined,
        kept_fixes=fixes.kept,
        diff=fixes.diff,
        notes=(*report.notes, *fixes.notes),
        status=status,
        pid=pid,
    )
