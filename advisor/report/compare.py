"""Before/after comparison of two reports: speedup, per-part deltas, findings gone and new.

:func:`compare_reports` is pure (two :class:`Report` in, one frozen :class:`Comparison` out).
It refuses to print a bogus ratio: when the two sides ran on different kinds of device, or
count work differently, the speedup is left out and the reason goes to ``not_comparable``.
:func:`looks_like_report` tells a saved report from a trace; turning a trace into a Report is
``advisor.api.load_side``'s job, so this renderer-side module never calls back into the api.

Every interval is over runs (:mod:`advisor.report.compare_stats`): :func:`compare_groups` takes
one or more runs a side. Single runs get no interval; their ratio is a change only outside the
script's measured run-to-run noise (or a conservative default band when it is unknown). A side
measured on a busy machine is named, and no change is called from it; nor from a single run whose
timed steps changed level inside its window (it has no level to compare).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor._num import median
from advisor._serde import to_jsonable
from advisor.engine.model import Finding
from advisor.fixes.model import Trial
from advisor.metrics.model import StepBasis
from advisor.report import style as s
from advisor.report.compare_parts import MsDelta, PartDelta, part_deltas
from advisor.report.compare_stats import (
    MIN_EFFECT_BAND,
    Noise,
    contention_warning,
    default_noise_band,
    group_ratio,
    interval_notes,
    trial_note,
)
from advisor.report.figures import throughput
from advisor.report.headline import step_time
from advisor.report.model import REPORT_FILE, Report

COMPARISON_SCHEMA_VERSION = 2
"""2: the interval is over runs (none for single runs), ``noise_band``, ``before_runs``/``after_runs``,
``contended`` and ``trial`` added, verdict ``not measurable``."""
NOT_MEASURABLE = "not measurable"
"""Verdict when the figures would call a change but a side was measured on a busy machine, or is
one run whose timed steps were not steady."""
GPU_ONLY_PARTS = frozenset({"h2d_copy", "d2h_copy", "sync_wait", "gpu_compute", "gpu_idle"})
"""Breakdown parts that are zero by construction on a CPU-only run."""


@dataclass(frozen=True)
class OpDelta(MsDelta):
    """One operator's host self time and calls per step, before and after.

    None on a side whose report's operator table does not list it: the table keeps the
    operators with the most self time, so an absent one took less than the table's last row
    (or did not run), not zero.
    """

    operator: str
    before_ms: float | None
    after_ms: float | None
    before_calls: float | None
    after_calls: float | None


MAX_OP_DELTAS = 10
"""Operators a comparison lists: those whose self time changed most."""


@dataclass(frozen=True)
class Comparison:
    """What changed between two runs or traces (``before`` -> ``after``).

    Attributes:
        before / after: Labels of the two sides (their sources).
        before_device / after_device: Device each side ran on, in words.
        metric: ``samples_per_s`` or ``step_time_ms`` (what ``speedup`` is based on), or None.
        before_value / after_value: That metric on each side.
        speedup: How many times faster ``after`` is (>1 is faster); None when not comparable.
        ci_low / ci_high: 95% t interval over runs (2+ runs on a side); None for single runs.
        verdict: ``faster``, ``slower``, ``no measurable effect``, ``not measurable`` (a side ran
            on a busy machine), ``not comparable``, ``unknown``.
        step_time_before_ms / step_time_after_ms: Median step times.
        parts: Per-part breakdown before and after, in display order.
        parts_basis: What ``parts`` are of: the profiled steps' mean, or each run's timed median step
            (a GPU run's device parts at their ms; :mod:`advisor.report.compare_parts`).
        operators: The operators whose host self time per step changed most (both reports
            have an operator table), largest change first.
        disappeared / appeared / persisting: Findings by rule code (after's version when persisting).
        not_comparable: What cannot be compared, and why; empty when the sides match.
        notes: Other remarks (how the speedup was computed, the noise, ...).
        before_runs / after_runs: Every run of each side (one each for a plain comparison).
        before_values / after_values: Each run's throughput (samples/s, or steps/s).
        noise_band: For single runs: the relative change treated as noise (the script's
            measured run-to-run noise, else :func:`default_noise_band`); None with an interval.
        contended: The sides (``before``/``after``) measured while other work held the cores.
        trial: When ``after`` is ``RUN/kept`` of a diagnose: the fix loop's interleaved trial of
            the kept fixes, shown beside this comparison's own figure.
    """

    before: str
    after: str
    before_device: str = ""
    after_device: str = ""
    metric: str | None = None
    before_value: float | None = None
    after_value: float | None = None
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    verdict: str = "unknown"
    step_time_before_ms: float | None = None
    step_time_after_ms: float | None = None
    parts: tuple[PartDelta, ...] = ()
    parts_basis: StepBasis = StepBasis.PROFILED
    operators: tuple[OpDelta, ...] = ()
    disappeared: tuple[Finding, ...] = ()
    appeared: tuple[Finding, ...] = ()
    persisting: tuple[Finding, ...] = ()
    not_comparable: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    before_runs: tuple[str, ...] = ()
    after_runs: tuple[str, ...] = ()
    before_values: tuple[float, ...] = ()
    after_values: tuple[float, ...] = ()
    noise_band: float | None = None
    contended: tuple[str, ...] = ()
    trial: Trial | None = None
    schema_version: int = COMPARISON_SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON document (part deltas included)."""
        data = to_jsonable(self)
        for part, d in zip(self.parts, data["parts"], strict=True):
            d["delta_ms"] = part.delta_ms
            d["delta_frac"] = part.delta_frac
        for op, d in zip(self.operators, data["operators"], strict=True):
            d["delta_ms"] = op.delta_ms
        return data

    def to_json(self) -> str:
        """Return the JSON document as text."""
        return json.dumps(self.to_dict(), indent=2) + "\n"


def looks_like_report(path: Path) -> bool:
    """Return True for a run directory holding ``report.json``, or a JSON file that is an advisor report.

    Reads only the first bytes of a JSON file; anything else is taken for a trace.
    """
    if path.is_dir():
        return (path / REPORT_FILE).is_file()
    if not (path.is_file() and path.name.endswith(".json")):
        return False
    if path.name == REPORT_FILE:
        return True
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return b'"schema_version"' in head and b'"advisor_version"' in head


def device_kind(report: Report) -> str | None:
    """``gpu``, ``cpu`` or None (unknown), from the trace summary, the capture, then trace devices."""
    flag = s.finite(report.summary.get("has_gpu_flag"))
    if flag is not None:
        return "gpu" if flag else "cpu"
    env = report.run.environment or {}
    dev = str(env.get("device") or "")
    if dev:
        return "cpu" if dev == "cpu" else "gpu"
    if report.device:
        return "gpu"
    return None


def device_name(report: Report) -> str:
    """Return the device in words: its model when known, else ``GPU``/``CPU``/``unknown device``."""
    env = report.run.environment or {}
    if env.get("device_name"):
        name = str(env["device_name"])
        return f"CPU, {name}" if env.get("device") == "cpu" else name
    if report.device:
        return ", ".join(dict.fromkeys(report.device))
    kind = device_kind(report)
    return {"gpu": "GPU", "cpu": "CPU"}.get(kind or "", "unknown device")


def script_mismatch(before: Report, after: Report) -> str | None:
    """Say how the two sides ran different scripts, or None when they ran the same one (or one is unknown).

    Scripts are told apart by file name: a fixed copy in another folder
    (``examples/fixed/train.py`` against ``examples/train.py``) is the same script, edited;
    ``train.py`` against ``eval.py`` is not, and a speedup between them measures nothing.
    Traces carry no script, so two traces are never refused on this ground.
    """
    a, b = before.run.script, after.run.script
    if not a or not b:
        return None
    name_a, name_b = Path(a).name, Path(b).name
    if name_a == name_b:
        return None
    return f"scripts differ ({s.display_path(a)} vs {s.display_path(b)})"


def _op_deltas(a: Report, b: Report, limit: int = MAX_OP_DELTAS) -> tuple[OpDelta, ...]:
    """Return the operators whose self time changed most between two reports' operator tables."""
    ta, tb = ({str(r.get("operator")): r for r in rep.tables.get("operators", ())} for rep in (a, b))
    if not ta or not tb:
        return ()
    out = []
    for name in dict.fromkeys((*ta, *tb)):
        ra, rb = ta.get(name) or {}, tb.get(name) or {}
        out.append(OpDelta(name, s.finite(ra.get("self_ms")), s.finite(rb.get("self_ms")),
                           s.finite(ra.get("calls")), s.finite(rb.get("calls"))))
    # NOTE: an operator listed on one side only ranks by what that side measured: the other
    # side's time is below its table's last row, unknown, so its change is at most that much.
    def size(d: OpDelta) -> float:
        return abs(d.delta_ms) if d.delta_ms is not None else (d.before_ms or d.after_ms or 0.0)

    return tuple(sorted(out, key=lambda d: (-size(d), d.operator))[:limit])


def _verdict(speedup: float | None, ci: tuple[float, float] | None, band: float) -> str:
    """Call faster/slower only beyond the noise, else no measurable effect.

    With an interval: it must clear 1 and the speedup pass the minimum effect. For single runs:
    the ratio must lie outside the noise band (symmetric in log space).
    """
    if speedup is None:
        return "unknown"
    if ci is not None:
        if ci[0] > 1.0 and speedup >= 1 + MIN_EFFECT_BAND:
            return "faster"
        if ci[1] < 1.0 and speedup <= 1 - MIN_EFFECT_BAND:
            return "slower"
        return "no measurable effect"
    if speedup >= 1 + band:
        return "faster"
    if speedup <= 1 / (1 + band):
        return "slower"
    return "no measurable effect"


def _run_rate(report: Report, metric: str) -> float | None:
    """One run's rate: samples/s, or steps/s from its median step time (higher is faster)."""
    if metric == "samples_per_s":
        return throughput(report)
    step = _step_ms(report)
    return 1000.0 / step if step else None


def _step_ms(report: Report) -> float | None:
    """Return the run's one step time: the headline its own report prints (timed steps when it has them)."""
    return step_time(report).ms


def _label(report: Report, default: str) -> str:
    return report.run.run_dir or report.source or default


def compare_reports(
    before: Report, after: Report, *, noise: Noise | None = None, trial: Trial | None = None,
) -> Comparison:
    """Compare two single runs; the speedup is ``after`` relative to ``before`` (>1 is faster).

    See :func:`compare_groups` (one run a side: no interval, the noise band decides).
    """
    return compare_groups((before,), (after,), noise=noise, trial=trial)


def _refusals(before: Sequence[Report], after: Sequence[Report]) -> tuple[list[str], bool, bool, str, str]:
    """Return what makes the groups not comparable: (reasons, devices differ, scripts differ, names)."""
    out: list[str] = []
    first = before[0]
    name_a, name_b = device_name(first), device_name(after[0])
    kinds = {k for k in (device_kind(r) for r in (*before, *after)) if k is not None}
    devices_differ = len(kinds) > 1
    if devices_differ:
        odd = next(r for r in (*before, *after) if device_kind(r) != device_kind(first) and device_kind(r))
        out.append(
            f"devices differ ({name_a} vs {device_name(odd)}): a speedup between them measures the hardware, "
            "not a change to the code, so none is given"
        )
    elif kinds == {"gpu"} and name_a != name_b and "GPU" not in (name_a, name_b):
        out.append(
            f"GPU models differ ({name_a} vs {name_b}): the ratio mixes the hardware change with any code change"
        )
    mismatch = next((m for m in (script_mismatch(first, r) for r in (*before[1:], *after)) if m), None)
    if mismatch is not None:
        out.append(f"{mismatch}: a speedup between different scripts measures nothing, so none is given")
    return out, devices_differ, mismatch is not None, name_a, name_b


def compare_groups(
    before: Sequence[Report], after: Sequence[Report], *, noise: Noise | None = None, trial: Trial | None = None,
) -> Comparison:
    """Compare runs of the same script before and after a change (one or more runs a side).

    The speedup is the ratio of the groups' geometric mean samples/s (or steps/s from median
    step times when samples are not counted on every run). With 2+ runs on a side its 95%
    interval is a t interval over runs; with one run a side there is none, and the ratio is a
    change only outside ``noise`` (the script's measured run-to-run noise) or, when that is
    unknown, :func:`default_noise_band`. A side measured on a busy machine is named in the notes
    and no change is called from it (``not measurable``). The breakdown, operators and findings
    come from the first run of each side.

    Args:
        before: The runs (reports) before the change, at least one.
        after: The runs after it, at least one.
        noise: The script's run-to-run noise, when a diagnose measured it.
        trial: The fix loop's interleaved trial of the change (``after`` is ``RUN/kept``).
    """
    if not before or not after:
        raise ValueError("compare_groups needs at least one report a side")
    a, b = before[0], after[0]
    not_comparable, devices_differ, scripts_differ, name_a, name_b = _refusals(before, after)
    notes: list[str] = []
    step_a, step_b = (median([_step_ms(r) for r in side]) for side in (before, after))
    step_speedup = step_a / step_b if step_a and step_b else None
    metric: str | None = None
    if all(throughput(r) for r in (*before, *after)):
        metric = "samples_per_s"
        notes.append("speedup = samples/s after ÷ samples/s before (timed steps, no profiler)")
    elif step_a and step_b and all(_step_ms(r) for r in (*before, *after)):
        metric = "step_time_ms"
        if any(throughput(r) for r in (*before, *after)):
            notes.append("samples/s is not known on every run; the speedup uses median step time")
        else:
            timed = all(step_time(r).basis == StepBasis.TIMED for r in (*before, *after))
            notes.append(f"speedup = median step time before ÷ after ({'timed' if timed else 'profiled'} steps)")
    else:
        notes.append("neither samples/s nor step times are available on both sides")
    values_a = tuple(v for v in (_run_rate(r, metric) for r in before) if v) if metric else ()
    values_b = tuple(v for v in (_run_rate(r, metric) for r in after) if v) if metric else ()
    ratio = group_ratio(values_a, values_b) if metric else None
    speedup = ratio.speedup if ratio else None
    ci = (ratio.ci_low, ratio.ci_high) if ratio and ratio.ci_low is not None else None
    if metric == "step_time_ms":
        sps_a, sps_b = s.finite(a.summary.get("samples_per_step")), s.finite(b.summary.get("samples_per_step"))
        if sps_a and sps_b and sps_a != sps_b:
            not_comparable.append(
                f"samples per step differ ({s.number(sps_a)} vs {s.number(sps_b)}): a step-time ratio is not "
                "a throughput ratio, so no speedup is given"
            )
            speedup, ci = None, None
        elif not (sps_a and sps_b):
            notes.append("samples per step unknown on at least one side: step time assumes the same work per step")

    ranks_a = len({r.get("rank") for r in a.steps}) or 1
    ranks_b = len({r.get("rank") for r in b.steps}) or 1
    if ranks_a != ranks_b:
        not_comparable.append(
            f"rank counts differ ({ranks_a} vs {ranks_b}): step times are per rank, total throughput is not compared"
        )
    parts, parts_basis = part_deltas(a, b)
    one_sided = [
        p.part for p in parts if p.part in GPU_ONLY_PARTS and ((p.before_frac or 0) <= 0 or (p.after_frac or 0) <= 0)
    ]
    if one_sided and devices_differ:
        not_comparable.append(
            "breakdown parts measured on one side only: " + ", ".join(s.part_label(p) for p in one_sided)
        )

    refused = devices_differ or scripts_differ
    band = noise.band if noise is not None else default_noise_band((step_a, step_b))
    if refused:
        # NOTE: how a ratio would have been computed is irrelevant when none is given.
        speedup, ci = None, None
        notes = [n for n in notes if not n.startswith(("speedup =", "samples/s is not known", "samples per step unknown"))]
    elif speedup is not None:
        notes.extend(interval_notes(len(values_a), len(values_b), ci, noise, band))
    verdict = "not comparable" if refused or (speedup is None and metric is not None) else _verdict(speedup, ci, band)
    contended = tuple(
        side for side, runs in (("before", before), ("after", after)) if any(contention_warning(r) for r in runs)
    )
    for side, runs in (("before", before), ("after", after)):
        warning = next((w for w in (contention_warning(r) for r in runs) if w), None)
        if warning:
            notes.append(f"{side} side {warning}")
    if contended and verdict in ("faster", "slower"):
        who = "both sides were" if len(contended) == 2 else f"the {contended[0]} side was"
        notes.append(
            f"{who} measured on a busy machine: the {s.times(speedup)} is not called a change; re-run both sides "
            "on a quiet machine"
        )
        verdict = NOT_MEASURABLE
    unsteady = tuple(side for side, runs in (("before", before), ("after", after))
                     if len(runs) == 1 and not step_time(runs[0]).steady)
    if unsteady and ci is None and verdict in ("faster", "slower"):
        # NOTE: a run whose steps changed level inside its window has no level of its own: the
        # A/A pair behind this read 0.95 -> 1.78 ms mid-window on one side, and 2.33x "faster".
        who = "both runs'" if len(unsteady) == 2 else f"the {unsteady[0]} run's"
        notes.append(
            f"{who} timed steps were not steady: one such run is not a level, so the {s.times(speedup)} is not "
            "called a change; repeat the runs and compare them as groups (--before/--after)"
        )
        verdict = NOT_MEASURABLE
    if trial is not None:
        notes.append(trial_note(trial, speedup))

    codes_a = {f.code: f for f in a.findings}
    codes_b = {f.code: f for f in b.findings}
    return Comparison(
        before=_side_label(before, "before"),
        after=_side_label(after, "after"),
        before_device=name_a,
        after_device=name_b,
        metric=metric,
        before_value=_shown(ratio.before_mean if ratio else None, metric),
        after_value=_shown(ratio.after_mean if ratio else None, metric),
        speedup=speedup,
        ci_low=ci[0] if ci else None,
        ci_high=ci[1] if ci else None,
        verdict=verdict,
        step_time_before_ms=step_a,
        step_time_after_ms=step_b,
        parts=parts,
        parts_basis=parts_basis,
        operators=_op_deltas(a, b),
        disappeared=tuple(f for c, f in codes_a.items() if c not in codes_b),
        appeared=tuple(f for c, f in codes_b.items() if c not in codes_a),
        persisting=tuple(f for c, f in codes_b.items() if c in codes_a),
        not_comparable=tuple(not_comparable),
        notes=tuple(notes),
        before_runs=tuple(_label(r, "before") for r in before),
        after_runs=tuple(_label(r, "after") for r in after),
        before_values=values_a,
        after_values=values_b,
        noise_band=None if ci is not None or speedup is None else band,
        contended=contended,
        trial=trial,
        extra={"step_time_speedup": None if refused else step_speedup},
    )


def _shown(mean: float | None, metric: str | None) -> float | None:
    """Return a group's mean as the metric shows it: samples/s, or ms per step from steps/s."""
    if mean is None:
        return None
    return 1000.0 / mean if metric == "step_time_ms" else mean


def _side_label(runs: Sequence[Report], default: str) -> str:
    first = _label(runs[0], default)
    return first if len(runs) == 1 else f"{first} and {len(runs) - 1} more run(s)"
