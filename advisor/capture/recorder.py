"""Step boundaries and measurement phases, independent of torch (the child's state machine).

The child's hooks report three kinds of events here: a step marker (``advisor.step()``), an
optimizer step, and DataLoader batch requests/yields. :class:`StepRecorder` turns them into step
boundaries, walks the phases (warm-up -> timed -> profiled -> cProfile -> finishing) and keeps the
timed measurements. Profilers are driven through the small :class:`ProfilerControl` protocol, so
this module is tested with a fake clock and fake profilers, no torch and no subprocess.

Step source policy (precedence marker > optimizer > dataloader):

* Until something better is seen, DataLoader batch requests are boundaries: the first request
  starts step 1, each later request ends the step in progress (so a step is "fetch the batch,
  then compute on it", the layout ``prof.step()`` at the end of a loop body gives).
* The first optimizer step switches the source to ``optimizer`` for good; the first
  ``advisor.step()`` switches it to ``marker`` for good. Lower-precedence events are ignored
  afterwards (batches are still counted as samples).
* A switch during warm-up just carries on (warm-up absorbs it: a training loop switches at its
  first optimizer step). A switch later means the step in progress, and any measured ones,
  used the wrong boundaries (gradient accumulation over more micro-batches than warm-up steps,
  or an inference pass over a DataLoader before training starts): measurement restarts from
  warm-up, any open profiler is discarded, and a note says so when measured steps were dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from advisor.capture.model import (
    PHASE_CPROFILE,
    PHASE_FINISHING,
    PHASE_PROFILED,
    PHASE_STARTING,
    PHASE_TIMED,
    PHASE_WARMUP,
    RunSpec,
    TimedPhase,
)

SOURCE_DATALOADER = "dataloader"
SOURCE_OPTIMIZER = "optimizer"
SOURCE_MARKER = "marker"
_PRECEDENCE = {SOURCE_DATALOADER: 0, SOURCE_OPTIMIZER: 1, SOURCE_MARKER: 2}


class StopScript(BaseException):
    """Raised from a hook to end the script once measurement is done.

    A BaseException so that the script's own ``except Exception`` blocks do not swallow it.
    """


class ProfilerControl(Protocol):
    """What the recorder needs from a profiler (torch.profiler or cProfile)."""

    def start(self) -> None:
        """Start recording; the first profiled step begins now."""

    def step(self) -> None:
        """Mark a step boundary inside the profiled window."""

    def stop(self, export: bool) -> None:
        """Stop recording; write the results when ``export`` is true, else discard them."""


@dataclass
class Phases:
    """Steps asked for in each phase."""

    warmup: int
    timed: int
    profiled: int
    cprofile: int
    full: bool = False
    min_timed_s: float = 0.0

    @property
    def total(self) -> int:
        """Steps measurement needs before the script may be stopped."""
        return self.warmup + self.timed + self.profiled + self.cprofile

    @classmethod
    def for_spec(cls, spec: RunSpec) -> Phases:
        """Build the phases a spec asks for (cProfile: as many steps as torch.profiler by default)."""
        cprofile = spec.profiled_steps if spec.cprofile_steps is None else spec.cprofile_steps
        return cls(
            warmup=max(0, spec.warmup_steps),
            timed=max(0, spec.timed_steps),
            profiled=max(0, spec.profiled_steps),
            # NOTE: profiled_steps=0 (fix trials) means no profiler of either kind.
            cprofile=max(0, cprofile) if spec.profiled_steps > 0 else 0,
            full=spec.full,
            min_timed_s=max(0.0, float(getattr(spec, "min_timed_s", 0.0) or 0.0)),
        )


@dataclass
class StepRecorder:
    """Turns hook events into steps and phases; see the module docstring for the policy.

    Attributes:
        phases: Steps asked for per phase.
        profiler: Controls torch.profiler for the profiled phase (None: no such phase).
        cprofiler: Controls cProfile for the cProfile phase (None: no such phase).
        clock: Monotonic seconds (``time.perf_counter``; a fake one in tests).
        start_time: Clock value at the child's start (time to first step is measured from it).
        on_step: Called after every boundary with the recorder (progress events).
        on_phase: Called after every phase change with the recorder (partial results on disk).
        record_loss_steps: Record the loss of this many first steps.
    """

    phases: Phases
    profiler: ProfilerControl | None = None
    cprofiler: ProfilerControl | None = None
    clock: Callable[[], float] = time.perf_counter
    start_time: float = 0.0
    on_step: Callable[[StepRecorder], None] | None = None
    on_phase: Callable[[StepRecorder], None] | None = None
    record_loss_steps: int = 0

    source: str | None = None
    phase: str = PHASE_STARTING
    steps: int = 0  # steps completed since measurement (re)started
    steps_seen: int = 0  # steps completed in all (never reset)
    counts: dict[str, int] = field(default_factory=dict)  # completed steps per phase
    step_times_ms: list[float] = field(default_factory=list)
    step_samples: list[int | None] = field(default_factory=list)
    step_batches: list[int] = field(default_factory=list)
    first_step_end: float | None = None
    losses: list[float | None] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    open_window: str | None = None  # PHASE_PROFILED / PHASE_CPROFILE while a profiler records
    stop_requested: bool = False

    _step_start: float | None = None
    _cur_samples: int | None = None
    _cur_batches: int = 0
    _epoch_ended: bool = False
    _timed_ms: float = 0.0  # sum of step_times_ms (kept as we go: no O(n) sum per step)
    _asked_timed: int | None = None  # phases.timed before a min_timed_s extension

    # ----- events from the hooks -------------------------------------------------------------

    def script_started(self) -> None:
        """Start the clock: the script is about to run; its first step starts here."""
        self._step_start = self.clock()
        self._set_phase(PHASE_WARMUP)
        self._advance()  # phases asked with 0 steps (e.g. no warm-up) are passed at once

    def marker(self) -> None:
        """``advisor.step()`` was called: end the step in progress."""
        self._boundary(SOURCE_MARKER, self.clock())

    def optimizer_step(self) -> None:
        """End the step in progress: an optimizer step finished (unless a marker rules)."""
        self._boundary(SOURCE_OPTIMIZER, self.clock())

    def batch_requested(self) -> None:
        """Handle entry into a DataLoader iterator's ``__next__``."""
        now = self.clock()
        if self.source not in (None, SOURCE_DATALOADER):
            return
        if self.source is None or self._epoch_ended:
            # NOTE: the first request starts step 1 and the first request of a new epoch starts
            # a step too: neither ends one (the set-up or the between-epoch gap is not a step).
            self.source = SOURCE_DATALOADER
            self._epoch_ended = False
            self._step_start = now
            return
        self._boundary(SOURCE_DATALOADER, now)

    def batch_yielded(self, samples: int | None) -> None:
        """Count a batch of ``samples`` samples (None: unknown) yielded by a DataLoader."""
        self._cur_batches += 1
        if samples is not None:
            self._cur_samples = (self._cur_samples or 0) + samples

    def epoch_ended(self) -> None:
        """Note that a DataLoader iterator raised StopIteration (the epoch ended)."""
        self._epoch_ended = True

    def wants_loss(self) -> bool:
        """Return True while the step in progress is one whose loss should be recorded."""
        return self.steps_seen < self.record_loss_steps

    def loss(self, value: float) -> None:
        """Add a loss passed to backward in the step in progress (summed per step).

        Summing keeps gradient accumulation comparable with batch fusion: micro-batch losses
        scaled by 1/k sum to the loss of the fused batch.
        """
        index = self.steps_seen
        if index >= self.record_loss_steps:
            return
        while len(self.losses) <= index:
            self.losses.append(None)
        previous = self.losses[index]
        self.losses[index] = value if previous is None else previous + value

    def finish(self) -> None:
        """Close an open profiler window, exporting it: the script ended or is being stopped."""
        if self.open_window is not None:
            if not self.stop_requested:
                self.notes.append(
                    f"the script ended during the {self.open_window} window: its last step "
                    "in the trace is incomplete (it runs to the script's end)"
                )
            self._close_window(export=True)

    # ----- results ---------------------------------------------------------------------------

    def timed_phase(self) -> TimedPhase:
        """Return the timed phase's measurements so far."""
        times = tuple(self.step_times_ms)
        total_s = sum(times) / 1000.0
        samples = tuple(self.step_samples)
        known = [s for s in samples if s is not None]
        samples_per_s = None
        if known and len(known) == len(samples) and total_s > 0:
            samples_per_s = sum(known) / total_s
        return TimedPhase(
            step_times_ms=times,
            samples=samples,
            samples_per_s=samples_per_s,
            steps_per_s=len(times) / total_s if total_s > 0 else None,
            time_to_first_step_s=(
                self.first_step_end - self.start_time if self.first_step_end is not None else None
            ),
            batches=tuple(self.step_batches),
        )

    def snapshot(self) -> dict[str, Any]:
        """Return the recorder's part of ``child.json`` (RunCapture field names)."""
        return {
            "step_source": self.source,
            "steps_seen": self.steps_seen,
            "warmup_steps": self.counts.get(PHASE_WARMUP, 0),
            "timed_steps": self.counts.get(PHASE_TIMED, 0),
            "profiled_steps": self.counts.get(PHASE_PROFILED, 0),
            "cprofiled_steps": self.counts.get(PHASE_CPROFILE, 0),
            "timed": self.timed_phase(),
            "losses": list(self.losses),
            "notes": list(self.notes),
        }

    def phase_progress(self) -> tuple[int, int]:
        """Return (steps done, steps asked) in the current phase."""
        asked = {
            PHASE_WARMUP: self.phases.warmup,
            PHASE_TIMED: self.phases.timed,
            PHASE_PROFILED: self.phases.profiled,
            PHASE_CPROFILE: self.phases.cprofile,
        }.get(self.phase, 0)
        return self.counts.get(self.phase, 0), asked

    # ----- internals -------------------------------------------------------------------------

    def _boundary(self, source: str, now: float) -> None:
        if self.source is not None and source != self.source:
            if _PRECEDENCE[source] < _PRECEDENCE[self.source]:
                return
            self._switch(source)
        self.source = source
        start = self._step_start if self._step_start is not None else now
        self.steps += 1
        self.steps_seen += 1
        if self.first_step_end is None:
            self.first_step_end = now
        if self.phase == PHASE_TIMED:
            self.step_times_ms.append((now - start) * 1000.0)
            self._timed_ms += self.step_times_ms[-1]
            self.step_samples.append(self._cur_samples)
            self.step_batches.append(self._cur_batches)
        if self.phase in (PHASE_WARMUP, PHASE_TIMED, PHASE_PROFILED, PHASE_CPROFILE):
            self.counts[self.phase] = self.counts.get(self.phase, 0) + 1
        self._cur_samples = None
        self._cur_batches = 0
        self._advance()
        if self.on_step is not None:
            self.on_step(self)
        # NOTE: the next step starts after our own work (progress line, child.json, profiler
        # start), so timed steps measure the script, not advisor.
        self._step_start = self.clock()
        if self.stop_requested and not self.phases.full:
            raise StopScript()

    def _advance(self) -> None:
        """Move to the next phase(s) when the current one has its steps."""
        p = self.phases
        ends = {
            PHASE_WARMUP: p.warmup,
            PHASE_TIMED: p.warmup + p.timed,
            PHASE_PROFILED: p.warmup + p.timed + p.profiled,
            PHASE_CPROFILE: p.total,
        }
        if self.phase in (PHASE_PROFILED, PHASE_CPROFILE) and self.steps < ends[self.phase]:
            control = self.profiler if self.phase == PHASE_PROFILED else self.cprofiler
            if control is not None:
                control.step()
            return
        if (
            self.phase == PHASE_TIMED
            and p.min_timed_s > 0
            and self.steps >= ends[PHASE_TIMED]
            and self._timed_ms < p.min_timed_s * 1000.0
        ):
            # NOTE: the window is too short to time (sub-millisecond steps): one more timed step.
            # The later phases' ends move with it, as they are counted from p.timed.
            if self._asked_timed is None:
                self._asked_timed = p.timed
            p.timed = self.steps - p.warmup + 1
            return
        # NOTE: a loop, not a chain of ifs: phases asked with 0 steps are passed straight through.
        while self.phase in ends and self.steps >= ends[self.phase]:
            if self.open_window is not None:
                if self.phase == PHASE_CPROFILE or self.cprofiler is None or p.cprofile == 0:
                    if not p.full:
                        # NOTE: the last window is closed after the StopScript has unwound, so
                        # the op that holds the hook (Optimizer.step) ends inside the trace.
                        self.stop_requested = True
                        self._set_phase(PHASE_FINISHING)
                        return
                self._close_window(export=True)
            self._set_phase(_NEXT[self.phase])
            if self.phase == PHASE_PROFILED and p.profiled > 0 and self.profiler is not None:
                self.profiler.start()
                self.open_window = PHASE_PROFILED
            elif self.phase == PHASE_CPROFILE and p.cprofile > 0 and self.cprofiler is not None:
                self.cprofiler.start()
                self.open_window = PHASE_CPROFILE
        if self.phase == PHASE_FINISHING and not p.full:
            self.stop_requested = True

    def _close_window(self, export: bool) -> None:
        control = self.profiler if self.open_window == PHASE_PROFILED else self.cprofiler
        self.open_window = None
        if control is not None:
            control.stop(export)

    def _switch(self, source: str) -> None:
        if self.phase in (PHASE_WARMUP, PHASE_FINISHING):
            # Warm-up absorbs the switch; after measurement (a --full run) it changes nothing.
            return
        # NOTE: even with no measured step yet, the step in progress began at an old-source
        # boundary (e.g. between two accumulated micro-batches): it must not be timed.
        measured = sum(self.counts.get(p, 0) for p in (PHASE_TIMED, PHASE_PROFILED, PHASE_CPROFILE))
        if measured:
            self.notes.append(
                f"steps were counted from {self.source} boundaries until step "
                f"{self.steps_seen}, then a {source} boundary appeared: measurement restarted "
                "from warm-up there"
            )
        if self.open_window is not None:
            self._close_window(export=False)
        self.steps = 0
        self.counts = {}
        self.step_times_ms.clear()
        self._timed_ms = 0.0
        if self._asked_timed is not None:  # undo a min_timed_s extension: timing starts over
            self.phases.timed = self._asked_timed
        self.step_samples.clear()
        self.step_batches.clear()
        self._set_phase(PHASE_WARMUP)

    def _set_phase(self, phase: str) -> None:
        self.phase = phase
        if self.on_phase is not None:
            self.on_phase(self)


_NEXT = {
    PHASE_WARMUP: PHASE_TIMED,
    PHASE_TIMED: PHASE_PROFILED,
    PHASE_PROFILED: PHASE_CPROFILE,
    PHASE_CPROFILE: PHASE_FINISHING,
}
