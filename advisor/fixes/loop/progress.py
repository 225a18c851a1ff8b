"""The fix loop's live updates: one :class:`TrialProgress` per finished run, throttled in-flight ones, the runs left."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# In-flight step updates of a trial run are passed on at most this often (a phase change always).
STEP_EVENT_INTERVAL_S = 0.5


@dataclass(frozen=True)
class TrialProgress:
    """One live update from the loop: a run of a trial has finished, or one in flight has moved on.

    Attributes:
        fix: The trial's label (a fix id, ``dataloader_workers@2`` for a ladder rung,
            ``combined``), or ``baseline`` for a baseline run.
        repeat: Which round this run belongs to (1-based).
        repeats: Rounds planned.
        estimate: The trial's current median speedup (None before its first pair).
        samples_per_s: The throughput this run measured (None if it failed).
        stage: ``trials``, ``on-top`` (fixes measured on top of another) or ``combined``.
        message: A short remark (a verdict reached early, a failure), or "".
        run: Trial runs finished so far in the whole loop (never goes backwards).
        runs_left: Runs still planned in this stage (later stages, such as fixes on top of
            another or the combination, are planned only once this one has its verdicts).
        eta_s: ``runs_left`` times the median wall time of the runs so far.
        in_flight: For an update from a run still going, its capture phase (``warmup``,
            ``timed``...); "" when the run has finished. Such updates come from a background
            thread, throttled to one per :data:`STEP_EVENT_INTERVAL_S` within a phase, and
            ``run`` is the number the run will have when it ends.
        step / steps_total: The in-flight run's steps so far and the steps it asks for.
    """

    fix: str
    repeat: int
    repeats: int
    estimate: float | None = None
    samples_per_s: float | None = None
    stage: str = "trials"
    message: str = ""
    run: int = 0
    runs_left: int | None = None
    eta_s: float | None = None
    in_flight: str = ""
    step: int = 0
    steps_total: int = 0

    def line(self) -> str:
        """One human line for a live progress display, e.g. ``pin_memory  2/3  1.84x so far``."""
        parts = [f"{self.fix}", f"{self.repeat}/{self.repeats}"]
        if self.in_flight:
            total = f"/{self.steps_total}" if self.steps_total else ""
            parts.append(f"running: {self.in_flight}, step {self.step}{total}")
        if self.run:
            plan = f"run {self.run}"
            if self.runs_left is not None:
                plan += f", {self.runs_left} more in this stage"
                if self.eta_s is not None and self.runs_left:
                    plan += f" (~{clock_text(self.eta_s)})"
            parts.insert(0, f"[{plan}]")
        if self.samples_per_s is not None:
            parts.append(f"{self.samples_per_s:.1f} samples/s")
        if self.estimate is not None:
            parts.append(f"{self.estimate:.2f}x so far")
        if self.message:
            parts.append(self.message)
        return "  ".join(parts)


Progress = Callable[[TrialProgress], None]
"""What the loop calls with every :class:`TrialProgress`."""


def clock_text(seconds: float) -> str:
    """``42s`` or ``3m05s``: a duration for a progress line."""
    seconds = max(int(round(seconds)), 0)
    return f"{seconds}s" if seconds < 60 else f"{seconds // 60}m{seconds % 60:02d}s"


def takes_progress(runner: Callable[..., Any]) -> bool:
    """Whether a runner accepts a ``progress`` keyword (the real capture stages do; fakes may not)."""
    import inspect

    try:
        params = inspect.signature(runner).parameters
    except (TypeError, ValueError):
        return False
    return "progress" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def runs_left(r: int, planned: int, active: int, done_in_round: int) -> int:
    """Return the runs still planned in a measurement after ``done_in_round`` variant runs of round ``r``.

    Rounds ``r < planned`` run a reference then the active variants; round ``planned`` is the
    closing reference alone. Extra rounds for undecided trials are added only when decided on.
    """
    if r >= planned:
        return 0
    return max(active - done_in_round, 0) + (planned - r - 1) * (active + 1) + 1
