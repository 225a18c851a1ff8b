"""Work between training steps: evaluation and sampling, timed and named by the user's function.

A training loop that evaluates every N iterations (nanoGPT's ``estimate_loss``, a Trainer's
eval step) or samples text every N iterations spends that time between two optimizer steps,
with grad disabled. The recorder ignores those model calls as steps
(:mod:`advisor.capture.phases`); this module keeps them as *occurrences*: which of the user's
functions ran them, after how many training steps, and for how long. The metrics stage projects
the whole run from them (:mod:`advisor.metrics.periodic`).

Torch-free: the hooks hand in clock values and the user's stack as plain tuples, so the
tracker is tested with a fake clock.

* An occurrence runs from the start of its first model call (or of the evaluation loader's
  iterator made just before it, whose workers start there) to the end of its last; the model
  calls of one function between the same two steps are one occurrence. The time advisor's own
  hooks spent in it (:meth:`BetweenSteps.own`) is taken out: at a few hundred small model calls
  per evaluation it was about 8% of a plain run's evaluation.
* The function named is the one the training loop called: the user's frames at the first
  optimizer step (the loop) and at the evaluation share a prefix, and the evaluation frame
  just below it is the function (``estimate_loss``); evaluation written inline in the loop
  names the loop itself.
* The loop's frames also give the run's length and periods where the script names them in
  variables (``max_iters``, ``epochs``, ``eval_interval``): :func:`run_hints`.
* Work right after an epoch of the training DataLoader ends (a test pass per epoch) is marked
  so: its period is one epoch. Where the script made a second DataLoader (an evaluation
  loader) and the window saw no such work, a capture runs on to the first epoch's end when
  that is near enough (:meth:`BetweenSteps.runs_on`).
* An occurrence's calls are kept with their input shapes and lines (the innermost user frame
  of the stack already walked, the same function for all of them), which tell generation
  without a KV cache and one-sample inference from evaluation (:mod:`advisor.capture.generation`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from advisor.capture.generation import Shape, SiteCalls, SiteWork

Frame = tuple[str, str, int]
"""A user frame: (file, function, the function's first line)."""

MAX_OCCURRENCES = 500
"""Occurrences kept per run (an evaluation every step of a --full run would be many)."""

_LENGTH = re.compile(r"^(?:(?:max|num|n|total|train)_?)?(?:iters|iterations|steps|train_steps|train_iters)$")
_EPOCHS = re.compile(r"^(?:(?:max|num|n|total|train)_?)?epochs$")  # not "epoch": the loop variable
_PERIOD = re.compile(
    r"^(?:eval|val|valid|validation|sample|sampling|generate|save|checkpoint|ckpt|log)_?"
    r"(?:interval|every|freq|frequency|period|steps_interval)$"
)


_HINT_WORDS = (
    (("sample", "generat"), ("sample", "generate")),
    (("save", "checkpoint", "ckpt"), ("save", "checkpoint", "ckpt")),
    ((), ("eval", "val", "valid", "validation")),
)
"""Which period variables a function's name claims: a sampling function the sample/generate
ones, a checkpoint function the save ones, any other function the evaluation ones."""

RUN_ON_S = 30.0
"""A capture whose window saw one occurrence runs on, unprofiled, at most this long for the next."""


@dataclass(frozen=True)
class BetweenWork:
    """One occurrence of grad-disabled model work between two training steps.

    Attributes:
        function: The user's function the training loop called for it (``estimate_loss``).
        file: Its file; line: its ``def`` line (the loop's current line for inline work).
        step: Training steps completed before it ran (0: before the first step).
        seconds: From the start of its first model call to the end of its last.
        calls: Model calls in it.
        profiled: True when a profiler recorded meanwhile (its time is inflated).
        site: Its model calls classified by their input shapes (:mod:`advisor.capture.generation`).
        epoch_end: True when it ran right after an epoch of the training DataLoader ended.
    """

    function: str
    file: str = ""
    line: int = 0
    step: int = 0
    seconds: float = 0.0
    calls: int = 0
    profiled: bool = False
    site: SiteWork | None = None
    epoch_end: bool = False


@dataclass(frozen=True)
class EpochGap:
    """The training loader's epoch changing: from the end of the last step before it ended to the end of the first step after.

    One whole step and everything at the change: work at the epoch's end (a test pass, with its
    own loader's start), the training loader's next iterator (its workers started again unless
    persistent) and the first batch's wait. On a script of ours whose loaders start their workers
    by ``spawn``, each change took 7-9 s against 14 ms steps, and no step time showed it.

    Attributes:
        step: Steps completed when the epoch ended.
        seconds: The gap's length, one step included.
        profiled: True when a profiler recorded at its end (its time is inflated).
    """

    step: int
    seconds: float
    profiled: bool = False


@dataclass
class BetweenSteps:
    """Collects occurrences from the recorder's grad-disabled model calls (see the module docstring)."""

    loop: tuple[Frame, ...] | None = None  # the user's frames at the first optimizer step, outermost first
    hints: dict[str, int] = field(default_factory=dict)
    _spans: list[list[Any]] = field(default_factory=list)  # [step, stack, start, end, calls, profiled, line, site, own]
    calls_seen: int = 0  # model calls added so far: a hook tells from it whether its call was one
    # NOTE: the hooks set the next call's input shape here, read once by call(): the recorder
    # between them passes no shape on.
    shape: Shape | None = None
    notes: list[str] = field(default_factory=list)
    train_batches: int | None = None  # batches per epoch of the loader the training steps iterate (set by the hooks)
    eval_loader: bool = False  # the script made a second DataLoader (an evaluation loader)
    epoch_ends: list[int] = field(default_factory=list)  # steps completed when the training loader's epochs ended
    epoch_gaps: list[EpochGap] = field(default_factory=list)
    _gap_from: float | None = None  # the clock at the end of the last step before an epoch ended, until the next step ends
    _loader_start: float | None = None  # an evaluation loader's iterator made since the last step, until a call takes it
    _run_on: tuple[float, int, str] | None = None  # (clock, steps) when the run went on past its phases, and why
    _epoch_wait: bool | None = None  # whether the first epoch's end is near enough to run on to (None: not asked)
    _tail: bool = False  # the run on took its one step past the work it waited for

    @property
    def epoch_batches(self) -> int | None:
        """The training loader's batches per epoch, when an evaluation loader may run at its end."""
        return self.train_batches if self.eval_loader else None

    def epoch_end(self, steps: int, last_step_end: float | None = None) -> None:
        """Note that the training DataLoader's epoch ended after ``steps`` steps, the last of them ending at ``last_step_end``."""
        if len(self.epoch_ends) < MAX_OCCURRENCES:
            self.epoch_ends.append(steps)
            if steps and last_step_end is not None and self._gap_from is None:
                self._gap_from = last_step_end

    def loader_started(self, now: float) -> None:
        """Note that a DataLoader's iterator was made at ``now`` with grad disabled (an evaluation loader's).

        Its workers start there, before the evaluation's first model call: with ``spawn``, 3-4 s
        of a 4.3 s evaluation whose model calls took 0.05 s. The next occurrence starts from it.
        """
        if self._loader_start is None:
            self._loader_start = now

    def step_ended(self, steps: int, now: float, profiled: bool = False) -> bool:
        """Close the epoch gap (:class:`EpochGap`) a step ending at ``now``, after ``steps`` steps, ends; return whether one was open."""
        self._loader_start = None
        if self._gap_from is None:
            return False
        self.epoch_gaps.append(EpochGap(steps, round(max(0.0, now - self._gap_from), 6), profiled))
        self._gap_from = None
        return True

    def call(self, step: int, start: float | None, end: float, stack: Sequence[tuple[str, str, int, int]],
             profiled: bool = False) -> None:
        """Add a grad-disabled model call that ran from ``start`` to ``end`` after ``step`` steps.

        ``stack`` holds the user's frames, outermost first, as (file, function, first line,
        current line); its innermost frame is the call's line (:attr:`shape`: its input's shape).
        """
        shape, self.shape = self.shape, None
        self.calls_seen += 1
        start = end if start is None else start
        if self._loader_start is not None:  # NOTE: its loader's start is the occurrence's
            start, self._loader_start = min(start, self._loader_start), None
        key = tuple(f[:3] for f in stack)
        last = self._spans[-1] if self._spans else None
        if last is not None and last[0] == step and last[1] == key:
            last[3], last[4], last[5] = end, last[4] + 1, last[5] or profiled
            last[7].add(shape, end, stack[-1][3] if stack else 0)
            return
        if len(self._spans) >= MAX_OCCURRENCES:
            return
        if last is not None and isinstance(last[7], SiteCalls):
            last[7] = last[7].record()  # NOTE: a closed occurrence keeps its verdict, not its shapes
        line = stack[len(_common(key, self.loop or ())) - 1][3] if stack else 0
        file, function = stack[-1][:2] if stack else ("", "")
        site = SiteCalls(file, function, start, end)
        site.add(shape, end, stack[-1][3] if stack else 0)
        self._spans.append([step, key, start, end, 1, profiled, line, site, 0.0])

    def own(self, seconds: float) -> None:
        """Take ``seconds`` of advisor's own hook time, spent on the call just added, out of its occurrence."""
        if self._spans:
            self._spans[-1][8] += seconds

    def runs_on(self, steps: int, now: float, step_s: float = 0.0) -> bool:
        """Whether a capture done measuring should run on to time work between steps it has not timed.

        Where the window saw a function once and the script names its period (``eval_interval``):
        until that many steps after it. Where an evaluation loader exists and no work at an
        epoch's end was seen: to the end of the first epoch and one step past it, if ``step_s``
        (the steady step) says the end comes within :data:`RUN_ON_S` seconds. Either way at most
        :data:`RUN_ON_S` seconds, then one whole step past the work it waited for.
        """
        wants = [w for w in (self._second_occurrence(steps), self._epoch_end_work(steps, step_s)) if w]
        if not wants:
            if self._run_on is not None and not self._tail:
                # NOTE: one whole step past the work it waited for: the page faults after it
                # (capture.kernel_use.AfterWorkMeter)
                self._tail = True
                return True
            return self._ran_on(steps, now, done=True)
        if self._run_on is None:
            self._run_on = (now, steps, " and ".join(wants))
        return self._ran_on(steps, now, done=now - self._run_on[0] > RUN_ON_S)

    def _second_occurrence(self, steps: int) -> str | None:
        seen = {span[0] for span in self._spans}
        if len(seen) != 1 or self.loop is None:
            return None
        step = next(iter(seen))
        function = attributed(self._spans[0][1], self.loop)[1]
        period, name = period_hint(function, self.hints)
        if period is None or steps > step + period:
            return None
        return f"a second occurrence of {function} (every {period} steps by the script's {name})"

    def _epoch_end_work(self, steps: int, step_s: float) -> str | None:
        if self.loop is None or not self.epoch_batches or self._epoch_wait is False:
            return None
        ends = set(self.epoch_ends)
        if any(span[0] in ends for span in self._spans):
            return None  # seen
        # NOTE: past the first epoch's end (or past its batches with no end: a loop that stops
        # iterating its loader), whatever ran at the end was seen
        if (self.epoch_ends and steps > self.epoch_ends[0]) or (not self.epoch_ends and steps > self.epoch_batches):
            return None
        if self._epoch_wait is None:
            left = max(0, self.epoch_batches - steps)
            self._epoch_wait = left * step_s <= RUN_ON_S
            if not self._epoch_wait:
                self.notes.append(
                    f"the first epoch ends after {self.epoch_batches} batches, about {left * step_s:.0f} s past the "
                    f"capture (it runs on at most {RUN_ON_S:.0f} s): work at an epoch's end, such as a test pass, "
                    "was not timed and is not in the projection")
                return None
        return "work at the first epoch's end (the script makes a second DataLoader)"

    def _ran_on(self, steps: int, now: float, done: bool) -> bool:
        """Say how far the run went on once it stops; return whether it goes on."""
        if done and self._run_on is not None:
            since, start, what = self._run_on
            self.notes.append(f"the capture ran on {steps - start} steps ({now - since:.1f} s, at most "
                              f"{RUN_ON_S:.0f} s) past its measurement to time {what}")
            self._run_on = None
        return not done

    def work_steps(self) -> set[int]:
        """Return the steps completed before each occurrence so far (:attr:`BetweenWork.step`)."""
        return {span[0] for span in self._spans}

    def records(self) -> tuple[BetweenWork, ...]:
        """Return the occurrences so far, each named by the function the loop called."""
        out = []
        ends = set(self.epoch_ends)
        for step, key, start, end, calls, profiled, line, site, own in self._spans:
            file, function, first = attributed(key, self.loop)
            out.append(BetweenWork(function=function, file=file, line=first if first else line, step=step,
                                   seconds=round(max(0.0, end - start - own), 6), calls=calls, profiled=profiled,
                                   site=site.record() if isinstance(site, SiteCalls) else site,
                                   epoch_end=step in ends))
        return tuple(out)


def _common(stack: tuple[Frame, ...], loop: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """Return the frames ``stack`` shares with the loop's, from the outermost (at least the outermost)."""
    n = 0
    while n < min(len(stack), len(loop)) and stack[n] == loop[n]:
        n += 1
    return stack[: max(n, 1)]


def attributed(stack: tuple[Frame, ...], loop: tuple[Frame, ...] | None) -> tuple[str, str, int]:
    """Return (file, function, first line) of the function the loop called; first line 0 for inline work.

    Without a known loop (no optimizer step yet) the outermost frame is taken for the loop.
    """
    if not stack:
        return "", "", 0
    shared = len(_common(stack, loop or stack[:1]))
    if shared < len(stack):
        return stack[shared]
    file, function, _first = stack[shared - 1]
    return file, function, 0


def run_hints(namespaces: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Positive integers named like a run length or a period (``max_iters``, ``eval_interval``).

    Read from the loop's frames; a name bound in an inner frame wins over an outer one.
    """
    out: dict[str, int] = {}
    for names in namespaces:
        for name, value in list(names.items()):
            if type(value) is int and value > 0 and name not in out and (
                    _LENGTH.match(name) or _PERIOD.match(name) or _EPOCHS.match(name)):
                out[name] = value
    return out


def period_hint(function: str, hints: Mapping[str, int]) -> tuple[int | None, str]:
    """Return the period the script's variables give ``function``, and the variable's name ((None, "") when none)."""
    lowered = function.lower()
    for claims, prefixes in _HINT_WORDS:
        if claims and not any(w in lowered for w in claims):
            continue
        for name, value in hints.items():
            if is_period(name) and name.split("_")[0] in prefixes:
                return value, name
    return None, ""


def is_length(name: str) -> bool:
    """Whether a hint's name reads as the run's length in steps."""
    return _LENGTH.match(name) is not None


def is_epochs(name: str) -> bool:
    """Whether a hint's name reads as the run's length in epochs (``epochs``, ``num_epochs``)."""
    return _EPOCHS.match(name) is not None


def is_period(name: str) -> bool:
    """Whether a hint's name reads as the period of some work between steps."""
    return _PERIOD.match(name) is not None
