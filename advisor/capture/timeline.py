"""Reading a step recorder's state back: why its step source, where the time went, steadiness.

Why the step source was chosen, where the child's time went phase by phase, and whether the timed
window still needs steps: pure functions of the recorder's fields, so that
:mod:`advisor.capture.recorder` keeps only the state machine.

The timed window must be steady before it counts (:mod:`advisor._steady`): when its first steps
are still warming up (slower, then a steady level), it is extended until the steady part holds
the steps asked for, by at most as many again; consumers then time the steady part only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from advisor._steady import SteadyState, assess
from advisor.capture.phases import (
    MIN_SETTLE_EXTRA,
    SOURCE_BACKWARD,
    SOURCE_MARKER,
    SOURCE_MODULE,
    SOURCE_OPTIMIZER,
)
from advisor.capture.vocab import Phase

MEASURED = (Phase.TIMED, Phase.PROFILED, Phase.CPROFILE)
"""The phases whose counted steps are measurements (the rest of their time is advisor's own)."""


def source_reason(source: str | None, optimizers: int, modules: int) -> str | None:
    """Say which events defined the steps and why that source was chosen (None: no step).

    ``optimizers`` and ``modules`` are the distinct optimizers stepped and modules called in one
    iteration.
    """
    if source is None:
        return None
    if source == SOURCE_MARKER:
        return "the script calls advisor.step() once per step"
    if source == SOURCE_OPTIMIZER:
        if optimizers > 1:
            return (
                f"{optimizers} torch.optim optimizers step in each iteration; a step ends at the last "
                "of them, so one iteration is one step"
            )
        return "a step ends at each torch.optim optimizer step"
    if source == SOURCE_BACKWARD:
        return (
            "no torch.optim optimizer stepped; a step ends at each backward() call "
            "(parameters are updated by hand)"
        )
    if source == SOURCE_MODULE:
        each = (
            f"the last of the {modules} modules called in each iteration" if modules > 1 else "the model"
        )
        return (
            "no optimizer step and no backward() call (inference); a step ends at each call "
            f"of {each}"
        )
    return (
        "no optimizer step, backward() call or model call was seen; a step is one DataLoader "
        "batch"
    )


def phase_seconds(
    phase_started: dict[str, float],
    start_time: float,
    first_step_end: float | None,
    phase: str,
    now: float,
    measured: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Return where the child's time went until ``now``, in seconds, in the order it was spent.

    ``imports`` runs from the child's start (``start_time``) to the script's first line
    (advisor, torch, the fixes); ``setup`` from there to the end of the first step (the
    script's data and model set-up, any compile); then each phase from its start
    (``phase_started``) to the next one's (``warmup`` less the set-up, ``timed``, ``profiled``,
    ``cprofile``), and ``finishing`` after the last measured step (the script's own end; the
    last window's export, which the child moves to ``export``: :func:`with_last_export`).
    ``phase`` is the phase in progress.

    A finished measurement phase holds only its counted steps (``measured``: their summed
    time per phase); the rest of its span goes to ``export``: advisor's own work between
    those steps, which measures nothing (the trace-budget probe's two steps, stopping and
    exporting the profiled window, the progress line). Left in the profiled window, the
    export made its steps look 1.5x slower than cProfile's (metrics.sources' window factor).
    """
    marks = list(phase_started.items())
    if not marks:
        return {"imports": round(now - start_time, 4)}
    out = {"imports": marks[0][1] - start_time}
    spans = [(name, t, marks[i + 1][1] if i + 1 < len(marks) else now) for i, (name, t) in enumerate(marks)]
    first = first_step_end
    if first is not None:
        out["setup"] = first - marks[0][1]
    for name, t0, t1 in spans:
        if t1 == t0 and name != phase:
            continue  # asked with 0 steps: passed at once
        length = t1 - t0
        if first is not None and t0 <= first <= t1:
            # NOTE: the first step carries the script's set-up: it is counted as set-up,
            # not as the measurement phase it ended in.
            length = t1 - first
        elif first is not None and t1 < first:
            length = 0.0  # phases passed at once (0 steps asked) before the first step ended
        out[name] = length
        if measured is not None and name in MEASURED and name != phase and name in measured:
            spare = length - measured[name]
            if spare > 0:
                out[name] = measured[name]
                out["export"] = out.get("export", 0.0) + spare
    return {k: round(max(v, 0.0), 4) for k, v in out.items()}


def with_last_export(phases: dict[str, float], seconds: float) -> dict[str, float]:
    """Move ``seconds`` of ``finishing`` to ``export``: the last window's close, timed by the child.

    The last profiled window closes after the stop has unwound the script, inside ``finishing``:
    a kept run of ours whose window held an evaluation step (a 58 MB trace) spent 2.2 s there,
    which the report named "the runs' ends" rather than the export it was.
    """
    moved = min(max(seconds, 0.0), phases.get("finishing", 0.0))
    if moved <= 0:
        return phases
    out = dict(phases)
    out["finishing"] = round(out["finishing"] - moved, 4)
    out["export"] = round(out.get("export", 0.0) + moved, 4)
    return out


def still_settling(step_times_ms: list[float], target: int) -> bool:
    """Whether a timed window needs more steps because its first ones were still warming up.

    ``target`` is the steps the window held when it first was complete. The window is extended
    while its slow start leaves fewer steady steps than that, by at most as many steps again
    (then the window is used as it is, and the report says where its steady part starts).
    """
    extra = len(step_times_ms) - target
    if extra >= max(target, MIN_SETTLE_EXTRA):
        return False
    n = len(step_times_ms)
    # NOTE: a long window of fast steps is re-tested every n/100 steps, not every step.
    if n > 500 and extra % (n // 100) != 0:
        return True
    verdict = assess(step_times_ms)
    return verdict.state is SteadyState.SETTLED_LATE and verdict.used < target


@dataclass
class CompileWindow:
    """Graphs ``torch.compile`` compiled inside the timed window, from a counter read at its edges."""

    opened_at: int = 0  # the counter when the window opened
    closed: int = 0  # graphs compiled while it was open, once it closed

    def phase_change(self, old: str, new: str, count: Callable[[], int] | None) -> None:
        """Read the counter when the timed window opens or closes."""
        if count is None or old == new:
            return
        if new == Phase.TIMED:
            self.opened_at = count()
        elif old == Phase.TIMED:
            self.closed = count() - self.opened_at

    def inside(self, phase: str, count: Callable[[], int] | None) -> int:
        """Graphs compiled inside the window (so far, while it is still open)."""
        if phase == Phase.TIMED and count is not None:
            return count() - self.opened_at
        return self.closed
