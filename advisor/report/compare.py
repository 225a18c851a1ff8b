"""Before/after comparison of two reports: speedup, per-part deltas, findings gone and new.

:func:`compare_reports` is pure (two :class:`Report` in, one frozen :class:`Comparison` out).
It refuses to print a bogus ratio: when the two sides ran on different kinds of device, or
count work differently, the speedup is left out and the reason goes to ``not_comparable``.
:func:`looks_like_report` tells a saved report from a trace; turning a trace into a Report is
``advisor.api.load_side``'s job, so this renderer-side module never calls back into the api.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, NamedTuple

from advisor._num import median
from advisor._serde import to_jsonable
from advisor.engine.model import Finding
from advisor.report import style as s
from advisor.report.figures import median_step_ms, part_shares, throughput
from advisor.report.model import REPORT_FILE, Report

COMPARISON_SCHEMA_VERSION = 1
NOISE_BAND = 0.05
"""Relative change treated as noise when no confidence interval can be computed."""
BOOTSTRAP_RESAMPLES = 2000
GPU_ONLY_PARTS = frozenset({"h2d_copy", "d2h_copy", "sync_wait", "gpu_compute", "gpu_idle"})
"""Breakdown parts that are zero by construction on a CPU-only run."""


class _NoteKind(Enum):
    """What a comparison note is about, so a refused comparison can drop the moot ones."""

    METHOD = "method"
    """How the speedup is computed: moot when no speedup is given."""
    REMARK = "remark"


class _Note(NamedTuple):
    text: str
    kind: _NoteKind = _NoteKind.REMARK


@dataclass(frozen=True)
class PartDelta:
    """One breakdown part before and after (fractions of step time, and mean ms per step)."""

    part: str
    before_frac: float | None
    after_frac: float | None
    before_ms: float | None
    after_ms: float | None

    @property
    def delta_ms(self) -> float | None:
        """After minus before, in ms per step (None when either side lacks it)."""
        if self.before_ms is None or self.after_ms is None:
            return None
        return self.after_ms - self.before_ms

    @property
    def delta_frac(self) -> float | None:
        """After minus before, as a share of step time."""
        if self.before_frac is None or self.after_frac is None:
            return None
        return self.after_frac - self.before_frac


@dataclass(frozen=True)
class OpDelta:
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

    @property
    def delta_ms(self) -> float | None:
        """After minus before, in ms per step (None when either side lacks it)."""
        if self.before_ms is None or self.after_ms is None:
            return None
        return self.after_ms - self.before_ms


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
        ci_low / ci_high: 95% bootstrap interval on the speedup, when per-step times allow.
        verdict: ``faster``, ``slower``, ``no measurable effect``, ``not comparable``, ``unknown``.
        step_time_before_ms / step_time_after_ms: Median step times.
        parts: Per-part breakdown before and after, in display order.
        operators: The operators whose host self time per step changed most (both reports
            have an operator table), largest change first.
        disappeared / appeared / persisting: Findings by rule code (after's version when persisting).
        not_comparable: What cannot be compared, and why; empty when the sides match.
        notes: Other remarks (how the speedup was computed, few steps, ...).
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
    operators: tuple[OpDelta, ...] = ()
    disappeared: tuple[Finding, ...] = ()
    appeared: tuple[Finding, ...] = ()
    persisting: tuple[Finding, ...] = ()
    not_comparable: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
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


def _step_times(report: Report) -> list[float]:
    return [v for v in (s.finite(r.get("step_time_ms")) for r in report.steps) if v is not None and v > 0]


def bootstrap_ratio_ci(numer: list[float], denom: list[float], seed: int = 0) -> tuple[float, float] | None:
    """95% percentile-bootstrap interval on ``median(numer) / median(denom)``.

    Deterministic (fixed seed) so reports diff cleanly. None with fewer than 3 values a side.
    """
    if len(numer) < 3 or len(denom) < 3:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(BOOTSTRAP_RESAMPLES):
        n = median(rng.choices(numer, k=len(numer))) or 0.0
        d = median(rng.choices(denom, k=len(denom))) or 0.0
        if d > 0:
            ratios.append(n / d)
    ratios.sort()
    lo = ratios[int(0.025 * (len(ratios) - 1))]
    hi = ratios[int(0.975 * (len(ratios) - 1))]
    return lo, hi


def timed_throughputs(report: Report) -> list[float]:
    """Per-step samples/s over the timed steps (step times alone when samples are not counted)."""
    times = report.run.timed_step_times_ms
    samples = report.run.timed_samples
    out = []
    for i, t in enumerate(times):
        ft = s.finite(t)
        n = samples[i] if i < len(samples) else None
        if ft and ft > 0 and isinstance(n, int) and n > 0:
            out.append(n / (ft / 1000.0))
    return out


def _part_ms(report: Report, part: str) -> float | None:
    vals = [v for v in (s.finite(r.get(f"{part}_ms")) for r in report.steps) if v is not None]
    return sum(vals) / len(vals) if vals else None


def _parts(a: Report, b: Report) -> tuple[PartDelta, ...]:
    sa, sb = part_shares(a), part_shares(b)
    names = s.ordered_parts({**sa, **sb})
    out = []
    for p in names:
        fa, fb = sa.get(p), sb.get(p)
        if (fa or 0) <= 0 and (fb or 0) <= 0:
            continue
        out.append(PartDelta(p, fa, fb, _part_ms(a, p), _part_ms(b, p)))
    return tuple(out)


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


def _verdict(speedup: float | None, ci: tuple[float, float] | None) -> str:
    if speedup is None:
        return "unknown"
    if ci is not None:
        if ci[0] > 1.0:
            return "faster"
        if ci[1] < 1.0:
            return "slower"
        return "no measurable effect"
    if speedup > 1 + NOISE_BAND:
        return "faster"
    if speedup < 1 - NOISE_BAND:
        return "slower"
    return "no measurable effect"


def compare_reports(before: Report, after: Report) -> Comparison:
    """Compare two reports; the speedup is ``after`` relative to ``before`` (>1 is faster).

    The speedup uses samples/s when both sides have it, else median step time. It is left out,
    with the reason in ``not_comparable``, when the sides ran on different kinds of device or
    (for step time) processed different numbers of samples per step.
    """
    not_comparable: list[str] = []
    notes: list[_Note] = []
    kind_a, kind_b = device_kind(before), device_kind(after)
    name_a, name_b = device_name(before), device_name(after)
    devices_differ = kind_a is not None and kind_b is not None and kind_a != kind_b
    if devices_differ:
        not_comparable.append(
            f"devices differ ({name_a} vs {name_b}): a speedup between them measures the hardware, "
            "not a change to the code, so none is given"
        )
    elif kind_a == kind_b == "gpu" and name_a != name_b and "GPU" not in (name_a, name_b):
        not_comparable.append(
            f"GPU models differ ({name_a} vs {name_b}): the ratio mixes the hardware change with any code change"
        )

    scripts_differ = script_mismatch(before, after)
    if scripts_differ is not None:
        not_comparable.append(
            f"{scripts_differ}: a speedup between different scripts measures nothing, so none is given"
        )

    tput_a, tput_b = throughput(before), throughput(after)
    step_a, step_b = median_step_ms(before), median_step_ms(after)
    times_a, times_b = _step_times(before), _step_times(after)
    step_speedup = step_a / step_b if step_a and step_b else None
    metric: str | None = None
    value_a = value_b = speedup = None
    ci: tuple[float, float] | None = None
    if tput_a and tput_b:
        metric, value_a, value_b = "samples_per_s", tput_a, tput_b
        speedup = tput_b / tput_a
        notes.append(_Note("speedup = samples/s after ÷ samples/s before (timed steps, no profiler)", _NoteKind.METHOD))
        ta, tb = timed_throughputs(before), timed_throughputs(after)
        ci = bootstrap_ratio_ci(tb, ta)  # throughput after / before
        if ci is not None:
            notes.append(_Note(f"95% interval: bootstrap over {len(ta)} and {len(tb)} timed steps"))
    elif step_a and step_b:
        metric, value_a, value_b = "step_time_ms", step_a, step_b
        speedup = step_speedup
        ci = bootstrap_ratio_ci(times_a, times_b)  # step time before / after
        if tput_a or tput_b:
            notes.append(_Note("samples/s is known on one side only; the speedup uses median step time", _NoteKind.METHOD))
        else:
            notes.append(_Note("speedup = median step time before ÷ after (profiled steps)", _NoteKind.METHOD))
        sps_a, sps_b = s.finite(before.summary.get("samples_per_step")), s.finite(after.summary.get("samples_per_step"))
        if sps_a and sps_b and sps_a != sps_b:
            not_comparable.append(
                f"samples per step differ ({s.number(sps_a)} vs {s.number(sps_b)}): a step-time ratio is not "
                "a throughput ratio, so no speedup is given"
            )
            speedup, ci = None, None
        elif not (sps_a and sps_b):
            notes.append(_Note("samples per step unknown on at least one side: step time assumes the same work per step", _NoteKind.METHOD))
    else:
        notes.append(_Note("neither samples/s nor step times are available on both sides"))

    ranks_a = len({r.get("rank") for r in before.steps}) or 1
    ranks_b = len({r.get("rank") for r in after.steps}) or 1
    if ranks_a != ranks_b:
        not_comparable.append(
            f"rank counts differ ({ranks_a} vs {ranks_b}): step times are per rank, total throughput is not compared"
        )
    parts = _parts(before, after)
    one_sided = [
        p.part for p in parts if p.part in GPU_ONLY_PARTS and ((p.before_frac or 0) <= 0 or (p.after_frac or 0) <= 0)
    ]
    if one_sided and devices_differ:
        not_comparable.append(
            "breakdown parts measured on one side only: " + ", ".join(s.part_label(p) for p in one_sided)
        )
    for side, times in (("before", times_a), ("after", times_b)):
        if 0 < len(times) < 3:
            notes.append(_Note(f"only {len(times)} step(s) {side}: no confidence interval"))

    refused = devices_differ or scripts_differ is not None
    if refused:
        # NOTE: how a ratio would have been computed is irrelevant when none is given.
        speedup, ci = None, None
        notes = [n for n in notes if n.kind is not _NoteKind.METHOD]
    verdict = "not comparable" if refused or (speedup is None and metric is not None) else _verdict(speedup, ci)
    if speedup is not None and ci is not None and not ci[0] <= speedup <= ci[1]:
        notes.append(_Note("the overall samples/s ratio lies outside the per-step interval: step times were uneven"))
    if speedup is not None and ci is None and metric == "samples_per_s":
        notes.append(_Note(f"one throughput per side: changes under {NOISE_BAND:.0%} are treated as noise"))

    codes_a = {f.code: f for f in before.findings}
    codes_b = {f.code: f for f in after.findings}
    return Comparison(
        before=before.run.run_dir or before.source or "before",
        after=after.run.run_dir or after.source or "after",
        before_device=name_a,
        after_device=name_b,
        metric=metric,
        before_value=value_a,
        after_value=value_b,
        speedup=speedup,
        ci_low=ci[0] if ci else None,
        ci_high=ci[1] if ci else None,
        verdict=verdict,
        step_time_before_ms=step_a,
        step_time_after_ms=step_b,
        parts=parts,
        operators=_op_deltas(before, after),
        disappeared=tuple(f for c, f in codes_a.items() if c not in codes_b),
        appeared=tuple(f for c, f in codes_b.items() if c not in codes_a),
        persisting=tuple(f for c, f in codes_b.items() if c in codes_a),
        not_comparable=tuple(not_comparable),
        notes=tuple(n.text for n in notes),
        extra={"step_time_speedup": None if refused else step_speedup},
    )
