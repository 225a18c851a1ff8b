"""The step recorder's vocabulary: step sources, the phases asked for, the profiler protocol.

Step sources and their precedence, the phases asked for, and what the recorder needs from a
profiler, kept apart from :class:`~advisor.capture.recorder.StepRecorder` so that the child, the
run's parent side and the fixes can name phases, sources and the stop signal without the state
machine.

Step source policy (precedence marker > optimizer > backward > module > dataloader), so that any
loop is seen without a change to the script:

* Until something better is seen, DataLoader batch requests are boundaries: the first request
  starts step 1, each later request ends the step in progress (so a step is "fetch the batch,
  then compute on it", the layout ``prof.step()`` at the end of a loop body gives).
* The end of an outermost module call (the model's forward, not its submodules') is a boundary
  for inference loops; a ``backward()`` call is one for training loops that update parameters
  by hand (``param.data.add_``); an optimizer step for every ``torch.optim`` loop; and
  ``advisor.step()`` for the rare loop none of these sees. Each source, once seen, rules for
  good; lower-precedence events are ignored afterwards (batches are still counted as samples,
  backward calls still counted per step).
* Optimizers and modules are told apart by identity: where several step (a GAN's generator and
  discriminator) or several are called (a model, then a loss module) in each iteration, the
  recorder learns the cycle from the first repeat and ends a step only at the cycle's last
  member, so one iteration is one step. ``backward()`` inside an optimizer step (an LBFGS
  closure) is not a boundary.
* A switch during warm-up just carries on (warm-up absorbs it: a training loop switches at its
  first optimizer step). A switch later means the step in progress, and any measured ones,
  used the wrong boundaries (gradient accumulation over more micro-batches than warm-up steps,
  or an inference pass over a DataLoader before training starts): measurement restarts from
  warm-up, any open profiler is discarded, and a note says so when measured steps were dropped.
* Once a ``torch.optim`` optimizer exists and a ``backward()`` call was seen, the optimizer is
  awaited: until it first steps (or :data:`ACCUMULATION_GRACE` backward calls pass without it),
  backward calls, model calls and DataLoader batches end no step. A loop accumulating 40
  micro-batches per optimizer step (nanoGPT) would otherwise fill every phase with micro-batch
  "steps" and be stopped before its first real step.
* Once a ``torch.optim`` optimizer exists, model calls and DataLoader batches with grad disabled
  (``no_grad``, ``inference_mode``) are evaluation between steps, never steps nor their samples:
  a nanoGPT-style ``estimate_loss`` at iteration 0 runs hundreds of forward passes before the
  first optimizer step, and counting them gave the baseline module steps and its trials
  optimizer steps ("not comparable"). Without an optimizer they are an inference script's steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from advisor.capture.model import Phase, RunSpec
from advisor.capture.vocab import StepSource

SOURCE_DATALOADER = StepSource.DATALOADER
SOURCE_MODULE = StepSource.MODULE
SOURCE_BACKWARD = StepSource.BACKWARD
SOURCE_OPTIMIZER = StepSource.OPTIMIZER
SOURCE_MARKER = StepSource.MARKER

MIN_SETTLE_EXTRA = 10
"""A timed window whose first steps were still warming up may grow by this many steps at least
(else by as many as it held): short windows need room to show their steady part."""
ACCUMULATION_GRACE = 256
"""Backward calls awaited for a created optimizer's first step before backward calls end steps.

Gradient accumulation counts in public recipes stay well below it (nanoGPT 40, typical
fine-tuning recipes 1-64); a script that creates an optimizer but updates by hand loses this
many backward calls to warm-up."""
PRECEDENCE = {
    SOURCE_DATALOADER: 0,
    SOURCE_MODULE: 1,
    SOURCE_BACKWARD: 2,
    SOURCE_OPTIMIZER: 3,
    SOURCE_MARKER: 4,
}


@dataclass
class Cycle:
    """Learns which of several callers (optimizers, modules) closes one loop iteration.

    Until a caller repeats, every call ends a step; at the first repeat the caller seen last
    before it becomes the closer, and from then on only its calls end steps.
    """

    order: list[int] = field(default_factory=list)
    closer: int | None = None

    def ends_step(self, key: int) -> tuple[bool, bool]:
        """Return (this call ends a step, the closer was learned just now)."""
        if self.closer is not None:
            return key == self.closer, False
        if key in self.order:
            self.closer = self.order[-1]
            return key == self.closer, len(self.order) > 1
        self.order.append(key)
        return True, False

    @property
    def members(self) -> int:
        """Distinct callers in one iteration (1 until a second one is seen)."""
        return max(1, len(self.order))


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
    settle: bool = True  # extend a timed window still warming up (never under torchrun: see _settling)

    @property
    def total(self) -> int:
        """Steps measurement needs before the script may be stopped."""
        return self.warmup + self.timed + self.profiled + self.cprofile

    def ends(self) -> dict[str, int]:
        """Return the steps counted since warm-up began at which each measurement phase is done."""
        return {
            Phase.WARMUP: self.warmup,
            Phase.TIMED: self.warmup + self.timed,
            Phase.PROFILED: self.warmup + self.timed + self.profiled,
            Phase.CPROFILE: self.total,
        }

    def asked(self, phase: str) -> int:
        """Return the steps asked for in ``phase`` (0 outside the measurement phases)."""
        return {
            Phase.WARMUP: self.warmup,
            Phase.TIMED: self.timed,
            Phase.PROFILED: self.profiled,
            Phase.CPROFILE: self.cprofile,
        }.get(phase, 0)

    @classmethod
    def for_spec(cls, spec: RunSpec) -> Phases:
        """Build the phases a spec asks for (cProfile: as many steps as torch.profiler by default)."""
        cprofile = spec.profiled_steps if spec.cprofile_steps is None else spec.cprofile_steps
        # NOTE: the ranks of a job must stop at the same step (advisor.distributed.launch): no
        # window of theirs may grow by its own clock, to a least time or while settling.
        one_process = not spec.multi_process
        return cls(
            warmup=max(0, spec.warmup_steps),
            timed=max(0, spec.timed_steps),
            profiled=max(0, spec.profiled_steps),
            # NOTE: profiled_steps=0 (fix trials) means no profiler of either kind.
            cprofile=max(0, cprofile) if spec.profiled_steps > 0 else 0,
            full=spec.full,
            min_timed_s=max(0.0, float(getattr(spec, "min_timed_s", 0.0) or 0.0)) if one_process else 0.0,
            settle=one_process,
        )


NEXT_PHASE = {
    Phase.WARMUP: Phase.TIMED,
    Phase.TIMED: Phase.PROFILED,
    Phase.PROFILED: Phase.CPROFILE,
    Phase.CPROFILE: Phase.FINISHING,
}
