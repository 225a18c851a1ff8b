"""What a fix is: one :class:`Fix` object per intervention, and the context it is decided in.

A fix (see :mod:`advisor.fixes.catalog`) holds everything about one intervention in one place,
the way a rule is one YAML file (torch's ``_pattern_matcher.Pattern``, sqlfluff's rule bundles):

- metadata: ``id``, :class:`Safety`, loss-parity tolerance, ``requires``/``conflicts``, one
  sentence of what it changes;
- ``check``: whether it can apply, decided in the parent from the baseline capture
  (:class:`FixContext`);
- ``variants``: the runs that measure it (a ladder of rungs, or one run);
- ``install`` (and the optional ``adjust_loader`` / ``on_model`` hooks): the run-time change,
  made in the child by :mod:`advisor.fixes.runtime`, with torch imported lazily;
- ``plan_diff`` or ``manual``: the source change that makes it permanent, or what to change by
  hand.

This module imports neither torch nor libcst: the parent decides from the capture alone, and
the child imports only the fixes it installs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from advisor._vocab import Vocab
from advisor.capture.model import DataLoaderInfo, RunCapture, RunSpec, ScriptConfig
from advisor.capture.records import OUT_OF_MEMORY
from advisor.capture.vocab import MemoryKind, StepSource
from advisor.engine.model import Safety
from advisor.fixes.diff_plan import DiffPlan

SAFE = Safety.SAFE
UNSAFE = Safety.UNSAFE

# Loss-parity tolerances (largest relative deviation of the first losses from the baseline's).
# NOTE: safe fixes keep numerics, but random augmentation inside worker processes draws from
# per-worker RNG streams, so batches may differ slightly from the single-process baseline;
# 10% catches a broken run (wrong data, NaN, divergence) without rejecting that.
LOSS_RTOL_SAFE = 0.10
# Precision, compile and layout change rounding: early losses move by ~1% in bf16 on MLPs;
# 25% is "far off", not "rounded differently".
LOSS_RTOL_PRECISION = 0.25
# Batch fusion and larger batches change what one step's loss averages over (k times the
# samples): the first losses of a batch of 4 and of 64 differ by up to 31% on
# examples/tiny_model.py (measured, same seed); 50% still catches a broken run.
LOSS_RTOL_BATCH = 0.50

# A memory-objective fix counts as saving memory when its peak is at least this much below the
# reference's: peak RSS of two identical CPU runs differs by a few MiB of a few hundred (allocator
# and import noise), so 5% is a change, not jitter.
MIN_MEMORY_SAVING = 0.05

# Peak memory above this share of the limit (the --memory-budget, or the CUDA device) is "near
# the limit": the next longer sequence or larger batch will not fit (ME001 warns at 90%).
NEAR_LIMIT_FRAC = 0.8


class Objective(Vocab):
    """What a fix is for, and so what its trial's verdict is decided on.

    ``speed``: samples/s against the baseline (the default). ``memory``: peak memory against
    the baseline, with loss parity; its speed cost is measured and reported, never the verdict.
    """

    SPEED = "speed"
    MEMORY = "memory"


# A larger-batch rung may time its steps for this long even when the baseline's timed phase is
# shorter (see ladder_steps).
MIN_LADDER_PHASE_S = 2.0


@dataclass(frozen=True)
class FixContext:
    """What the parent knows when deciding whether a fix can apply.

    Attributes:
        cuda: The script ran on a CUDA device.
        cpu_count: Cores available to the script.
        dataloaders: The DataLoaders the baseline run created.
        samples_per_step: Median samples per optimizer step in the baseline (None if unknown).
        batches_per_step: Median DataLoader batches per optimizer step (None if not recorded).
        step_source: What the baseline's steps were counted from (``optimizer`` steps, or
            DataLoader batches for a loop with no optimizer); None when unknown.
        loop_accumulation: ``backward()`` calls per optimizer step seen in the loop itself
            (>= 2), with or without a DataLoader; None when the loop does not accumulate.
        micro_batch_samples: Median samples per ``backward()`` call (None when unknown).
        script_config: The script's own configuration surface (its argparse options or
            configurator globals), for fixes made through the script's arguments.
        intra_op_threads: torch's intra-op thread count in the baseline (None when unknown).
        peak_memory_bytes: The baseline's peak memory (CUDA max allocated, or peak RSS on CPU).
        memory_limit_bytes: What the run may use: the ``--memory-budget`` when given, else the
            CUDA device's memory on a GPU run; None on a CPU run without a budget.
        out_of_memory: The baseline itself ran out of memory (over the budget, or a CUDA OOM).
        peak_at: Where the diagnosed run's peak memory is allocated, most first
            (``model.py:21 (forward, block 1 (Deep))``, from its memory finding's locations);
            the memory fixes name them in their diff notes.
        peak_activation_frac: The activations' share of that peak (what checkpointing frees).
        gpu_busy: On a GPU run, the diagnosed share of the step the GPU is busy (None: unknown);
            a rung that only makes kernels faster is not worth its runs where it is small.
    """

    cuda: bool = False
    cpu_count: int = 1
    dataloaders: tuple[DataLoaderInfo, ...] = ()
    samples_per_step: float | None = None
    batches_per_step: float | None = None
    step_source: StepSource | None = None
    loop_accumulation: int | None = None
    micro_batch_samples: float | None = None
    script_config: ScriptConfig = field(default_factory=ScriptConfig)
    intra_op_threads: int | None = None
    peak_memory_bytes: int | None = None
    memory_limit_bytes: int | None = None
    out_of_memory: bool = False
    peak_at: tuple[str, ...] = ()
    peak_activation_frac: float | None = None
    gpu_busy: float | None = None

    @property
    def memory_used_frac(self) -> float | None:
        """The baseline's peak over the limit (None when either is unknown)."""
        if not self.peak_memory_bytes or not self.memory_limit_bytes:
            return None
        return self.peak_memory_bytes / self.memory_limit_bytes

    @property
    def near_memory_limit(self) -> bool:
        """The baseline ran out of memory, or its peak is over :data:`NEAR_LIMIT_FRAC` of the limit."""
        frac = self.memory_used_frac
        return self.out_of_memory or (frac is not None and frac > NEAR_LIMIT_FRAC)

    @property
    def max_workers(self) -> int:
        """Largest ``num_workers`` among the script's DataLoaders (0 without any)."""
        return max((d.num_workers for d in self.dataloaders), default=0)

    @property
    def accumulation(self) -> int | None:
        """Micro-batches per optimizer step (batches counted per step, else samples / batch size)."""
        if self.batches_per_step:
            return max(1, round(self.batches_per_step))
        sizes = [d.batch_size for d in self.dataloaders if d.batch_size]
        if not sizes or not self.samples_per_step:
            return None
        return max(1, round(self.samples_per_step / sizes[0]))

    @property
    def batch_size(self) -> int | None:
        """The first DataLoader's ``batch_size`` (None without a loader or with a batch_sampler)."""
        return next((d.batch_size for d in self.dataloaders if d.batch_size), None)


def is_out_of_memory(capture: RunCapture) -> bool:
    """Tell whether a run failed for memory: over ``--memory-budget``, or torch's own OOM error."""
    err = capture.error
    if capture.ok or err is None:
        return False
    return err.type in (OUT_OF_MEMORY, "OutOfMemoryError") or "out of memory" in (err.message or "").lower()


def context_from_capture(capture: RunCapture, memory_budget_bytes: int | None = None) -> FixContext:
    """Build a :class:`FixContext` from a (baseline) capture and the run's ``--memory-budget``."""
    env = capture.environment
    samples = sorted(s for s in capture.timed.samples if s)
    per_step = float(samples[len(samples) // 2]) if samples else None
    batches = sorted(b for b in getattr(capture.timed, "batches", ()) if b)
    return FixContext(
        cuda=env.device.startswith("cuda"),
        cpu_count=env.cpu_count or available_cores(),
        dataloaders=capture.dataloaders,
        samples_per_step=per_step,
        batches_per_step=float(batches[len(batches) // 2]) if batches else None,
        step_source=capture.step_source,
        loop_accumulation=capture.timed.accumulation,
        micro_batch_samples=capture.timed.micro_batch_samples,
        script_config=capture.script_config,
        intra_op_threads=env.intra_op_threads,
        peak_memory_bytes=capture.peak_memory_bytes,
        memory_limit_bytes=memory_budget_bytes or (
            capture.gpu.total_memory_bytes if capture.memory_kind == MemoryKind.CUDA else None
        ),
        out_of_memory=is_out_of_memory(capture),
    )


def available_cores() -> int:
    """Cores this process may run on (affinity-aware where the OS tells)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - macOS/Windows
        return os.cpu_count() or 1


@dataclass(frozen=True)
class VariantPlan:
    """One run that measures a fix: a rung of its ladder, or its only run.

    Attributes:
        params: The parameters the child installs the fix with.
        overrides: RunSpec fields changed for this run (fewer steps when a step holds k times
            the samples).
        label: The run's name in progress lines and run folders (``dataloader_workers@2``):
            :meth:`Fix.plan_variants` names each run with :meth:`Fix.run_label`, the one place
            rung names are built; a catalog's ``variants`` leaves it empty.
    """

    params: dict[str, Any] = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)
    label: str = ""


@dataclass(frozen=True)
class RungRuns:
    """What the runs of a measured rung saw: the evidence a fix measured on top of it reads.

    A fix that ``requires`` another is measured against that fix's best rung (loader fixes on
    top of ``dataloader_workers@2``). Those rung runs have already shown whether the fix could
    move the measurement at all (:attr:`Fix.inert`), before a run of it is paid for.

    Attributes:
        label: The rung's run name (``dataloader_workers@2``).
        step_ms: Median over its runs of each run's median timed step (None without steps).
        epoch_ends: Per run, the DataLoader epochs that ended during its timed steps.
        step_source: What its steps were counted from (``optimizer``, ``dataloader``...).
        base_step_ms: The plain baseline's median timed step.
        shares: The baseline's step-time breakdown (category word -> share of the step);
            empty when the loop does not read it (``--exhaustive``).
    """

    label: str
    step_ms: float | None = None
    epoch_ends: tuple[int, ...] = ()
    step_source: StepSource | None = None
    base_step_ms: float | None = None
    shares: Mapping[str, float] = field(default_factory=dict)


Check = Callable[[FixContext], "str | None"]
Variants = Callable[[FixContext, RunSpec, "float | None"], "list[VariantPlan]"]
StepOverrides = Callable[[dict[str, Any], RunSpec, FixContext, "float | None"], "dict[str, Any]"]
Install = Callable[[Any, dict[str, Any]], None]
AdjustLoader = Callable[[Any, dict[str, Any], dict[str, Any]], None]
OnModel = Callable[[Any, Any], None]
PlanDiff = Callable[[DiffPlan, dict[str, Any]], None]
Inert = Callable[[RungRuns], "str | None"]


def _no_check(ctx: FixContext) -> str | None:
    return None


@dataclass(frozen=True)
class Fix:
    """One intervention, whole: metadata, applicability, variants, run-time install, diff.

    Attributes:
        id: The fix id (the vocabulary rules name in ``fix: {id, safety}``).
        safety: :class:`~advisor.engine.model.Safety`.
        description: One sentence: what the fix changes.
        check: Returns why the fix cannot apply in this baseline, or None when it can.
        applies_when: One sentence for the docs: when the fix is worth trying.
        measured: One sentence for the docs: how the trials measure it (ladder, objective).
        loss_rtol: Loss-parity tolerance (relative) beyond which a variant is rejected.
        requires: A fix whose effect this one builds on (prefetch needs workers): when the
            baseline lacks it, this fix is measured on top of that fix's best variant.
        conflicts: Fixes that cannot be combined with this one (the faster one is kept).
        variants: The runs that measure the fix; None: one run with no parameters.
        step_overrides: RunSpec overrides for a run with these params (fewer steps when a step
            holds k times the samples); used by the variants and by the combined run.
        rung: How a ladder rung with these params is named in a reason (``2 workers``, ``x16``).
        rung_key: The short key a rung's run is named by, from its params (``2`` in
            ``dataloader_workers@2``); None, or a None key: the run is named by the fix id.
        present: For a fix others require: whether the baseline already has its effect
            (``num_workers > 0``), so those fixes are measured against the plain baseline.
        changes_loader: The fix acts through DataLoader arguments, which the capture records: an
            unchanged DataLoader proves it did not apply, whatever its note says.
        changes_samples: The fix changes the samples a step consumes (the batch size, the
            micro-batches per step); any other fix's runs must count their reference's samples
            per step (:mod:`advisor.fixes.loop.counting`).
        install: Child side: configure the run-time state (:class:`advisor.fixes.runtime_state.State`)
            for this fix; torch is imported inside, never at module level.
        adjust_loader: Child side: change one ``DataLoader(...)`` call's bound arguments.
        on_model: Child side: set up the model on its first outermost call.
        plan_diff: Parent side: add this fix's source edits to a :class:`DiffPlan`: its generic
            primitives, or the fix's own transformation as a
            :class:`~advisor.fixes.diff_plan.SourceEdit` in ``plan.edits``.
        manual: What to change by hand, for a fix with no mechanical diff.
        advice: Why no safe run-time change exists, for a fix that is only a diff: it is never
            run, its trial reads ``advice`` (never a measured win), and its diff is offered.
        objective: What the trial's verdict is decided on (:class:`Objective`): ``speed``, or
            ``memory`` (kept when it saves at least :data:`MIN_MEMORY_SAVING` of the peak with
            loss parity; its speed cost is reported beside it). A memory fix is also tried
            when the baseline itself ran out of memory.
        shrinks: The step-time categories (:class:`~advisor.engine.model.Category` words) the
            fix can shorten and nothing else: their share of the measured step bounds its gain
            (Amdahl), so a fix whose bound cannot reach the minimum effect is skipped unrun
            (:mod:`advisor.fixes.bounds`). Empty (the default) for a fix whose gain is not
            confined to a category (batch size, compile, threads): it is never skipped so.
        kernel_bound: The fix only makes GPU kernels faster (precision, layout, cuDNN's choice of
            algorithm): on a GPU run its bound is also the share of the step the GPU is busy,
            since a step whose GPU waits on the CPU cannot gain from faster kernels.
        alone: For a fix that ``requires`` another: its runs when the baseline lacks that fix's
            effect and it is not tried either (``cpu_threads`` on its own, for a script whose
            DataLoader has no workers and needs none); None: the fix is then skipped.
        inert: For a fix that ``requires`` another: why, from the runs of the rung it would be
            measured on top of (:class:`RungRuns`), a trial of it could not measure any change
            (None: it could). Such a trial is skipped unrun with that reason, unless the
            user named the fix (``--fix``) or asked for ``--exhaustive``.
        fresh_process: Its gain depends on state a process forked from the warm-start server
            inherits (the allocator's): its runs, and the baseline runs it is measured against,
            start cold (``RunSpec.fresh_process``), in a measurement of their own.
        gains_until: A run metric: the training steps after which the fix has nothing left to
            gain in a plain run (None while it holds throughout); the whole-run projection of a
            kept set of this fix alone counts its speedup on those steps only (:mod:`advisor.metrics.whole`).
    """

    id: str
    safety: Safety
    description: str
    check: Check = _no_check
    applies_when: str = ""
    measured: str = "one run with the fix against the interleaved baseline runs"
    loss_rtol: float = LOSS_RTOL_SAFE
    requires: str | None = None
    alone: Variants | None = None
    conflicts: tuple[str, ...] = ()
    variants: Variants | None = None
    step_overrides: StepOverrides | None = None
    rung: Callable[[dict[str, Any]], str] | None = None
    rung_key: Callable[[dict[str, Any]], object] | None = None
    present: Callable[[FixContext], bool] | None = None
    changes_loader: bool = False
    changes_samples: bool = False
    install: Install | None = None
    adjust_loader: AdjustLoader | None = None
    on_model: OnModel | None = None
    plan_diff: PlanDiff | None = None
    manual: str = ""
    advice: str = ""
    objective: Objective = Objective.SPEED
    shrinks: tuple[str, ...] = ()
    kernel_bound: bool = False
    inert: Inert | None = None
    fresh_process: bool = False
    gains_until: str = ""

    @property
    def needs_no_run(self) -> bool:
        """Advice whose applicability needs no baseline: it is offered without running the script."""
        return bool(self.advice) and self.check is _no_check

    def __post_init__(self) -> None:
        safety = Safety.parse(self.safety)
        if not isinstance(safety, Safety):
            raise ValueError(f"fix {self.id!r}: safety must be 'safe' or 'unsafe', not {self.safety!r}")
        object.__setattr__(self, "safety", safety)
        objective = Objective.parse(self.objective)
        if not isinstance(objective, Objective):
            raise ValueError(f"fix {self.id!r}: objective must be 'speed' or 'memory', not {self.objective!r}")
        object.__setattr__(self, "objective", objective)

    def plan_variants(
        self, ctx: FixContext, spec: RunSpec, step_ms: float | None = None, alone: bool = False
    ) -> list[VariantPlan]:
        """Return the runs that measure this fix in ``ctx`` (one run without parameters by default).

        ``alone``: the runs without the fix it requires (:attr:`alone`).
        """
        if alone and self.alone is not None:
            plans = self.alone(ctx, spec, step_ms)
        else:
            plans = self.variants(ctx, spec, step_ms) if self.variants is not None else [VariantPlan()]
        return [replace(p, label=self.run_label(p.params)) for p in plans]

    def run_label(self, params: dict[str, Any]) -> str:
        """Name the run of this fix with ``params``: ``dataloader_workers@2``, or the fix id without a rung key."""
        key = self.rung_key(params) if self.rung_key is not None else None
        return self.id if key is None else f"{self.id}@{key}"

    def overrides_for(
        self, params: dict[str, Any], spec: RunSpec, ctx: FixContext, step_ms: float | None = None
    ) -> dict[str, Any]:
        """RunSpec overrides for a run of this fix with ``params`` (none by default)."""
        return self.step_overrides(params, spec, ctx, step_ms) if self.step_overrides else {}

    def rung_name(self, params: dict[str, Any]) -> str:
        """How a rung with ``params`` is named in a ladder summary."""
        return self.rung(params) if self.rung is not None else self.id


def peak_params(ctx: FixContext) -> dict[str, Any]:
    """Return the params that carry where the peak is held to a memory fix's diff note (none when unknown)."""
    if not ctx.peak_at:
        return {}
    return {"peak_at": list(ctx.peak_at), "activation_frac": ctx.peak_activation_frac}


def peak_note(fix_id: str, params: dict[str, Any]) -> str | None:
    """Say where the peak is allocated and the activations' share of it (``peak_params``), or None."""
    where = params.get("peak_at")
    if not where:
        return None
    frac = params.get("activation_frac")
    share = f"; activations kept for backward are {frac:.0%} of it" if isinstance(frac, float) else ""
    return f"{fix_id}: the peak memory is allocated most at {', '.join(map(str, where))}{share}"


# -- shared applicability checks ---------------------------------------------------------------


def loader_batch_size(state: Any, fix_id: str, a: dict[str, Any], verb: str) -> int | None:
    """Return the ``batch_size`` of one DataLoader call a fix would ``verb``, or None after saying why it has none.

    Child side (an ``adjust_loader`` hook): a loader built from a ``batch_sampler`` or with
    ``batch_size=None`` has no batch size to change, and the fix is skipped for it.
    """
    if a.get("batch_sampler") is not None or a.get("batch_size") is None:
        state.loader_skip(
            fix_id, f"the DataLoader uses a batch_sampler or batch_size=None: there is no batch_size to {verb}"
        )
        return None
    return int(a["batch_size"])


def needs_cuda(what: str) -> Check:
    """Return a check that refuses a CUDA-only fix on a CPU-only run."""

    def check(ctx: FixContext) -> str | None:
        if ctx.cuda:
            return None
        return f"{what} only matters with a CUDA device; on this CPU-only run it is a no-op"

    return check


def needs_loader(ctx: FixContext) -> str | None:
    """Refuse a DataLoader fix when the script built no DataLoader."""
    if not ctx.dataloaders:
        return "the script created no torch DataLoader"
    return None


# -- step counts for runs whose steps hold k times the samples ----------------------------------


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
