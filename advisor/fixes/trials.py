"""The fix loop: re-run the script with each fix applied at run time, measure, keep what helps.

:func:`run_trials` is the whole loop. Its design, in the order it runs:

1. **Choose.** Suggested fixes (from the findings) are de-duplicated; unsafe ones are hidden
   unless ``unsafe=True`` (counted, ruff-style); ``only`` (``--fix ID``) replaces the suggestions
   with exactly those ids (naming a fix is opting in to it, even an unsafe one).
2. **Baseline first.** Round 1 starts with a baseline run; what it recorded (device, cores,
   DataLoaders, batches per step) decides which fixes can apply at all (registry checks), so a
   fix that cannot apply is ``skipped`` with the reason before any time is spent on it.
3. **Rounds.** Each round runs the baseline once, then every active variant once (the variant
   order is reversed on alternate rounds), and a final baseline closes the last round:
   ``A V1 V2 .. A V2 V1 .. A``. One baseline run serves every variant of its round, so a loop over
   four fixes costs ``repeats * 5 + 1`` runs instead of ``repeats * 8``. Each variant run is
   paired with the geometric mean of the baselines on either side (see :mod:`.stats`). Every run
   is a fresh child process with ``profiled_steps=0`` (timed steps only), a fixed seed, and the
   first losses recorded, in ``<run>/trials/<label>-<k>/``.
   A trial whose median shows a gain but whose interval still includes 1.0 after ``repeats``
   rounds gets extra rounds (up to ``max_repeats``) -- on a noisy machine a real win needs more
   pairs to be shown, and a fix is never called a win without them.
4. **Early exits.** After a variant's first run: a crash, timeout or non-finite/far-off loss is
   ``failed``; a runtime note ``not applied: ...`` (no convolutions, autocast already on, an
   IterableDataset that does not shard) is ``skipped``; a DataLoader fix whose recorded loader
   settings did not change is ``skipped``; a run whose steps were counted from other boundaries
   than the baseline's (DataLoader batches vs optimizer steps) is ``failed`` as not comparable.
   None of these is run again.
5. **Ladders.** ``dataloader_workers`` is tried at a few worker counts sized to the cores
   (:func:`~advisor.fixes.registry.worker_ladder`), ``larger_batch`` at a few batch factors
   capped at :data:`~advisor.fixes.registry.MAX_BATCH` samples
   (:func:`~advisor.fixes.registry.batch_ladder`, x4 and x16), each rung with fewer warm-up and
   timed steps when the baseline's step time says k times the samples would make the run long
   (:func:`ladder_steps`); the best rung is reported with the whole ladder in its reason.
6. **Fixes on top of another.** ``persistent_workers``, ``prefetch_factor`` and ``cpu_threads``
   (registry ``requires="dataloader_workers"``) do nothing without loader workers: when the
   script has none, they are measured in a second stage against the best measured workers rung
   as the reference, whenever workers *ran* (improved, no_effect or slower; not when workers
   failed, was skipped or was not tried). On a few cores, workers alone can measure no effect
   because they fight torch's intra-op threads for the cores, and only pay off with
   ``cpu_threads`` on top, so a no_effect workers trial must not hide that pair. The on-top
   trial's speedup is relative to that rung, and its reason says so, with what workers alone
   measured.
7. **Combine.** The fixes that improved are combined (conflicts such as bf16 vs fp16, or
   ``batch_fusion`` vs ``larger_batch``, keep the faster one). A kept on-top fix carries the
   workers rung it was measured on into the combination even when workers alone was not a win
   (the workers trial keeps its own verdict; a note and its reason say why it is kept), unless
   the product of the rung's speedup and the on-top speedups already says the set loses against
   the baseline (workers 0.3x with cpu_threads 1.3x on top: not combined, with a note). The
   combination is measured together against the plain baseline the same way, and that trial
   is the one reported. If it is not at least as good as the best *standalone* fix (on-top fixes
   and a carried workers rung have no standalone speedup against the baseline, so they never
   compete alone), the best standalone fix is kept instead; with no standalone win and a
   combination that does not improve, nothing is kept.

Time to first step is reported apart from the steady throughput (compile cost lands there).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from advisor._num import median
from advisor.capture.model import FixRequest, RunCapture, RunSpec
from advisor.engine.model import FixRef
from advisor.errors import AdvisorError, UsageError
from advisor.fixes import registry
from advisor.fixes.model import FixOutcome, Trial, Verdict
from advisor.fixes.registry import SAFE, UNSAFE, FixContext
from advisor.fixes.stats import MIN_EFFECT, estimate, loss_parity, paired_ratios

TRIALS_DIR = "trials"
# A larger-batch rung may time its steps for this long even when the baseline's timed phase is
# shorter (see ladder_steps).
MIN_LADDER_PHASE_S = 2.0
DEFAULT_LOSS_STEPS = 5
DEFAULT_SEED = 0
# Every trial run times at least this much of the script (RunSpec.min_timed_s): 20 steps of a
# tiny model are a 10-15 ms window, where one slow step halved a baseline's rate and inflated a
# larger_batch speedup to 19.8x against 11.4x timed plainly over the whole script (tiny_model,
# benchmarks/fix_speedups.py). Slow steps already fill it; only fast ones run longer.
MIN_TRIAL_WINDOW_S = 1.0

# The verdicts under short names (advisor.fixes.model.Verdict).
IMPROVED, NO_EFFECT, SLOWER, FAILED, SKIPPED = (
    Verdict.IMPROVED, Verdict.NO_EFFECT, Verdict.SLOWER, Verdict.FAILED, Verdict.SKIPPED
)
UNDECIDED = Verdict.UNDECIDED  # measured, but the interval is too wide to tell (advisor.fixes.stats)

# Runtime note prefixes (advisor.fixes.runtime; repeated here so the parent never imports it).
_NOT_APPLIED = "not applied: "

# Fixes that act through DataLoader arguments: the capture records the effective settings, so
# an unchanged DataLoader proves the fix did not apply, whatever the notes say.
_LOADER_FIXES = frozenset({
    "dataloader_workers", "pin_memory", "persistent_workers", "prefetch_factor", "batch_fusion",
    "larger_batch",
})
# Verdicts of a workers trial that measured something (its best rung can carry on-top fixes).
_RAN = (IMPROVED, NO_EFFECT, UNDECIDED, SLOWER)


@dataclass(frozen=True)
class TrialProgress:
    """One live update from the loop: a run of a trial has finished.

    Attributes:
        fix: The trial's label (a fix id, ``dataloader_workers@2`` for a ladder rung,
            ``combined``), or ``baseline`` for a baseline run.
        repeat: Which round this run belongs to (1-based).
        repeats: Rounds planned.
        estimate: The trial's current median speedup (None before its first pair).
        samples_per_s: The throughput this run measured (None if it failed).
        stage: ``trials``, ``on-top`` (fixes measured on top of another) or ``combined``.
        message: A short remark (a verdict reached early, a failure), or "".
    """

    fix: str
    repeat: int
    repeats: int
    estimate: float | None = None
    samples_per_s: float | None = None
    stage: str = "trials"
    message: str = ""

    def line(self) -> str:
        """One human line for a live progress display, e.g. ``pin_memory  2/3  1.84x so far``."""
        parts = [f"{self.fix}", f"{self.repeat}/{self.repeats}"]
        if self.samples_per_s is not None:
            parts.append(f"{self.samples_per_s:.1f} samples/s")
        if self.estimate is not None:
            parts.append(f"{self.estimate:.2f}x so far")
        if self.message:
            parts.append(self.message)
        return "  ".join(parts)


Runner = Callable[[RunSpec], RunCapture]
Progress = Callable[[TrialProgress], None]


def default_runner(spec: RunSpec) -> RunCapture:
    """Run one capture with the real capture stage (imported lazily)."""
    from advisor.capture.run import capture

    return capture(spec)


@dataclass
class _Variant:
    """One candidate under measurement (mutable bookkeeping, turned into a :class:`Trial`)."""

    label: str
    fix: str
    safety: str
    requests: tuple[FixRequest, ...]
    loss_rtol: float
    params: dict[str, Any] = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)
    rates: list[float | None] = field(default_factory=list)
    ttfs: list[float] = field(default_factory=list)
    loss_diffs: list[float] = field(default_factory=list)
    failure: str | None = None
    skip: str | None = None
    note: str = ""
    reference: str = ""
    ref_note: str = ""
    ref_rates: list[float | None] = field(default_factory=list)
    ref_ttfs: list[float] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return self.failure is None and self.skip is None


def run_trials(
    spec: RunSpec,
    suggested: Sequence[FixRef],
    *,
    unsafe: bool = False,
    only: Sequence[str] = (),
    repeats: int = 3,
    runner: Runner = default_runner,
    progress: Progress | None = None,
    min_effect: float = MIN_EFFECT,
    loss_steps: int = DEFAULT_LOSS_STEPS,
    make_diff_text: bool = True,
    max_repeats: int | None = None,
) -> FixOutcome:
    """Try each suggested fix at run time, measure it against the baseline, keep what helps.

    Args:
        spec: The diagnosed run's spec; trials run the same script and arguments, in
            ``<spec.out_dir>/trials/``, without the profiler.
        suggested: Fixes the findings suggest (duplicates are merged).
        unsafe: Also try unsafe fixes (precision, batch semantics, compile).
        only: Try exactly these fix ids instead of the suggestions (``--fix ID``).
        repeats: Interleaved baseline/variant rounds per trial (at least 1; 3 by default).
        runner: Runs one capture (the real capture stage by default; tests pass a fake).
        progress: Called after every run with a :class:`TrialProgress`.
        min_effect: Smallest relative change reported as an effect.
        loss_steps: First steps whose loss is compared with the baseline.
        make_diff_text: Also compute the source diff for the kept fixes.
        max_repeats: Rounds an undecided trial may grow to (default ``2 * repeats``).

    Returns:
        A :class:`~advisor.fixes.model.FixOutcome`: every trial with its verdict, the combined
        trial, the kept fix ids and the diff.

    Raises:
        UsageError: ``only`` names an unknown fix id, or ``repeats`` is below 1.
    """
    started = time.perf_counter()
    if repeats < 1:
        raise UsageError(f"--repeats must be at least 1, not {repeats}")
    loop = _Loop(spec, runner, progress, repeats, min_effect, loss_steps)
    loop.max_repeats = max(repeats, max_repeats if max_repeats is not None else 2 * repeats)
    wanted, hidden, notes = _choose(suggested, only, unsafe)
    if not wanted:
        return FixOutcome(notes=tuple(notes), hidden_unsafe=hidden, wall_s=_since(started))

    # Round 1's baseline comes first: it decides what can apply.
    base0 = loop.run_baseline("baseline", 1)
    if not base0.ok or loop.rate(base0) is None:
        reason = _failure_reason(base0) if not base0.ok else "the baseline recorded no timed steps"
        notes.append(f"no fix measured: the baseline run failed ({reason})")
        trials = tuple(
            Trial(fix=f, safety=registry.safety_of(f), verdict=SKIPPED, reason=f"baseline run failed: {reason}")
            for f in wanted
        )
        return FixOutcome(trials=trials, notes=tuple(notes), hidden_unsafe=hidden, wall_s=_since(started))
    ctx = registry.context_from_capture(base0)
    loop.base_step_ms = median(base0.timed.step_times_ms)

    skipped: dict[str, Trial] = {}
    stage1: list[_Variant] = []
    on_top: list[str] = []
    for fix in wanted:
        spec_ = registry.get(fix)
        why = spec_.check(ctx)
        if why is not None:
            skipped[fix] = Trial(fix=fix, safety=spec_.safety, verdict=SKIPPED, reason=why)
        elif spec_.requires == "dataloader_workers" and ctx.max_workers == 0:
            on_top.append(fix)
        else:
            stage1.extend(_variants(fix, ctx, spec, step_ms=loop.base_step_ms))

    loop.measure(stage1, reference=(), ref_label="baseline", first_baseline=base0)
    results: dict[str, Trial] = dict(skipped)
    for fix, trial in _collapse(stage1, loop).items():
        results[fix] = trial

    # Stage 2: fixes that build on loader workers, measured on top of the best workers rung
    # whenever workers ran -- a no_effect workers trial may still be half of a winning pair.
    if on_top:
        workers = results.get("dataloader_workers")
        if workers is None or workers.verdict not in _RAN or "num_workers" not in workers.params:
            why = (
                "needs DataLoader workers (the script has num_workers=0) and dataloader_workers "
                + ("was not tried" if workers is None else f"was not measured ({workers.verdict})")
            )
            for fix in on_top:
                results[fix] = Trial(fix=fix, safety=registry.safety_of(fix), verdict=SKIPPED, reason=why)
        else:
            ref = (FixRequest("dataloader_workers", dict(workers.params)),)
            ref_label = f"dataloader_workers@{workers.params.get('num_workers')}"
            alone = f"dataloader_workers alone: {workers.verdict}, {_fmt(workers.speedup)}"
            stage2 = [v for fix in on_top for v in _variants(fix, ctx, spec, on_top_of=ref)]
            for v in stage2:
                # NOTE: reports parse "on top of <ref>[; note]" (advisor.report.style.trial_reference).
                v.reference, v.ref_note = ref_label, alone
            loop.measure(stage2, reference=ref, ref_label=ref_label, stage="on-top")
            results.update(_collapse(stage2, loop))

    trials = tuple(results[f] for f in wanted if f in results)
    combined, kept, more = _combine(trials, loop, ctx, spec, frozenset(on_top))
    notes.extend(more)
    # A workers rung kept only as the base of an on-top fix keeps its own verdict; say why it is kept.
    tops = [t.fix for t in kept if t.fix in on_top]
    carried = {
        t.fix: replace(t, reason=f"{t.reason}; kept as the base of {', '.join(tops)} "
                       "(measured together: see the combined trial)".lstrip("; "))
        for t in kept if t.verdict != IMPROVED
    }
    if carried:
        kept = [carried.get(t.fix, t) for t in kept]
        trials = tuple(carried.get(t.fix, t) for t in trials)
    diff = ""
    if make_diff_text and kept:
        try:
            from advisor.fixes.diff import make_diff

            diff = make_diff(Path(spec.script), kept)
        except Exception as exc:  # noqa: BLE001 - a diff problem must not lose the measurements
            notes.append(f"no diff: {type(exc).__name__}: {exc}")
    return FixOutcome(
        trials=trials,
        combined=combined,
        kept=tuple(t.fix for t in kept),
        diff=diff,
        notes=tuple(notes),
        hidden_unsafe=hidden,
        kept_trials=tuple(kept),
        wall_s=_since(started),
    )


# -- choosing ----------------------------------------------------------------------------------


def _choose(
    suggested: Sequence[FixRef], only: Sequence[str], unsafe: bool
) -> tuple[list[str], tuple[str, ...], list[str]]:
    notes: list[str] = []
    known = set(registry.fix_ids())
    if only:
        unknown = [f for f in only if f not in known]
        if unknown:
            import difflib

            hint = difflib.get_close_matches(unknown[0], sorted(known), n=1)
            tip = f" (did you mean {hint[0]}?)" if hint else f"; known: {', '.join(sorted(known))}"
            raise UsageError(f"unknown fix id {unknown[0]!r} for --fix{tip}")
        return list(dict.fromkeys(only)), (), notes
    wanted: list[str] = []
    hidden: list[str] = []
    for ref in suggested:
        if ref.id not in known:
            notes.append(f"suggested fix {ref.id!r} is not in the fix registry; not tried")
            continue
        if registry.safety_of(ref.id) == UNSAFE and not unsafe:
            if ref.id not in hidden:
                hidden.append(ref.id)
            continue
        if ref.id not in wanted:
            wanted.append(ref.id)
    if hidden:
        n = len(hidden)
        notes.append(
            f"{n} unsafe fix{'es' if n > 1 else ''} hidden ({', '.join(hidden)}); "
            "use --unsafe-fixes to try them"
        )
    return wanted, tuple(hidden), notes


def _variants(
    fix: str, ctx: FixContext, spec: RunSpec, on_top_of: tuple[FixRequest, ...] = (),
    step_ms: float | None = None,
) -> list[_Variant]:
    """Build the candidate runs for one fix: a ladder for workers, one variant otherwise."""
    fs = registry.get(fix)

    def make(label: str, params: dict[str, Any], overrides: dict[str, Any] | None = None) -> _Variant:
        return _Variant(
            label=label, fix=fix, safety=fs.safety,
            requests=(*on_top_of, FixRequest(fix, params)),
            loss_rtol=fs.loss_rtol, params=params, overrides=overrides or {},
        )

    if fix == "dataloader_workers":
        return [
            make(f"dataloader_workers@{n}", {"num_workers": n})
            for n in registry.worker_ladder(ctx.cpu_count, ctx.max_workers)
        ] or []
    if fix == "batch_fusion":
        k = ctx.accumulation or 1
        return [make(fix, {"factor": k}, fusion_steps(spec, k))]
    if fix == "larger_batch":
        accum = ctx.accumulation or 1
        return [
            make(f"larger_batch@x{k}", {"factor": k}, ladder_steps(spec, k, accum, step_ms))
            for k in registry.batch_ladder(ctx.batch_size or 0)
        ]
    if fix == "prefetch_factor":
        return [make(fix, {"prefetch_factor": 4})]
    if fix in ("bf16_autocast", "fp16_amp"):
        return [make(fix, {"device_type": "cuda" if ctx.cuda else "cpu"})]
    return [make(fix, {})]


def fusion_steps(spec: RunSpec, k: int) -> dict[str, int]:
    """Warm-up and timed step counts for a batch-fusion run with factor ``k``.

    A fused optimizer step holds ``k`` times the samples, so fewer steps keep the run short.
    But the loop still takes ``k`` loader batches to reach its first optimizer step, and until
    then the capture counts loader batches as steps: warm-up + timed must exceed ``k``, or the
    run would end before any optimizer step and time forward/backward passes only.
    """
    return ladder_steps(spec, k, k)


def ladder_steps(
    spec: RunSpec, factor: int, accumulation: int = 1, step_ms: float | None = None
) -> dict[str, int]:
    """Warm-up and timed step counts for a run whose batches hold ``factor`` times the samples.

    Without ``step_ms`` the spec's step counts are divided by ``factor`` (a step with k times
    the samples is assumed to take k times as long, so the run takes about as long as the
    baseline's). With the baseline's median step time, more steps are kept when even that
    pessimistic estimate fits in the baseline's own phase or :data:`MIN_LADDER_PHASE_S`,
    whichever is longer: a step that is all per-op overhead costs about the same with 16x the
    samples, and 5 timed steps of a millisecond each are too short a window to time on a busy
    machine.

    Args:
        spec: The diagnosed run's spec.
        factor: How many times the samples each step holds (at least 2 warm-up and 5 timed
            steps remain, so a short run still yields paired ratios and the first losses).
        accumulation: Loader batches per optimizer step: until the first optimizer step the
            capture counts loader batches as steps, so warm-up + timed must exceed it.
        step_ms: The baseline's median step time, when known.

    Returns:
        ``{"warmup_steps": ..., "timed_steps": ...}`` overrides for the trial's spec.
    """
    k = max(1, factor)
    warmup = max(2, math.ceil(spec.warmup_steps / k))
    timed = max(5, math.ceil(spec.timed_steps / k))
    if step_ms and step_ms > 0:
        est_s = k * step_ms / 1000.0
        budget = max(spec.timed_steps * step_ms / 1000.0, MIN_LADDER_PHASE_S)
        timed = max(timed, min(spec.timed_steps, math.floor(budget / est_s)))
        budget = max(spec.warmup_steps * step_ms / 1000.0, MIN_LADDER_PHASE_S / 2)
        warmup = max(warmup, min(spec.warmup_steps, math.floor(budget / est_s)))
    timed = max(timed, accumulation + 1 - warmup)
    return {"warmup_steps": warmup, "timed_steps": timed}


# -- measuring ---------------------------------------------------------------------------------


class _Loop:
    """Runs captures for the trials and keeps the baseline runs of each measurement."""

    def __init__(
        self, spec: RunSpec, runner: Runner, progress: Progress | None, repeats: int,
        min_effect: float, loss_steps: int,
    ) -> None:
        self.spec = spec
        self.runner = runner
        self.progress = progress
        self.repeats = repeats
        self.min_effect = min_effect
        self.loss_steps = loss_steps
        self.root = Path(spec.out_dir) / TRIALS_DIR
        self.baseline_losses: tuple[float | None, ...] = ()
        self.base_timeout: float | None = spec.timeout_s
        self.max_repeats = repeats
        self.base_step_ms: float | None = None

    def trial_spec(self, name: str, fixes: tuple[FixRequest, ...], overrides: dict[str, Any]) -> RunSpec:
        s = replace(
            self.spec,
            out_dir=self.root / name,
            profiled_steps=0,
            full=False,
            fixes=fixes,
            seed=self.spec.seed if self.spec.seed is not None else DEFAULT_SEED,
            record_loss_steps=self.loss_steps,
            quiet=True,
            timeout_s=self.base_timeout,
            min_timed_s=MIN_TRIAL_WINDOW_S,
        )
        if hasattr(s, "cprofile_steps"):
            s = replace(s, cprofile_steps=0)
        return replace(s, **overrides) if overrides else s

    def run(self, name: str, fixes: tuple[FixRequest, ...], overrides: dict[str, Any] | None = None) -> RunCapture:
        spec = self.trial_spec(name, fixes, overrides or {})
        try:
            return self.runner(spec)
        except AdvisorError as exc:  # the capture stage may raise for a script that failed
            from advisor.capture.model import STATUS_CRASHED, ScriptError

            return RunCapture(
                run_dir=str(spec.out_dir), status=STATUS_CRASHED,
                error=ScriptError(type=type(exc).__name__, message=str(exc)),
            )

    def run_baseline(self, name: str, k: int, fixes: tuple[FixRequest, ...] = ()) -> RunCapture:
        cap = self.run(f"{name}-{k}", fixes)
        if not fixes and cap.ok and not self.baseline_losses:
            self.baseline_losses = tuple(cap.losses)
        if self.spec.timeout_s is None and cap.ok and cap.wall_s:
            # NOTE: a hung variant must not hang the loop: allow generous slack over the
            # baseline (compile can take 15 s cold) but not forever.
            self.base_timeout = max(self.base_timeout or 0.0, 120.0, 6 * cap.wall_s)
        return cap

    def rate(self, cap: RunCapture) -> float | None:
        """Steady samples/s of a run (steps/s when the script yields no DataLoader batches)."""
        if not cap.ok:
            return None
        t = cap.timed
        value = t.samples_per_s if t.samples_per_s else t.steps_per_s
        return float(value) if value and value > 0 else None

    def emit(self, event: TrialProgress) -> None:
        if self.progress is not None:
            self.progress(event)

    def measure(
        self,
        variants: list[_Variant],
        reference: tuple[FixRequest, ...],
        ref_label: str,
        first_baseline: RunCapture | None = None,
        stage: str = "trials",
    ) -> None:
        """Interleave reference and variant runs for ``repeats`` rounds, closing with a reference.

        A variant still undecided after ``repeats`` rounds (its interval straddles 1.0 while its
        median shows an effect) gets extra rounds, up to ``max_repeats``, with only the
        undecided variants; the closing reference of one round opens the next.
        """
        if not variants:
            return
        prefix = "baseline" if not reference else f"{_safe_name(ref_label)}-ref"
        if stage == "combined":
            prefix = "combined-baseline"
        ref_rates: list[float | None] = []
        ref_ttfs: list[float] = []
        ref_losses: list[tuple[float | None, ...]] = []
        ref_loaders: tuple[Any, ...] = ()
        ref_source: str | None = None
        for v in variants:
            v.ref_rates, v.ref_ttfs = ref_rates, ref_ttfs
        planned = self.repeats
        running = list(variants)
        r = 0
        while True:
            cap = first_baseline if (r == 0 and first_baseline is not None) else self.run_baseline(
                prefix, r + 1, reference
            )
            ref_rates.append(self.rate(cap))
            ref_loaders = ref_loaders or tuple(cap.dataloaders)
            ref_source = ref_source or (cap.step_source if cap.ok else None)
            if cap.ok and cap.timed.time_to_first_step_s is not None:
                ref_ttfs.append(cap.timed.time_to_first_step_s)
            ref_losses.append(tuple(cap.losses) if cap.ok else ())
            self.emit(TrialProgress(
                fix="baseline" if not reference else ref_label, repeat=min(r + 1, planned),
                repeats=planned, samples_per_s=ref_rates[-1], stage=stage,
                message="" if cap.ok else f"reference run failed: {_failure_reason(cap)}",
            ))
            if r == planned:
                running = [v for v in running if v.active and self._undecided(v)]
                if not running or planned >= self.max_repeats:
                    break
                planned += 1
            order = running if r % 2 == 0 else list(reversed(running))
            for v in order:
                if v.active:
                    self._run_variant(
                        v, r, planned, ref_rates, ref_losses[-1] or self.baseline_losses, stage,
                        ref_loaders, ref_source,
                    )
            r += 1

    def _undecided(self, v: _Variant) -> bool:
        est = estimate(paired_ratios(v.ref_rates, v.rates), self.min_effect)
        # NOTE: only a possible win is worth more runs; slower and no_effect are both dropped.
        if est.speedup is None or est.verdict not in (NO_EFFECT, UNDECIDED):
            return False
        return est.speedup >= 1.0 + self.min_effect

    def _run_variant(
        self, v: _Variant, r: int, n: int, ref_rates: list[float | None],
        ref_losses: tuple[float | None, ...], stage: str, ref_loaders: tuple[Any, ...] = (),
        ref_source: str | None = None,
    ) -> None:
        cap = self.run(f"{_safe_name(v.label)}-{r + 1}", v.requests, v.overrides)
        note = cap.fix_notes.get(v.fix, "")
        v.note = note or v.note
        message = ""
        if not cap.ok:
            v.failure = _failure_reason(cap)
            message = f"failed: {v.failure}"
        elif note.startswith(_NOT_APPLIED):
            v.skip = note[len(_NOT_APPLIED):]
            message = f"skipped: {v.skip}"
        elif ref_source and cap.step_source and cap.step_source != ref_source:
            v.failure = (
                f"steps were counted from {cap.step_source} boundaries here but from {ref_source} "
                "boundaries in the baseline: the throughputs are not comparable"
            )
            message = f"failed: {v.failure}"
        elif v.fix in _LOADER_FIXES and ref_loaders and tuple(cap.dataloaders) == ref_loaders:
            v.skip = "the DataLoader settings did not change: the fix found nothing to apply"
            message = f"skipped: {v.skip}"
        else:
            rate = self.rate(cap)
            if rate is None:
                v.failure = "the run recorded no timed steps"
            while len(v.rates) < r:
                v.rates.append(None)
            v.rates.append(rate)
            if cap.timed.time_to_first_step_s is not None:
                v.ttfs.append(cap.timed.time_to_first_step_s)
            base_losses = ref_losses or self.baseline_losses
            check = loss_parity(base_losses, cap.losses, v.loss_rtol)
            if check.max_rel_diff is not None:
                v.loss_diffs.append(check.max_rel_diff)
            if check.failure is not None:
                v.failure = check.failure
                message = f"failed: {check.failure}"
        est = estimate(paired_ratios(ref_rates + [None], v.rates), self.min_effect)
        self.emit(TrialProgress(
            fix=v.label, repeat=r + 1, repeats=n, estimate=est.speedup,
            samples_per_s=self.rate(cap), stage=stage, message=message,
        ))

    def trial(self, v: _Variant) -> Trial:
        """Turn a measured variant into a :class:`Trial` with its verdict."""
        ref_rates = v.ref_rates
        ratios = paired_ratios(ref_rates, v.rates)
        base_ttfs = median(v.ref_ttfs)
        loss = max(v.loss_diffs) if v.loss_diffs else None
        common = {
            "fix": v.fix, "safety": v.safety, "params": dict(v.params),
            "loss_max_rel_diff": loss, "time_to_first_step_s": median(v.ttfs),
            "baseline_time_to_first_step_s": base_ttfs,
        }
        if v.skip is not None:
            return Trial(**common, verdict=SKIPPED, reason=v.skip, repeats=0)
        if v.failure is not None:
            return Trial(**common, verdict=FAILED, reason=v.failure, repeats=len(ratios))
        est = estimate(ratios, self.min_effect)
        used = [a for a in ref_rates if a]
        reason = "; ".join(r for r in (_describe(v), est.reason) if r)
        return Trial(
            **common,
            baseline_samples_per_s=median(used),
            samples_per_s=median([x for x in v.rates if x]),
            speedup=est.speedup, ci_low=est.ci_low, ci_high=est.ci_high,
            verdict=est.verdict, reason=reason, repeats=est.pairs,
        )


def _collapse(variants: list[_Variant], loop: _Loop) -> dict[str, Trial]:
    """One trial per fix: the best measured rung of a ladder, with the ladder in its reason."""
    by_fix: dict[str, list[Trial]] = {}
    for v in variants:
        by_fix.setdefault(v.fix, []).append(loop.trial(v))
    out: dict[str, Trial] = {}
    for fix, trials in by_fix.items():
        if len(trials) == 1:
            out[fix] = trials[0]
            continue
        measured = [t for t in trials if t.speedup is not None and t.verdict not in (FAILED, SKIPPED)]
        if measured:
            best = max(measured, key=lambda t: (t.verdict == IMPROVED, t.speedup or 0.0))
        else:
            best = trials[0]
        ladder = ", ".join(
            f"{_rung(t)}: " + (f"{t.speedup:.2f}x ({t.verdict})" if t.speedup is not None else t.verdict)
            for t in trials
        )
        out[fix] = replace(best, reason=f"{best.reason}; ladder {ladder}".lstrip("; "))
    return out


def _rung(t: Trial) -> str:
    """How a ladder rung is named in a reason: ``2 workers``, ``x16``."""
    if "num_workers" in t.params:
        return f"{t.params['num_workers']} workers"
    if "factor" in t.params:
        return f"x{t.params['factor']}"
    return t.fix


def _combine(
    trials: Sequence[Trial], loop: _Loop, ctx: FixContext, spec: RunSpec,
    on_top: frozenset[str] = frozenset(),
) -> tuple[Trial | None, list[Trial], list[str]]:
    """Measure the improved fixes together; fall back to the best standalone fix if that is better.

    An improved on-top fix (measured against a workers rung, not the baseline) brings the rung it
    was measured on into the combination even when that rung was not a win by itself, so the
    pair is always measured together against the plain baseline before it is kept.
    """
    notes: list[str] = []
    improved = [t for t in trials if t.verdict == IMPROVED]
    # Conflicting fixes (bf16 vs fp16): keep the faster of each conflicting pair.
    chosen: list[Trial] = []
    for t in sorted(improved, key=lambda t: -(t.speedup or 0.0)):
        conflicts = set(registry.get(t.fix).conflicts)
        if any(c.fix in conflicts or t.fix in registry.get(c.fix).conflicts for c in chosen):
            notes.append(f"{t.fix} conflicts with a faster kept fix; not combined")
            continue
        chosen.append(t)
    # Carry the rung the kept on-top fixes were measured on (workers alone may not be a win).
    by_fix = {t.fix: t for t in trials}
    carried_why: list[str] = []
    for need in dict.fromkeys(registry.get(t.fix).requires for t in chosen if t.fix in on_top):
        if need is None or any(c.fix == need for c in chosen):
            continue
        tops = [t for t in chosen if t.fix in on_top and registry.get(t.fix).requires == need]
        base = by_fix.get(need)
        if base is None or base.verdict not in _RAN:
            chosen = [t for t in chosen if t not in tops]
            notes.append(f"{', '.join(t.fix for t in tops)}: measured on top of {need}, which is "
                         "not available; not kept")
            continue
        what = (
            f"{base.fix} alone {base.verdict} ({_fmt(base.speedup)}); with "
            + ", ".join(f"{t.fix} on top {_fmt(t.speedup)} more" for t in tops)
        )
        # NOTE: the on-top speedups are relative to the rung, the rung's to the baseline: their
        # product estimates the set against the baseline. A set estimated to lose (workers 0.3x,
        # cpu_threads 1.3x on top) is not worth the combined runs, and would drag down the rest.
        est = (base.speedup or 0.0) * math.prod(t.speedup or 0.0 for t in tops)
        if est < 1.0 + loop.min_effect:
            chosen = [t for t in chosen if t not in tops]
            notes.append(f"{what}: about {est:.2f}x against the plain baseline together; not combined")
            continue
        chosen.append(base)
        carried_why.append(
            f"{what}: {base.fix}@{base.params.get('num_workers')} goes into the combination as their base"
        )
    notes.extend(w + ", measured together against the plain baseline" for w in carried_why)
    order = [x.fix for x in trials]
    chosen.sort(key=lambda t: order.index(t.fix))
    if not chosen:
        return None, [], notes
    if len(chosen) == 1:
        # NOTE: an on-top fix always arrives with its workers rung (kept or carried), so a single
        # chosen trial is a standalone one, measured against the plain baseline: it is the answer.
        return chosen[0], chosen, notes
    requests = tuple(FixRequest(t.fix, dict(t.params)) for t in chosen)
    label = "+".join(t.fix for t in chosen)
    overrides: dict[str, Any] = {}
    for t in chosen:
        # NOTE: runs whose batches hold k times the samples take fewer steps (see ladder_steps).
        if t.fix == "batch_fusion":
            overrides = fusion_steps(spec, int(t.params.get("factor", 1)))
        elif t.fix == "larger_batch":
            overrides = ladder_steps(
                spec, int(t.params.get("factor", 1)), ctx.accumulation or 1, loop.base_step_ms
            )
    v = _Variant(
        label="combined", fix=label,
        safety=SAFE if all(t.safety == SAFE for t in chosen) else UNSAFE,
        requests=requests, loss_rtol=max(registry.get(t.fix).loss_rtol for t in chosen),
        params={t.fix: dict(t.params) for t in chosen}, overrides=overrides,
        note="; ".join(carried_why),
    )
    loop.measure([v], reference=(), ref_label="baseline", stage="combined")
    combined = loop.trial(v)
    # NOTE: a fix measured on top of workers has a speedup relative to workers, not to the
    # baseline, and a carried workers rung was no win alone: neither competes with the
    # combination as a single fix. Only standalone wins do.
    standalone = [t for t in chosen if t.fix not in on_top and t.verdict == IMPROVED]
    best = max(standalone, key=lambda t: t.speedup or 0.0) if standalone else None
    good = combined.verdict == IMPROVED
    if good and (best is None or (combined.speedup or 0.0) >= (best.speedup or 0.0) * (1 - loop.min_effect)):
        return combined, chosen, notes
    if best is None:
        notes.append(
            f"the combination {label} measured {_fmt(combined.speedup)} ({combined.verdict}) against "
            "the plain baseline: nothing kept"
        )
        return None, [], notes
    notes.append(
        f"the combination {label} measured {_fmt(combined.speedup)} ({combined.verdict}), "
        f"not better than {best.fix} alone ({_fmt(best.speedup)}): keeping {best.fix} only"
    )
    return combined, [best], notes


# -- small helpers -----------------------------------------------------------------------------


def _describe(v: _Variant) -> str:
    parts = []
    if v.reference:
        parts.append(f"on top of {v.reference}")
    if v.ref_note:
        parts.append(v.ref_note)
    if v.note:
        parts.append(v.note.split(": ", 1)[-1] if v.note.startswith(("applied: ", "installed: ")) else v.note)
    return "; ".join(parts)


def _failure_reason(cap: RunCapture) -> str:
    where = f" (see {Path(cap.run_dir) / cap.stderr_log})" if cap.run_dir else ""
    if cap.error is not None:
        return f"{cap.status}: {cap.error.type}: {cap.error.message}{where}"
    if cap.ok:
        return "no timed steps"
    return f"{cap.status} (exit code {cap.exit_code}){where}"




def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def _safe_name(label: str) -> str:
    return label.replace("@x", "-x").replace("@", "-w").replace("+", "_").replace("/", "_")


def _since(t0: float) -> float:
    return round(time.perf_counter() - t0, 3)
