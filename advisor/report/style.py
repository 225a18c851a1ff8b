"""Labels, colours and number formats every renderer shares, so text, Markdown and HTML agree.

Nothing here knows about an output format: these are plain functions from values to short
strings (``42.0%``, ``1.32×``, ``12.4 ms``) and the display vocabulary for breakdown parts,
categories and timeline lanes.
"""

from __future__ import annotations

from typing import Any

from advisor._num import finite, ms_text
from advisor._paths import display_path, location_text  # noqa: F401 - the renderers call them as style.display_path and style.location_text
from advisor.capture.vocab import RunStatus
from advisor.metrics.registry import BREAKDOWN_PARTS
from advisor.report.model import ReportStatus

PART_LABELS: dict[str, str] = {
    "data_loading": "Data loading",
    "h2d_copy": "Host→device copies",
    "d2h_copy": "Device→host copies",
    "sync_wait": "Sync waits",
    "communication": "Communication",
    "gpu_compute": "GPU compute",
    "optimizer": "Optimizer",
    "cpu_ops": "CPU ops",
    "gpu_idle": "GPU idle",
    "other": "Other",
}
"""Display name of each breakdown part (keys are :data:`BREAKDOWN_PARTS`)."""

# NOTE: one palette for every format (HTML fills, rich colours) so a colleague reading the HTML
# and someone reading the terminal see data loading in the same red. Colour-blind-safe-ish
# (Tableau 10 order), and the "waste" parts are warm while useful work is green/blue.
PART_COLORS: dict[str, str] = {
    "data_loading": "#e15759",
    "h2d_copy": "#f28e2b",
    "d2h_copy": "#edc948",
    "sync_wait": "#b07aa1",
    "communication": "#76b7b2",
    "gpu_compute": "#59a14f",
    "optimizer": "#4e79a7",
    "cpu_ops": "#9cc3e6",
    "gpu_idle": "#bab0ac",
    "other": "#d4d4d4",
}

CATEGORY_LABELS: dict[str, str] = {
    "data_loading": "Data loading",
    "host_to_device": "Host-to-device copies",
    "sync": "CPU–GPU syncs",
    "small_kernels": "Small kernels / per-op overhead",
    "memory": "Memory",
    "compute": "Compute",
    "communication": "Communication",
    "host": "Host-bound CPU work",
}
"""Display name of each bottleneck category (keys are ``advisor.engine.model.CATEGORIES``)."""

SEVERITY_COLORS: dict[str, str] = {"error": "#d62728", "warning": "#e8a317", "info": "#4e79a7"}
SEVERITY_RICH: dict[str, str] = {"error": "bold red", "warning": "yellow", "info": "cyan"}

VERDICT_LABELS: dict[str, str] = {
    "improved": "faster",
    "no_effect": "no measurable effect",
    "undecided": "undecided (too noisy)",
    "unmeasurable": "not measurable here",
    "slower": "slower",
    "failed": "failed",
    "skipped": "skipped",
    "advice": "advice (not measured)",
}
VERDICT_SHORT: dict[str, str] = {**VERDICT_LABELS, "no_effect": "no effect", "undecided": "undecided"}
"""Verdict words for tight spaces (plot labels)."""
VERDICT_COLORS: dict[str, str] = {
    "improved": "#59a14f",
    "no_effect": "#9d9d9d",
    "undecided": "#b07aa1",
    "unmeasurable": "#b07aa1",
    "slower": "#e15759",
    "failed": "#b22222",
    "skipped": "#c8c8c8",
    "advice": "#4e79a7",
}

LANE_LABELS: dict[str, str] = {
    "data_loading": "Data loading",
    "cpu_ops": "CPU ops",
    "gpu_kernels": "GPU kernels",
    "copies": "Copies",
    "syncs": "Syncs",
    "communication": "Communication",
}
LANE_COLORS: dict[str, str] = {
    "data_loading": PART_COLORS["data_loading"],
    "cpu_ops": "#4e79a7",
    "gpu_kernels": PART_COLORS["gpu_compute"],
    "copies": PART_COLORS["h2d_copy"],
    "syncs": PART_COLORS["sync_wait"],
    "communication": PART_COLORS["communication"],
}


def sentence(text: str) -> str:
    """Return ``text`` with its first letter capitalised and the rest as written (``str.capitalize`` lowercases "GPU")."""
    return text[:1].upper() + text[1:]


def part_label(part: str) -> str:
    """Display name of a breakdown part (the raw name when unknown)."""
    return PART_LABELS.get(part, part.replace("_", " "))


def category_label(category: str) -> str:
    """Display name of a bottleneck category (the raw name when unknown)."""
    return CATEGORY_LABELS.get(category, category.replace("_", " "))


def lane_label(lane: str) -> str:
    """Display name of a timeline lane (the raw name when unknown)."""
    return LANE_LABELS.get(lane, lane.replace("_", " "))


def pct(frac: Any, digits: int = 1) -> str:
    """Return a fraction as a percentage (``0.42`` -> ``42.0%``); ``—`` when unknown."""
    v = finite(frac)
    return "—" if v is None else f"{v * 100:.{digits}f}%"


def recoverable(frac: Any) -> str:
    """Return a finding's modelled share, labelled: ``up to 41.8% of step time (estimate)``.

    The rules model what a fix could recover; unlabelled it read as the measured share (issue #20).
    """
    return f"up to {pct(frac)} of step time (estimate)"


def times(ratio: Any, digits: int = 2) -> str:
    """Return a ratio as a speedup (``1.5`` -> ``1.50×``); ``—`` when unknown."""
    v = finite(ratio)
    return "—" if v is None else f"{v:.{digits}f}×"


def ms(value: Any) -> str:
    """Milliseconds with sensible precision (``0.042 ms``, ``12.4 ms``, ``1,234 ms``)."""
    v = finite(value)
    return "—" if v is None else ms_text(v)


def signed_ms(value: Any) -> str:
    """Return a millisecond delta with its sign (``+3.2 ms``, ``−1.0 ms``)."""
    v = finite(value)
    if v is None:
        return "—"
    text = ms(abs(v))
    return ("+" if v > 0 else "−" if v < 0 else "±") + text


def signed_pts(delta_frac: Any) -> str:
    """Return a change of share in percentage points (``+4.1 pt``)."""
    v = finite(delta_frac)
    if v is None:
        return "—"
    sign = "+" if v > 0 else "−" if v < 0 else "±"
    return f"{sign}{abs(v) * 100:.1f} pt"


def rate(value: Any) -> str:
    """Return a throughput in samples/s with three significant-ish digits."""
    v = finite(value)
    if v is None:
        return "—"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def number(value: Any) -> str:
    """Return a generic metric value: integers plainly, floats to 4 significant digits."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return f"{value:,}"
    v = finite(value)
    if v is None:
        return str(value)
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v):,}"
    return f"{v:.4g}"


def nbytes(value: Any) -> str:
    """Return a byte count in binary units (``1.5 GiB``)."""
    v = finite(value)
    if v is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{v:.1f} TiB"  # pragma: no cover - loop always returns


def ci(low: Any, high: Any) -> str:
    """Return a confidence interval on a ratio (``[1.21–1.40]``); empty when unknown."""
    lo, hi = finite(low), finite(high)
    if lo is None or hi is None:
        return ""
    return f"[{lo:.2f}–{hi:.2f}]"


def trial_score(trial: Any) -> str:
    """Return the prediction beside the measurement: ``estimated ≤ 1.80×, measured 1.44×`` ("" without one)."""
    est, got = finite(getattr(trial, "estimate", None)), finite(getattr(trial, "speedup", None))
    if est is None or got is None:
        return ""
    what = "Amdahl bound" if getattr(trial, "estimate_basis", "") == "amdahl" else "findings' estimate"
    text = f"estimated ≤ {est:.2f}× ({what}), measured {got:.2f}×"
    if getattr(trial, "beat_estimate", False):
        text += ": beyond the estimate, which was wrong" if what == "Amdahl bound" else ": beyond the estimate"
    return text


SAFE_LOSS_NOTICE = 0.001
"""A safe fix's loss drift (relative, against the baseline with the same seed) above which the report says so."""


def safe_loss_note(trial: Any) -> str:
    """Say when a fix labelled safe moved the loss noticeably ("" otherwise).

    *Safe* means the arithmetic is unchanged, yet a run can still see other data: DataLoader
    workers draw random augmentations from their own seeded generators, so the loss of the first
    steps differs. The trial passes (it is within the safe tolerance) but a user reading "safe:
    keeps numerics" next to a 1.16% loss change deserved a word (issue #32).
    """
    diff = finite(getattr(trial, "loss_max_rel_diff", None))
    if getattr(trial, "safety", "") != "safe" or diff is None or diff <= SAFE_LOSS_NOTICE:
        return ""
    return (
        f"loss moved {pct(diff, 2)} from the baseline's with the same seed: a safe fix keeps the "
        "arithmetic, but the data can differ (DataLoader workers seed their own random augmentations)"
    )


def trial_interval(trial: Any) -> str:
    """Return a trial's interval (``[1.21–1.40]``), with ``range`` after it when it spans every run against every other."""
    text = ci(getattr(trial, "ci_low", None), getattr(trial, "ci_high", None))
    return f"{text} range" if text and getattr(trial, "interval", "ci95") == "run_range" else text




def ordered_parts(breakdown: dict[str, Any]) -> list[str]:
    """Breakdown parts in display order: the declared parts first, then any unknown extras."""
    extra = sorted(k for k in breakdown if k not in BREAKDOWN_PARTS)
    return [p for p in BREAKDOWN_PARTS if p in breakdown] + extra


def diff_line_kind(line: str) -> str:
    """Classify a unified-diff line: ``add``, ``remove``, ``hunk`` or ``""`` (context, headers)."""
    if line.startswith("+") and not line.startswith("+++"):
        return "add"
    if line.startswith("-") and not line.startswith("---"):
        return "remove"
    if line.startswith("@@"):
        return "hunk"
    return ""


def trial_reference(trial: Any) -> str | None:
    """Return the run a trial was compared with when that is not the baseline, else None.

    A fix measured "on top of" another (``persistent_workers`` on top of the best loader-workers
    rung) has ``baseline_samples_per_s`` and ``speedup`` relative to that fix's run, so every
    renderer that shows a baseline must say which one (``Trial.reference``).
    """
    ref = getattr(trial, "reference", None)
    return str(ref) if ref else None


def trial_memory(trial: Any) -> str:
    """Return a trial's peak memory and its change from the reference: ``412.0 MiB (−12%)``.

    CUDA max allocated on a GPU, the script process's peak RSS on CPU (``Trial.memory_kind``).
    """
    peak = getattr(trial, "peak_memory_bytes", None)
    if not peak:
        return "—"
    base = getattr(trial, "baseline_peak_memory_bytes", None)
    if not base:
        return nbytes(peak)
    change = peak / base - 1.0
    sign = "+" if change > 0 else "−" if change < 0 else "±"
    return f"{nbytes(peak)} ({sign}{abs(change) * 100:.0f}%)"


def has_memory(trials: Any) -> bool:
    """Tell whether any trial recorded its peak memory (older reports did not)."""
    return any(getattr(t, "peak_memory_bytes", None) for t in trials if t is not None)


RUN_STATUS_LABELS: dict[str, str] = {
    RunStatus.STOPPED: "complete",
    RunStatus.COMPLETED: "complete (ran to its end)",
}
"""Capture statuses in words for people; ``stopped`` (advisor ended the script after its profiled
steps, as planned) read as a failure on a successful capture (issue #32). JSON keeps the words."""


def run_status_label(status: str) -> str:
    """Return a capture status for display: ``complete`` for a normal stop, the word itself otherwise."""
    return RUN_STATUS_LABELS.get(status, status)


def status_line(status: str, trials: Any, run_status: str = "") -> str | None:
    """One line saying a report is not final (``running``/``interrupted``), or None when it is.

    Args:
        status: The report's ``status`` word.
        trials: Its trials; the unfinished ones are counted apart.
        run_status: The capture's status: ``interrupted`` when the signal came before any trial.
    """
    if status in ("", ReportStatus.COMPLETE):
        return None
    if status == ReportStatus.INTERRUPTED and run_status == "interrupted" and not trials:
        # NOTE: "Interrupted during the fix trials" was said of a capture interrupted before them
        return "Interrupted during the capture: this report holds the steps measured before it; no fix was tried."
    open_ = sum(1 for t in trials if getattr(t, "unfinished", False))
    done = len(trials) - open_
    counts = f"{done} trial(s) finished" + (f", {open_} unfinished (figures so far)" if open_ else "")
    if status == ReportStatus.INTERRUPTED:
        return f"Interrupted during the fix trials: {counts}; nothing was kept and no diff was made."
    if status == ReportStatus.RUNNING:
        return f"The fix trials were still running when this was written: {counts}."
    return f"Status {status}: {counts}."


def timing_line(timing: Any) -> str | None:
    """One line saying how long the diagnose took and how much of it was overhead, or None.

    Args:
        timing: A report's ``timing`` (``advisor.report.model.timing_of``).
    """
    if not isinstance(timing, dict) or not isinstance(timing.get("total_s"), (int, float)):
        return None
    total = float(timing["total_s"])
    parts = []
    if isinstance(timing.get("capture_s"), (int, float)):
        parts.append(f"capture {timing['capture_s']:.1f} s")
    if timing.get("trial_runs"):
        warm = (timing.get("starts") or {}).get("warm") if isinstance(timing.get("starts"), dict) else None
        started = f" ({warm} warm-started)" if warm else ""
        parts.append(f"{timing['trial_runs']} trial runs{started} {float(timing.get('trials_s') or 0.0):.1f} s")
    line = f"Diagnose took {total:.1f} s" + (f" ({', '.join(parts)})" if parts else "")
    overhead = timing.get("overhead_s")
    if isinstance(overhead, (int, float)) and total > 0:
        line += f"; overhead {overhead:.1f} s ({overhead / total:.0%}), everything but the measured steps: "
        line += overhead_parts(timing.get("phases_s"), float(overhead))
    return line + "."


OVERHEAD_PHASES: dict[str, str] = {
    "setup": "the script's set-up and first step",
    "warmup": "warm-up",
    "imports": "imports",
    "process": "process start and end",
    "finishing": "the runs' ends",
    "export": "trace export",
    "server": "waiting for the warm-start server",
}
"""The phases of ``timing["phases_s"]`` that are overhead, and how the timing line names them."""


def overhead_parts(phases: Any, overhead_s: float) -> str:
    """Name where the overhead went, largest first: each overhead phase summed over the runs, then the rest.

    The rest is what no run's clock holds: advisor's analysis of the capture, the fix plan, the
    reports. Parts under 0.05 s are left out.
    """
    phases = phases if isinstance(phases, dict) else {}
    parts = {label: float(phases.get(name) or 0.0) for name, label in OVERHEAD_PHASES.items()}
    parts["analysis and reports"] = max(overhead_s - sum(parts.values()), 0.0)
    shown = sorted(((s, label) for label, s in parts.items() if s >= 0.05), reverse=True)
    if not shown:
        return "none worth naming"
    texts = [f"{label} {s:.1f} s" for s, label in shown]
    if shown[0][1] == OVERHEAD_PHASES["export"] and shown[0][0] >= 1.0:
        # NOTE: torch.profiler's stop and export grow with the profiled steps' events: 5.6 s of a
        # 13.7 s capture for 10 steps of a small transformer with stacks (docs/benchmarks.md)
        texts[0] += " (fewer --profile-steps shorten it)"
    return ", ".join(texts)


def rank_suffix(focus_rank: Any) -> str:
    """`` (rank 37, the straggler)`` for a table taken from the straggler's trace, else ""."""
    return f" (rank {focus_rank}, the straggler)" if isinstance(focus_rank, int) else ""
