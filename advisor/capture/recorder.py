"""Step boundaries and measurement phases, independent of torch (the child's state machine).

The child's hooks report five kinds of events here: a step marker (``advisor.step()``), an
optimizer step, a ``backward()`` call, the end of an outermost ``nn.Module`` call, and DataLoader
batch requests/yields. :class:`StepRecorder` turns them into step boundaries, walks the phases
(warm-up -> timed -> profiled -> cProfile -> finishing) and keeps the timed measurements.
Profilers are driven through the small :class:`~advisor.capture.phases.ProfilerControl`
protocol, so this module is tested with a fake clock and fake profilers, no torch and no
subprocess.

The step source policy is described in :mod:`advisor.capture.phases`, the steadiness test
that may extend the timed window in :mod:`advisor.capture.timeline`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from advisor._steady import steady_rate
from advisor.capture.between import BetweenSteps
from advisor.capture.model import Phase, TimedPhase
from advisor.capture.phases import (
    ACCUMULATION_GRACE,
    NEXT_PHASE,
    PRECEDENCE,
    SOURCE_BACKWARD,
    SOURCE_DATALOADER,
    SOURCE_MARKER,
    SOURCE_MODULE,
    SOURCE_OPTIMIZER,
    Cycle,
    Phases,
    ProfilerControl,
    StopScript,
)
from advisor.capture.timeline import CompileWindow, phase_seconds, source_reason, still_settling
from advisor.capture.vocab import StepSource


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
        graph_count: Graphs ``torch.compile`` compiled so far (None: not counted), for ``TimedPhase.compiles``.
        record_loss_steps: Record the loss of this many first steps.
        edge_sync: Called at each step boundary; True when it waited for the GPU at the timed
            window's edge (:mod:`advisor.capture.edge_sync`), and the boundary reads the clock again.
    """

    phases: Phases
    profiler: ProfilerControl | None = None
    cprofiler: ProfilerControl | None = None
    clock: Callable[[], float] = time.perf_counter
    start_time: float = 0.0
    on_step: Callable[[StepRecorder], None] | None = None
    on_phase: Callable[[StepRecorder], None] | None = None
    graph_count: Callable[[], int] | None = None
    edge_sync: Callable[[StepRecorder], bool] | None = None
    record_loss_steps: int = 0

    source: StepSource | None = None
    phase: str = Phase.STARTING
    steps: int = 0  # steps completed since measurement (re)started
    steps_seen: int = 0  # steps completed in all (never reset)
    counts: dict[str, int] = field(default_factory=dict)  # completed steps per phase
    measured_s: dict[str, float] = field(default_factory=dict)  # the counted steps' time per phase (kept as we go)
    step_times_ms: list[float] = field(default_factory=list)
    warmup_times_ms: list[float] = field(default_factory=list)
    step_samples: list[int | None] = field(default_factory=list)
    step_batches: list[int] = field(default_factory=list)
    step_backwards: list[int] = field(default_factory=list)
    first_step_end: float | None = None
    losses: list[float | None] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    open_window: str | None = None  # Phase.PROFILED / Phase.CPROFILE while a profiler records
    stop_requested: bool = False

    phase_started: dict[str, float] = field(default_factory=dict)  # clock at each phase's start
    _step_start: float | None = None
    _cur_samples: int | None = None
    _cur_batches: int = 0
    _cur_backwards: int = 0
    _cur_loss: float | None = None
    _carry_loss: float | None = None
    _batches_seen: bool = False
    _cur_model_samples: int | None = None
    _lead_module: int | None = None
    _optimizers: Cycle = field(default_factory=Cycle)
    _modules: Cycle = field(default_factory=Cycle)
    _epoch_ended: bool = False
    _timed_epoch_ends: int = 0  # DataLoader epochs that ended while the timed steps ran
    _change_steps: set[int] = field(default_factory=set)  # timed steps that hold an epoch change (EpochGap)
    _optimizer_created: bool = False
    _backwards_awaiting: int = 0  # backward calls seen while awaiting the first optimizer step
    _last_step_s: float = 0.0
    _asked_timed: int | None = None  # phases.timed before a min_timed_s extension
    _settle_target: int = 0  # timed steps the window held when it first was complete
    _compiles: CompileWindow = field(default_factory=CompileWindow)
    between: BetweenSteps = field(default_factory=BetweenSteps)  # evaluation between steps (capture.between)

    # ----- events from the hooks -------------------------------------------------------------

    def script_started(self) -> None:
        """Start the clock: the script is about to run; its first step starts here."""
        self._step_start = self.clock()
        self._set_phase(Phase.WARMUP)
        self._advance()  # phases asked with 0 steps (e.g. no warm-up) are passed at once

    def marker(self) -> None:
        """``advisor.step()`` was called: end the step in progress."""
        self._boundary(SOURCE_MARKER, self.clock())

    def optimizer_step(self, key: int = 0) -> None:
        """Handle an optimizer step: end the step in progress if ``key`` closes the iteration.

        ``key`` tells optimizers apart (``id(optimizer)``); see the module docstring.
        """
        now = self.clock()
        if PRECEDENCE.get(self.source or "", -1) > PRECEDENCE[SOURCE_OPTIMIZER]:
            return
        ends, learned = self._optimizers.ends_step(key)
        if learned:
            self._restart(f"{self._optimizers.members} optimizers step in each iteration: one step per iteration from here on")
        if ends:
            self._boundary(SOURCE_OPTIMIZER, now)

    def optimizer_created(self) -> None:
        """Note that the script built a ``torch.optim`` optimizer (its steps will be the steps)."""
        self._optimizer_created = True

    def _awaiting_optimizer(self) -> bool:
        """Return True while a created optimizer has not stepped yet and backward calls happen (within the grace)."""
        return (self._optimizer_created and not self._optimizers.order
                and 0 < self._backwards_awaiting <= ACCUMULATION_GRACE)

    def backward(self) -> None:
        """Count a finished ``backward()`` call (outside optimizer steps); it may end the step."""
        now = self.clock()
        self._cur_backwards += 1
        if self._optimizer_created and not self._optimizers.order:
            self._backwards_awaiting += 1
            if self._awaiting_optimizer():
                return
        if self.source == SOURCE_BACKWARD:
            self._boundary(SOURCE_BACKWARD, now)
        elif self.source in (None, SOURCE_DATALOADER, SOURCE_MODULE):
            self._establish(SOURCE_BACKWARD, now)

    def module_keys_needed(self) -> frozenset[int] | None:
        """Return the modules whose calls still matter, or None while that is not known yet.

        Under a better source the lead module's inputs count samples (unless a DataLoader counts
        them) and its grad-disabled calls are evaluation to time (with an optimizer); under the
        module source, the lead and the module that closes the cycle.
        """
        if PRECEDENCE.get(self.source or "", -1) >= PRECEDENCE[SOURCE_BACKWARD]:
            if (self._batches_seen and not self._optimizer_created) or self._lead_module is None:
                return frozenset()
            return frozenset({self._lead_module})
        if self.source == SOURCE_MODULE and self._modules.closer is not None:
            keys = {self._modules.closer}
            if self._lead_module is not None:
                keys.add(self._lead_module)
            return frozenset(keys)
        return None

    def _evaluating(self, grad: bool) -> bool:
        """Whether grad-disabled work is evaluation in a training script (see :mod:`~advisor.capture.phases`)."""
        return not grad and self._optimizer_created

    def module_call(self, key: int, samples: int | None, in_optimizer_step: bool = False, grad: bool = True,
                    started: float | None = None, stack: Callable[[], Any] | None = None) -> None:
        """Handle the end of an outermost ``nn.Module`` call (``key``: the module) of ``samples``.

        Inside an optimizer step (an LBFGS closure re-running the model on the same batch) a
        call is no boundary, and only the step's first call counts samples; nor is evaluation
        (``started``, ``stack``: kept as work between steps, :mod:`advisor.capture.between`).
        """
        if self._evaluating(grad):
            self.between.call(self.steps_seen, started, self.clock(), stack() if stack else (),
                              profiled=self.open_window is not None)
            return
        now = self.clock()
        if self._lead_module is None:
            self._lead_module = key
        if in_optimizer_step:
            if key == self._lead_module and self._cur_model_samples is None:
                self._cur_model_samples = samples
            return
        if key == self._lead_module and samples is not None:
            self._cur_model_samples = (self._cur_model_samples or 0) + samples
        if self.source not in (None, SOURCE_DATALOADER, SOURCE_MODULE) or self._awaiting_optimizer():
            return
        ends, learned = self._modules.ends_step(key)
        if learned:
            self._restart(f"{self._modules.members} modules are called in each iteration: one step per iteration from here on")
        if self.source != SOURCE_MODULE:
            self._establish(SOURCE_MODULE, now)
        elif ends:
            self._boundary(SOURCE_MODULE, now)

    def batch_requested(self, grad: bool = True) -> None:
        """Handle entry into a DataLoader iterator's ``__next__`` (an evaluation loader's is ignored)."""
        if self._evaluating(grad):
            return
        now = self.clock()
        if self.source not in (None, SOURCE_DATALOADER):
            return
        if self.source is not None and self._awaiting_optimizer():
            return  # a micro-batch of an accumulated step, not a step
        if self.source is None or self._epoch_ended:
            # NOTE: the first request starts step 1 and the first request of a new epoch starts
            # a step too: neither ends one (the set-up or the between-epoch gap is not a step).
            self.source = SOURCE_DATALOADER
            self._epoch_ended = False
            self._step_start = now
            return
        self._boundary(SOURCE_DATALOADER, now)

    def batch_yielded(self, samples: int | None, grad: bool = True) -> None:
        """Count a batch of ``samples`` samples (None: unknown) yielded by a DataLoader."""
        if self._evaluating(grad):
            return
        self._cur_batches += 1
        self._batches_seen = True
        if samples is not None:
            self._cur_samples = (self._cur_samples or 0) + samples

    def epoch_ended(self, grad: bool = True) -> None:
        """Note that a DataLoader iterator raised StopIteration (the epoch ended)."""
        if self._evaluating(grad):
            return
        self._epoch_ended = True
        self.between.epoch_end(self.steps_seen, self._step_start)
        if self.phase == Phase.TIMED:
            self._timed_epoch_ends += 1

    def wants_loss(self) -> bool:
        """Return True while the step in progress is one whose loss should be recorded."""
        return len(self.losses) < self.record_loss_steps

    def loss(self, value: float) -> None:
        """Add a loss passed to backward in the step in progress (summed per step).

        Summing keeps gradient accumulation comparable with batch fusion: micro-batch losses
        scaled by 1/k sum to the loss of the fused batch.
        """
        if not self.wants_loss():
            return
        self._cur_loss = value if self._cur_loss is None else self._cur_loss + value

    def finish(self) -> None:
        """Close an open profiler window, exporting it: the script ended or is being stopped."""
        if self.open_window is not None:
            if not self.stop_requested:
                tail = "is left out of the trace's analysis" if self.open_window == Phase.PROFILED else "is in cProfile's figures"
                self.notes.append(f"the script ended during the {self.open_window} window: its last step, which is "
                                  f"incomplete (it ran to the script's end), {tail}")
            self._close_window(export=True)

    # ----- results ---------------------------------------------------------------------------

    def timed_phase(self) -> TimedPhase:
        """Return the timed phase's measurements so far."""
        times, samples = tuple(self.step_times_ms), tuple(self.step_samples)
        # NOTE: rates over the window's steady part: steps still warming up (_settling) are not timed,
        # nor a step holding an epoch change (an EpochGap: windows with one read 400 samples/s, without 1,300).
        samples_per_s, steps_per_s = steady_rate(times, samples, skip=self._change_steps)
        return TimedPhase(
            step_times_ms=times,
            samples=samples,
            samples_per_s=samples_per_s,
            steps_per_s=steps_per_s,
            time_to_first_step_s=None if self.first_step_end is None else self.first_step_end - self.start_time,
            batches=tuple(self.step_batches),
            backwards=tuple(self.step_backwards),
            optimizers_per_step=self._optimizers.members if self.source == SOURCE_OPTIMIZER else 0,
            warmup_step_times_ms=tuple(round(t, 3) for t in self.warmup_times_ms),
            epoch_ends=self._timed_epoch_ends,
            compiles=self._compiles.inside(self.phase, self.graph_count),
        )

    def snapshot(self) -> dict[str, Any]:
        """Return the recorder's part of ``child.json`` (RunCapture field names)."""
        return {
            "step_source": self.source,
            "step_source_reason": self.source_reason(),
            "steps_seen": self.steps_seen,
            "warmup_steps": self.counts.get(Phase.WARMUP, 0),
            "timed_steps": self.counts.get(Phase.TIMED, 0),
            "profiled_steps": self.counts.get(Phase.PROFILED, 0),
            "cprofiled_steps": self.counts.get(Phase.CPROFILE, 0),
            "timed": self.timed_phase(),
            "losses": [*self.losses, *([self._cur_loss] if self._cur_loss is not None and self.wants_loss() else [])],
            "notes": list(self.notes),
            "phases_s": self.phase_seconds(),
        }

    def source_reason(self) -> str | None:
        """Say which events defined the steps and why that source was chosen (None: no step)."""
        return source_reason(self.source, self._optimizers.members, self._modules.members)

    def phase_seconds(self, now: float | None = None) -> dict[str, float]:
        """Return where the child's time went so far, in seconds (see :func:`~advisor.capture.timeline.phase_seconds`)."""
        return phase_seconds(self.phase_started, self.start_time, self.first_step_end, self.phase,
                             self.clock() if now is None else now, self.measured_s)

    def uncount_step(self, phase: str) -> None:
        """Take the step that just ended out of ``phase``'s count and time: it was not one of its steps."""
        self.counts[phase] = self.counts.get(phase, 0) - 1
        self.measured_s[phase] = self.measured_s.get(phase, 0.0) - self._last_step_s

    def phase_progress(self) -> tuple[int, int]:
        """Return (steps done, steps asked) in the current phase."""
        return self.counts.get(self.phase, 0), self.phases.asked(self.phase)

    # ----- internals -------------------------------------------------------------------------

    def _boundary(self, source: str, now: float) -> None:
        if self.source is not None and source != self.source:
            if PRECEDENCE[source] < PRECEDENCE[self.source]:
                return
            self._switch(source)
            # NOTE: the boundaries so far were not steps: under the new source this boundary
            # ends its first step, which holds every loss recorded until now (the micro-batches
            # of an accumulated step, or the backward before the first optimizer step).
            self._cur_loss = self._pending_loss()
        self._carry_loss = None
        self.source = source
        if self.edge_sync is not None and self.edge_sync(self):
            now = self.clock()
        start = self._step_start if self._step_start is not None else now
        if self.between.step_ended(self.steps_seen, now, self.open_window is not None) and self.phase == Phase.TIMED:
            self._change_steps.add(len(self.step_times_ms))
        self.steps += 1
        self.steps_seen += 1
        if self.wants_loss():
            self.losses.append(self._cur_loss)
        self._cur_loss = None
        if self.first_step_end is None:
            self.first_step_end = now
        if self.phase == Phase.WARMUP:
            self.warmup_times_ms.append((now - start) * 1000.0)
        if self.phase == Phase.TIMED:
            self.step_times_ms.append((now - start) * 1000.0)
            # NOTE: the DataLoader's batches count samples where it yielded any in this step;
            # else the batch tensors the model consumed (its first dimension) do.
            self.step_samples.append(
                self._cur_samples if self._cur_batches else self._cur_model_samples
            )
            self.step_batches.append(self._cur_batches)
            self.step_backwards.append(self._cur_backwards)
        if self.phase in (Phase.WARMUP, Phase.TIMED, Phase.PROFILED, Phase.CPROFILE):
            self.counts[self.phase] = self.counts.get(self.phase, 0) + 1
            self._last_step_s = now - start
            self.measured_s[self.phase] = self.measured_s.get(self.phase, 0.0) + self._last_step_s
        self._cur_samples = None
        self._cur_batches = 0
        self._cur_backwards = 0
        self._cur_model_samples = None
        self._advance()
        if self.on_step is not None:
            self.on_step(self)
        # NOTE: the next step starts after our own work (progress line, child.json, profiler
        # start), so timed steps measure the script, not advisor.
        self._step_start = self.clock()
        if self.stop_requested and not self.phases.full:
            # NOTE: work between steps seen once is timed again, unprofiled (BetweenSteps.runs_on),
            # by a profiled one-process capture only: fix trials and a job's ranks stop on time.
            step_s = self.measured_s.get(Phase.TIMED, 0.0) / max(1, len(self.step_times_ms))
            if not (self.phases.profiled and self.phases.settle and self.between.runs_on(self.steps_seen, self.clock(), step_s)):
                raise StopScript()
            if self.open_window is not None:
                self._close_window(export=True)

    def _advance(self) -> None:
        """Move to the next phase(s) when the current one has its steps."""
        p = self.phases
        ends = p.ends()
        if self.phase in (Phase.PROFILED, Phase.CPROFILE) and self.steps < ends[self.phase]:
            control = self.profiler if self.phase == Phase.PROFILED else self.cprofiler
            if control is not None:
                control.step()
            return
        too_short = p.min_timed_s > 0 and self.measured_s.get(Phase.TIMED, 0.0) < p.min_timed_s
        if self.phase == Phase.TIMED and self.steps >= ends[Phase.TIMED] and (too_short or self._settling()):
            # NOTE: one more timed step: the window is too short to time (sub-millisecond steps), or
            # its first steps were still warming up and the steady part must hold as many as were
            # asked (bounded by _settling). The later phases' ends move with it (counted from p.timed).
            if self._asked_timed is None:
                self._asked_timed = p.timed
            p.timed = self.steps - p.warmup + 1
            return
        # NOTE: a loop, not a chain of ifs: phases asked with 0 steps are passed straight through.
        while self.phase in ends and self.steps >= ends[self.phase]:
            if self.open_window is not None:
                if self.phase == Phase.CPROFILE or self.cprofiler is None or p.cprofile == 0:
                    if not p.full:
                        # NOTE: the last window is closed after the StopScript has unwound, so
                        # the op that holds the hook (Optimizer.step) ends inside the trace.
                        self.stop_requested = True
                        self._set_phase(Phase.FINISHING)
                        return
                self._close_window(export=True)
            self._set_phase(NEXT_PHASE[self.phase])
            if self.phase == Phase.PROFILED and p.profiled > 0 and self.profiler is not None:
                self.profiler.start()
                self.open_window = Phase.PROFILED
            elif self.phase == Phase.CPROFILE and p.cprofile > 0 and self.cprofiler is not None:
                self.cprofiler.start()
                self.open_window = Phase.CPROFILE
        if self.phase == Phase.FINISHING and not p.full:
            self.stop_requested = True

    def _settling(self) -> bool:
        """Whether the timed window needs more steps because its first ones were still warming up."""
        if not self.phases.settle:
            # NOTE: the ranks of a job must stop at the same step (advisor.distributed.launch);
            # each rank's own step times would extend each window differently.
            return False
        self._settle_target = self._settle_target or len(self.step_times_ms)
        return still_settling(self.step_times_ms, self._settle_target)

    def _close_window(self, export: bool) -> None:
        control = self.profiler if self.open_window == Phase.PROFILED else self.cprofiler
        self.open_window = None
        if control is not None:
            control.stop(export)

    def _establish(self, source: str, now: float) -> None:
        """Make ``source`` (module calls, backward calls) the step source; its *next* event ends step 1.

        Like a DataLoader's first batch request, the first such event starts a step rather than
        ending one: in a training loop the model call and the backward call come before the
        first optimizer step, and must not count as steps of their own.
        """
        if self.source is not None:
            self._switch(source)
        self.source = source
        self._step_start = now
        # NOTE: losses so far go to the next boundary only if it is a better source's (the optimizer
        # step closing this first iteration); a boundary of this source starts counting afresh.
        self._carry_loss = self._pending_loss()
        self._cur_loss = None

    def _pending_loss(self) -> float | None:
        """Sum, and take, every loss recorded and not yet assigned to a step."""
        earlier = [v for v in (*self.losses, self._carry_loss, self._cur_loss) if v is not None]
        self.losses.clear()
        self._carry_loss = None
        return sum(earlier) if earlier else None

    def _switch(self, source: str) -> None:
        self._restart(f"steps were counted from {self.source} boundaries until step {self.steps_seen}, "
                      f"then a {source} boundary appeared")

    def _restart(self, why: str) -> None:
        """Measure again from warm-up: the boundaries so far were the wrong ones."""
        if self.phase in (Phase.WARMUP, Phase.FINISHING):
            # Warm-up absorbs the switch; after measurement (a --full run) it changes nothing.
            return
        # NOTE: even with no measured step yet, the step in progress began at an old-source
        # boundary (e.g. between two accumulated micro-batches): it must not be timed.
        measured = sum(self.counts.get(p, 0) for p in (Phase.TIMED, Phase.PROFILED, Phase.CPROFILE))
        if measured:
            self.notes.append(f"{why}: measurement restarted from warm-up there")
        if self.open_window is not None:
            self._close_window(export=False)
        if self.counts.get(Phase.PROFILED) and self.profiler is not None:
            # NOTE: the profiled window already closed and exported a trace of wrong-source
            # steps (an accumulation loop whose micro-batches outnumber the steps asked for,
            # before its first optimizer step): a second trace would read as a second rank.
            discard = getattr(self.profiler, "discard", None)
            if discard is not None:
                discard()
        self.steps, self.counts, self.measured_s = 0, {}, {}
        for kept in (self.step_times_ms, self.warmup_times_ms, self.step_samples, self.step_batches, self.step_backwards):
            kept.clear()
        if self._asked_timed is not None:  # undo a min_timed_s extension: timing starts over
            self.phases.timed = self._asked_timed
        self._settle_target = 0
        self._set_phase(Phase.WARMUP)

    def _set_phase(self, phase: str) -> None:
        self._compiles.phase_change(self.phase, phase, self.graph_count)
        self.phase = phase
        self.phase_started.setdefault(phase, self.clock())
        if self.on_phase is not None:
            self.on_phase(self)
