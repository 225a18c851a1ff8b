"""Read the saved runs under a folder into one small summary each, for ``advisor runs``.

``advisor diagnose`` leaves a run directory per run (``advisor-runs/<stem>-<timestamp>/``, with
``capture.json`` and, once analysed, ``report.json``). :func:`list_runs` reads them through the
project's own loaders (:meth:`Report.load`, :meth:`RunCapture.load`) so schema upgrades apply,
and never raises for one bad folder: a corrupt file becomes an ``unreadable`` row with the reason.
Nothing here writes anything.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advisor import rundir
from advisor._proctree import pid_exists
from advisor.capture.model import RunCapture
from advisor.errors import AdvisorError, InputError
from advisor.report import style as s
from advisor.report.model import Report, ReportStatus
from advisor.report.view import category_step_frac
from advisor.rundir import CAPTURE_FILE, CONFIG_FILE, REPORT_FILE

STATUS_UNREADABLE = "unreadable"
"""Status of a run whose ``capture.json`` or ``report.json`` could not be read."""
STATUS_KILLED = "killed"
"""Status of a run whose report says its trials were running but whose advisor process is gone
(killed with SIGKILL, the machine went down): it never wrote an ``interrupted`` report."""

# NOTE: from_dict is deliberately lenient (wrong types pass through), and a hand-edited or
# truncated file can fail in several ways; every one of them must become a row, not a traceback.
_LOAD_ERRORS = (AdvisorError, OSError, ValueError, TypeError, KeyError, AttributeError)


@dataclass(frozen=True)
class RunSummary:
    """One row of ``advisor runs``: what a run directory says about itself.

    Attributes:
        name: The folder's name (what to pass to ``advisor compare``, under the listed root).
        path: The folder's path as found under the listed root.
        when: When the run was written, ISO 8601 in UTC: the report's ``created`` time, else
            the modification time of ``capture.json``, else of the folder.
        script: The script that ran (as recorded), or the analysed source for ``advisor analyze``.
        status: The capture status (``completed``, ``stopped``, ``crashed``, ``timeout``,
            ``no_steps``), ``analyzed`` for a report made from traces, or ``unreadable``; for a
            diagnose whose fix trials did not finish: ``running`` (its advisor process is alive),
            ``interrupted`` (Ctrl-C/SIGTERM, report saved) or ``killed`` (its process is gone).
        primary_category: The primary bottleneck category, when the run was analysed.
        primary_share: That category's measured share of step time (0-1), from the breakdown.
        primary_recoverable: The share of step time a fix could recover (0-1): the rules'
            estimate, modelled, not measured.
        kept_fixes: Fix ids advisor kept.
        speedup: Measured speedup of the kept fixes: the combined trial when it measured exactly
            the kept set, else the one kept fix's own trial; None when nothing was kept or measured.
        steps_measured: Steps the analysis measured (profiled steps for a run without a report).
        steps_run: Steps the script ran while captured (warm-up, timed and profiled: the
            ``steps`` column; issue #32: it showed the 10 profiled steps of a 45-step capture).
        ranks: Number of ranks (1 unless a torchrun launch).
        has_report: Whether a readable ``report.json`` was found.
        reason: Why the row is ``unreadable``, or what is missing from a partial run; one line.
    """

    name: str
    path: str
    when: str | None = None
    script: str | None = None
    status: str = STATUS_UNREADABLE
    primary_category: str | None = None
    primary_share: float | None = None
    primary_recoverable: float | None = None
    kept_fixes: tuple[str, ...] = ()
    speedup: float | None = None
    steps_measured: int | None = None
    steps_run: int | None = None
    ranks: int = 1
    has_report: bool = False
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the row as a JSON-able dict with stable keys (declaration order)."""
        out = dataclasses.asdict(self)
        out["kept_fixes"] = list(self.kept_fixes)
        return out


def is_run_dir(path: Path) -> bool:
    """Return True when ``path`` is a folder holding ``capture.json``, ``report.json`` or a capture's ``config.json``.

    A run killed outright during its capture (SIGKILL, an OOM kill) left only the config the
    child was started with, its logs and progress: it is listed, as ``killed``.
    """
    try:
        return path.is_dir() and ((path / CAPTURE_FILE).exists() or (path / REPORT_FILE).exists()
                                  or rundir.is_run_dir(path))
    except OSError:  # an unreadable folder is not listed rather than crashing the listing
        return False


def list_runs(root: Path, limit: int | None = None) -> list[RunSummary]:
    """Summarise every run directory directly under ``root``, newest first.

    Args:
        root: Folder holding run directories (``advisor-runs`` by default in the CLI).
        limit: Keep at most this many rows (the newest); None keeps all.

    Returns:
        One :class:`RunSummary` per sub-folder that holds ``capture.json`` or ``report.json``;
        other folders and files are skipped. Ties in time are broken by name.

    Raises:
        InputError: ``root`` does not exist or is not a folder.
    """
    root = Path(root)
    if not root.is_dir():
        what = "is not a folder" if root.exists() else "does not exist"
        raise InputError(f"no runs at {root} ({what}); run `advisor diagnose SCRIPT` first")
    try:
        children = sorted(root.iterdir())
    except OSError as exc:
        raise InputError(f"cannot list {root} ({exc.strerror or exc}); check its permissions") from exc
    rows = [(summarise_run(child), _mtime(child)) for child in children if is_run_dir(child)]
    # Newest first; rows with no readable time sort by their folder's mtime.
    rows.sort(key=lambda r: (_sort_time(r[0].when, r[1]), r[0].name), reverse=True)
    out = [row for row, _ in rows]
    return out if limit is None else out[: max(limit, 0)]


def summarise_run(run_dir: Path) -> RunSummary:
    """Summarise one run directory; never raises (a bad file gives an ``unreadable`` row)."""
    run_dir = Path(run_dir)
    base = RunSummary(name=run_dir.name, path=str(run_dir))
    problems: list[str] = []

    capture: RunCapture | None = None
    if (run_dir / CAPTURE_FILE).exists():
        try:
            capture = RunCapture.load(run_dir)
        except _LOAD_ERRORS as exc:
            problems.append(_one_line(exc, run_dir, CAPTURE_FILE))
    report: Report | None = None
    if (run_dir / REPORT_FILE).exists():
        try:
            report = Report.load(run_dir / REPORT_FILE)
        except _LOAD_ERRORS as exc:
            problems.append(_one_line(exc, run_dir, REPORT_FILE))

    fields: dict[str, Any] = {}
    try:
        if capture is not None:
            fields.update(_from_capture(capture))
        if report is not None:
            fields.update(_from_report(report))
            if not fields.get("steps_run"):
                # NOTE: a report without its capture (advisor analyze): the phases it records
                run = report.run
                total = (run.warmup_steps or 0) + (run.timed_steps or 0) + (run.profiled_steps or 0)
                fields["steps_run"] = total or fields.get("steps_measured")
    except _LOAD_ERRORS as exc:  # a loadable file whose values are the wrong shapes
        problems.append(_one_line(exc, run_dir, REPORT_FILE if report is not None else CAPTURE_FILE))
    if fields.get("when") is None:
        fields["when"] = _iso(_mtime(run_dir / CAPTURE_FILE) or _mtime(run_dir))

    if problems:
        fields["status"] = STATUS_UNREADABLE
        fields["reason"] = "; ".join(problems)
    elif capture is None and report is None:
        fields.update(_from_config(run_dir))
    elif report is None:
        fields["reason"] = f"no {REPORT_FILE} (the run was not analysed; see its logs)"
    return dataclasses.replace(base, **fields)


def _from_capture(capture: RunCapture) -> dict[str, Any]:
    """Return what ``capture.json`` alone tells: script, status, steps, ranks."""
    return {
        "script": _str_or_none(capture.script),
        "status": _str_or_none(capture.status) or "unknown",
        # NOTE: a run interrupted before its profiled steps still measured its timed steps.
        "steps_measured": _int_or_none(capture.profiled_steps) or _int_or_none(capture.timed_steps),
        "steps_run": _int_or_none(capture.steps_seen) or _int_or_none(
            (capture.warmup_steps or 0) + (capture.timed_steps or 0) + (capture.profiled_steps or 0)
            + (capture.cprofiled_steps or 0)
        ) or None,
        "ranks": max(len(capture.ranks or ()), 1),
    }


def _from_config(run_dir: Path) -> dict[str, Any]:
    """Return what a run with only its ``config.json`` tells: still capturing, or killed before saving."""
    config = rundir.read_json(run_dir / CONFIG_FILE) or {}
    spec = config.get("spec") if isinstance(config.get("spec"), dict) else {}
    running = pid_exists(config.get("pid"))
    return {
        "script": _str_or_none(spec.get("script")),
        "status": ReportStatus.RUNNING.value if running else STATUS_KILLED,
        "reason": None if running else (
            f"killed during its capture: no {CAPTURE_FILE} was saved (its logs are in the folder)"),
    }


def _share(value: float | None) -> float | None:
    """Round a share to 4 digits, as the engine rounds the primary's (a listing, not a measurement)."""
    return None if value is None else round(value, 4)


def _from_report(report: Report) -> dict[str, Any]:
    """Return what ``report.json`` tells; it wins over the capture where both say something."""
    run = report.run
    primary = report.primary
    kept = tuple(str(k) for k in (report.kept_fixes or ()))
    out: dict[str, Any] = {
        "has_report": True,
        "status": _loop_status(report) or _str_or_none(getattr(run, "status", None)) or "unknown",
        "script": _str_or_none(getattr(run, "script", None)) or _str_or_none(report.source),
        "primary_category": _str_or_none(getattr(primary, "category", None)),
        # NOTE: the measured share, as the report's headline shows it; the rules' modelled
        # recoverable share once stood here and read as "of step time" (issue #20).
        "primary_share": _share(category_step_frac(report, primary.category)) if primary is not None else None,
        "primary_recoverable": s.finite(getattr(primary, "share", None)),
        "kept_fixes": kept,
        "speedup": kept_speedup(report),
        "steps_measured": _int_or_none(getattr(run, "steps_measured", None))
        or _int_or_none(getattr(run, "timed_steps", None)),  # no trace (interrupted early): its timed steps
    }
    if len(report.ranks or ()) > 1:
        out["ranks"] = len(report.ranks)
    when = _parse_time(report.created)
    if when is not None:
        out["when"] = _iso(when)
    return out


def _loop_status(report: Report) -> str | None:
    """Return ``running``, ``killed`` or ``interrupted`` for a report the fix loop did not finish, else None."""
    status = _str_or_none(report.status)
    if status == ReportStatus.INTERRUPTED:
        return ReportStatus.INTERRUPTED.value
    if status == ReportStatus.RUNNING:
        return ReportStatus.RUNNING.value if pid_exists(report.pid) else STATUS_KILLED
    return None


def kept_speedup(report: Report) -> float | None:
    """Measured speedup of the fixes advisor kept (:attr:`Report.kept_trial`), or None."""
    trial = report.kept_trial
    return None if trial is None else s.finite(trial.speedup)


def _one_line(exc: BaseException, run_dir: Path, file: str) -> str:
    """Return an exception as one short line naming the file it came from (relative to its run)."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    # The loaders name the full path; the row already names the run, so keep just the file.
    text = text.replace(str(run_dir / file), file)
    if file not in text:
        text = f"{file}: {text}"
    return text if len(text) <= 200 else text[:199] + "…"


def _str_or_none(value: Any) -> str | None:
    return str(value) if isinstance(value, (str, Path)) and str(value) else None


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _mtime(path: Path) -> _dt.datetime | None:
    try:
        return _dt.datetime.fromtimestamp(path.stat().st_mtime, tz=_dt.timezone.utc)
    except OSError:
        return None


def _parse_time(value: Any) -> _dt.datetime | None:
    """Parse an ISO time string as an aware UTC datetime (naive ones are taken as UTC); else None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        when = _dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return when.astimezone(_dt.timezone.utc)


def _iso(when: _dt.datetime | None) -> str | None:
    return None if when is None else when.astimezone(_dt.timezone.utc).isoformat(timespec="seconds")


def _sort_time(when: str | None, fallback: _dt.datetime | None) -> float:
    parsed = _parse_time(when) or fallback
    return parsed.timestamp() if parsed is not None else 0.0
