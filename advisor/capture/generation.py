"""Repeated model calls from one function between steps: generation without a KV cache, one sample at a time.

Work between training steps (:mod:`advisor.capture.between`) is timed per occurrence: the
model calls of one user function (the *call site*: the innermost user frame, already walked
for the occurrence) between the same two steps. This module keeps their input shapes (the
first tensor argument's), in call order, and their lines. The function, not the line: a cached
generation calls the model on the prompt at one line and on each new token at another, and
only together do they read as one. The line named is the one that called the model most. From those shapes alone, a pure function
(:func:`classify`) tells apart:

* **generation without a KV cache**: the input grows by one position per call along one
  dimension (``idx_cond = idx[:, -block_size:]; logits = model(idx_cond); ...; idx =
  torch.cat((idx, idx_next), dim=1)``), possibly held at its longest once the script crops it
  to the context window, and dropping back when a new prompt starts. Every call re-runs the
  model over the whole prefix to produce one token.
* **generation with a KV cache** (or any recurrent state): a prompt, then one position per call.
  Named so that it is never taken for either of the other two.
* **one-sample inference**: many calls whose batch dimension is 1, neither of the above.
* anything else (an evaluation over fixed-length batches): no pattern.

Shapes only, never values: reading a tensor's contents would synchronise a GPU. So a prompt
already as long as the context window (cropped from the first call) reads like fixed-length
evaluation and is not recognised; that is the honest limit of a shape-only test.

Torch-free: the hooks hand in shapes as tuples of ints, so this is tested without torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from advisor._vocab import Vocab

Shape = tuple[int, ...]
"""A call's first tensor input's shape (empty: no tensor input)."""


class CallPattern(Vocab):
    """What the repeated model calls of one line are (see the module docstring)."""

    GENERATION_NO_CACHE = "generation_no_cache"  # the input grows by one position per call
    GENERATION_CACHED = "generation_cached"  # a prompt, then one position per call
    ONE_SAMPLE = "one_sample"  # batch of one, many calls
    OTHER = "other"  # none of these (evaluation over fixed-length batches)


MIN_GROWTH = 4
"""Calls that each add one position (or each take one after a prompt) before a line reads as
generation: three equal steps of +1 can be a coincidence of batch lengths, a sampling loop of
even a few tokens makes more."""

MIN_ONE_SAMPLE = 16
"""Calls of batch size 1 from one line, in one occurrence, before they read as one-sample
inference (a handful is a demo; dozens are a loop over samples)."""

EXPLAINED = 0.9
"""Share of consecutive calls the pattern must explain: a stray call (a differently shaped
prompt, a last short batch) does not undo a pattern, a mixture does."""

MAX_SHAPES = 1024
"""Shapes kept for the occurrence in progress (a longer generation is judged on its first
1,024 tokens); a closed occurrence keeps its verdict only."""


@dataclass(frozen=True)
class Verdict:
    """What :func:`classify` found.

    Attributes:
        pattern: The :class:`CallPattern`.
        dim: The sequence dimension (the one that grows, or that is 1 after the prompt); 0 when none.
        batch: The batch dimension (the first), when the same for every call; else 0.
        positions: Mean length of the sequence dimension per call (what each call ran over).
    """

    pattern: CallPattern = CallPattern.OTHER
    dim: int = 0
    batch: int = 0
    positions: float = 0.0


def classify(shapes: Sequence[Shape]) -> Verdict:
    """Classify the model calls of one function in one occurrence by their input shapes, in call order."""
    if len(shapes) < 2 or any(not s for s in shapes) or len({len(s) for s in shapes}) != 1:
        return Verdict()
    batches = {s[0] for s in shapes}
    batch = next(iter(batches)) if len(batches) == 1 else 0
    for dim in range(1, len(shapes[0])):
        lengths = [s[dim] for s in shapes]
        pairs = [(a, b) for a, b, same in _transitions(shapes, dim) if same]
        positions = sum(lengths) / len(lengths)
        if _grows(pairs, len(shapes) - 1):
            return Verdict(CallPattern.GENERATION_NO_CACHE, dim, batch, positions)
        if _cached(pairs, len(shapes) - 1, lengths):
            return Verdict(CallPattern.GENERATION_CACHED, dim, batch, positions)
    # NOTE: an input of one element per call ((1, 1): one token) is a decoding step whose state
    # the model keeps, not a sample: no one-sample finding for it.
    single = all(n == 1 for n in shapes[0])
    if batch == 1 and len(shapes[0]) >= 2 and not single and len(shapes) >= MIN_ONE_SAMPLE:
        return Verdict(CallPattern.ONE_SAMPLE, 0, 1, 0.0)
    return Verdict(batch=batch)


def _transitions(shapes: Sequence[Shape], dim: int) -> list[tuple[int, int, bool]]:
    """(length before, length after, every other dimension unchanged) for each consecutive pair."""
    return [(a[dim], b[dim], a[:dim] == b[:dim] and a[dim + 1:] == b[dim + 1:])
            for a, b in zip(shapes, shapes[1:], strict=False)]


def _grows(pairs: Sequence[tuple[int, int]], transitions: int) -> bool:
    """Tell whether the length grows by 1 per call, held at the longest (the crop to the context window) or back to a new prompt."""
    grows = sum(1 for a, b in pairs if b == a + 1)
    if grows < MIN_GROWTH:
        return False
    top = max(max(a, b) for a, b in pairs)
    explained = sum(1 for a, b in pairs if b == a + 1 or b < a or a == b == top)
    return explained >= EXPLAINED * transitions


def _cached(pairs: Sequence[tuple[int, int]], transitions: int, lengths: Sequence[int]) -> bool:
    """Tell whether a prompt longer than one position comes first, then one position per call (a new prompt may follow)."""
    ones = sum(1 for n in lengths if n == 1)
    if ones < MIN_GROWTH or all(n == 1 for n in lengths):
        return False
    explained = sum(1 for a, b in pairs if b == 1 or a == 1)
    return explained >= EXPLAINED * transitions


@dataclass(frozen=True)
class SiteWork:
    """The model calls of one function in one occurrence of work between steps.

    Attributes:
        file: The function's file; function: its name (``generate``); line: its line that
            called the model most.
        calls: Model calls from it.
        seconds: From the start of its first call to the end of its last (sampling between the
            calls included: it is part of generating).
        pattern: The :class:`CallPattern` of its calls.
        batch: Their batch dimension (0: it varied or is unknown).
        positions: Mean length of the sequence dimension per call (generation only).
    """

    file: str
    function: str
    line: int
    calls: int = 0
    seconds: float = 0.0
    pattern: CallPattern = CallPattern.OTHER
    batch: int = 0
    positions: float = 0.0

    @property
    def tokens(self) -> int:
        """Tokens generated: one per call and sequence of the batch (0 when not generation)."""
        generating = self.pattern in (CallPattern.GENERATION_NO_CACHE, CallPattern.GENERATION_CACHED)
        return self.calls * max(self.batch, 1) if generating else 0


@dataclass
class SiteCalls:
    """Collects one function's calls in one occurrence: a bounded list of shapes, its lines, the time span."""

    file: str
    function: str
    start: float
    end: float
    calls: int = 0
    shapes: list[Shape] = field(default_factory=list)
    lines: dict[int, int] = field(default_factory=dict)  # line -> calls from it

    def add(self, shape: Shape | None, end: float, line: int) -> None:
        """Count a call from ``line`` that ended at ``end`` with input ``shape``."""
        self.calls += 1
        self.end = end
        self.lines[line] = self.lines.get(line, 0) + 1
        if len(self.shapes) < MAX_SHAPES:
            self.shapes.append(shape or ())

    def record(self) -> SiteWork:
        """Return the function's calls, classified, at its busiest line."""
        verdict = classify(self.shapes)
        line = max(self.lines.items(), key=lambda kv: kv[1])[0] if self.lines else 0
        return SiteWork(self.file, self.function, line, self.calls, round(max(0.0, self.end - self.start), 6),
                        verdict.pattern, verdict.batch, round(verdict.positions, 3))
