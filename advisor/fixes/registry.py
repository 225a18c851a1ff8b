"""The fix registry: every run-time intervention, registered once with its safety and checks.

A fix id is the shared vocabulary between rules (``fix: {id, safety}``) and this registry.
Each :class:`FixSpec` says what the fix does, whether it is ``safe`` (performance only, numerics
unchanged) or ``unsafe`` (precision, batch semantics, compile), how loose the loss-parity check is,
and an applicability check that runs in the parent on what the baseline run recorded
(:class:`FixContext`). Checks that can only be made inside the script's process (autocast already
on, no convolutions, an IterableDataset that does not shard) are made by
:mod:`advisor.fixes.runtime`, which reports them through its notes.

This module imports no torch: the parent decides from the baseline capture alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from advisor.capture.model import DataLoaderInfo, RunCapture
from advisor.engine.model import Safety

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

# larger_batch: factors tried (a ladder, like the workers'), and the largest batch it will make.
# NOTE: 4x and 16x. A step that is all per-op overhead costs about the same at 4 or 64 samples,
# so 16x already recovers much of that overhead (examples/tiny_model.py, batch 4 -> 64, through
# the fix loop on 2 shared cores: 9.3x [3.8, 26] on a quiet moment, 2.9-5.4x under load), while
# each further factor makes the optimization less like the user's (k times fewer updates per
# epoch; the learning rate must be re-tuned, Goyal et al. 2017). 1024 samples bounds the change
# (and memory) for scripts that already use moderate batches.
BATCH_FACTORS: tuple[int, ...] = (4, 16)
MAX_BATCH = 1024


@dataclass(frozen=True)
class FixContext:
    """What the parent knows when deciding whether a fix can apply.

    Attributes:
        cuda: The script ran on a CUDA device.
        cpu_count: Cores available to the script.
        dataloaders: The DataLoaders the baseline run created.
        samples_per_step: Median samples per optimizer step in the baseline (None if unknown).
        batches_per_step: Median DataLoader batches per optimizer step (None if not recorded).
    """

    cuda: bool = False
    cpu_count: int = 1
    dataloaders: tuple[DataLoaderInfo, ...] = ()
    samples_per_step: float | None = None
    batches_per_step: float | None = None

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


def context_from_capture(capture: RunCapture) -> FixContext:
    """Build a :class:`FixContext` from a (baseline) capture."""
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
    )


def available_cores() -> int:
    """Cores this process may run on (affinity-aware where the OS tells)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - macOS/Windows
        return os.cpu_count() or 1


Check = Callable[[FixContext], "str | None"]


@dataclass(frozen=True)
class FixSpec:
    """One registered intervention.

    Attributes:
        id: The fix id (shared with rules).
        safety: ``safe`` or ``unsafe``.
        description: One line: what the fix changes.
        check: Returns why the fix cannot apply in this context, or None when it can.
        loss_rtol: Loss-parity tolerance (relative) beyond which the variant is rejected.
        requires: A fix whose effect this one builds on (e.g. prefetch needs workers): when the
            baseline lacks it, this fix is measured on top of that fix's best variant.
        conflicts: Fixes that cannot be combined with this one (the better one is kept).
    """

    id: str
    safety: str
    description: str
    check: Check = field(default=lambda ctx: None)
    loss_rtol: float = LOSS_RTOL_SAFE
    requires: str | None = None
    conflicts: tuple[str, ...] = ()


def _needs_cuda(what: str) -> Check:
    def check(ctx: FixContext) -> str | None:
        if ctx.cuda:
            return None
        return f"{what} only matters with a CUDA device; on this CPU-only run it is a no-op"

    return check


def _needs_loader(ctx: FixContext) -> str | None:
    if not ctx.dataloaders:
        return "the script created no torch DataLoader"
    return None


def _check_workers(ctx: FixContext) -> str | None:
    if (reason := _needs_loader(ctx)) is not None:
        return reason
    if all(d.iterable_dataset for d in ctx.dataloaders):
        # NOTE: the runtime re-checks for worker sharding (get_worker_info) and applies workers
        # where the dataset shards itself; the parent cannot see the source, so it lets it run.
        return None
    if ctx.max_workers >= ctx.cpu_count:
        return f"the DataLoader already uses {ctx.max_workers} workers on {ctx.cpu_count} cores"
    return None


def _check_pin(ctx: FixContext) -> str | None:
    if (reason := _needs_cuda("pin_memory")(ctx)) is not None:
        return reason
    if ctx.dataloaders and all(d.pin_memory for d in ctx.dataloaders):
        return "every DataLoader already sets pin_memory=True"
    return _needs_loader(ctx)


def _check_persistent(ctx: FixContext) -> str | None:
    if (reason := _needs_loader(ctx)) is not None:
        return reason
    if ctx.dataloaders and all(d.persistent_workers for d in ctx.dataloaders):
        return "every DataLoader already sets persistent_workers=True"
    return None


def _check_threads(ctx: FixContext) -> str | None:
    if ctx.cpu_count <= 1:
        return "one core: there is no thread count to trade"
    return _needs_loader(ctx)


def _check_fusion(ctx: FixContext) -> str | None:
    if (reason := _needs_loader(ctx)) is not None:
        return reason
    accum = ctx.accumulation
    if accum is None:
        return "no samples per step were counted, so gradient accumulation cannot be seen"
    if accum <= 1:
        return "one micro-batch per optimizer step: there is no gradient accumulation to fuse"
    return None


def _check_larger_batch(ctx: FixContext) -> str | None:
    if (reason := _needs_loader(ctx)) is not None:
        return reason
    batch = ctx.batch_size
    if batch is None:
        return "the DataLoader has no batch_size (a batch_sampler or batch_size=None): nothing to scale"
    if not batch_ladder(batch):
        return f"the batch is already {batch} samples; larger_batch stops at {MAX_BATCH}"
    accum = ctx.accumulation or 1
    if accum > 1:
        # NOTE: at run time both fixes only scale batch_size, so at equal factors they measure the
        # same thing (grad_accumulation: x16 either way) and noise would pick the label. The
        # advice differs: batch_fusion's diff divides the accumulation count and keeps the
        # effective batch; larger_batch's changes it. Accumulation calls for batch_fusion.
        return (
            f"the loop accumulates gradients over {accum} micro-batches: batch_fusion is the fix "
            "for that (its diff keeps the effective batch)"
        )
    return None


_SPECS: dict[str, FixSpec] = {}


def register(spec: FixSpec) -> FixSpec:
    """Add a fix to the registry; a second registration of the same id is a programming error."""
    if spec.safety not in (SAFE, UNSAFE):
        raise ValueError(f"fix {spec.id!r}: safety must be 'safe' or 'unsafe', not {spec.safety!r}")
    if spec.id in _SPECS:
        raise ValueError(f"fix {spec.id!r} is already registered")
    _SPECS[spec.id] = spec
    return spec


def get(fix_id: str) -> FixSpec:
    """Return the spec of a registered fix; KeyError for an unknown id."""
    return _SPECS[fix_id]


def all_fixes() -> tuple[FixSpec, ...]:
    """Every registered fix, in registration order."""
    return tuple(_SPECS.values())


def fix_ids() -> tuple[str, ...]:
    """Every registered fix id, in registration order."""
    return tuple(_SPECS)


register(FixSpec(
    "dataloader_workers", SAFE,
    "load batches in parallel worker processes (DataLoader num_workers, a ladder sized to the cores)",
    check=_check_workers,
))
register(FixSpec(
    "pin_memory", SAFE, "page-locked host batches for faster host-to-device copies (pin_memory=True)",
    check=_check_pin,
))
register(FixSpec(
    "persistent_workers", SAFE, "keep loader workers alive across epochs (persistent_workers=True)",
    check=_check_persistent, requires="dataloader_workers",
))
register(FixSpec(
    "prefetch_factor", SAFE, "let each loader worker prepare more batches ahead (prefetch_factor)",
    check=_needs_loader, requires="dataloader_workers",
))
register(FixSpec(
    "non_blocking_copy", SAFE,
    "host-to-device copies from pinned memory with non_blocking=True",
    check=_needs_cuda("non_blocking_copy"),
))
register(FixSpec(
    "cpu_threads", SAFE,
    "leave a core per loader worker: torch.set_num_threads(cores - workers)",
    check=_check_threads, requires="dataloader_workers",
))
register(FixSpec(
    "bf16_autocast", UNSAFE, "run the model's forward pass under torch.autocast with bfloat16",
    loss_rtol=LOSS_RTOL_PRECISION, conflicts=("fp16_amp",),
))
register(FixSpec(
    "fp16_amp", UNSAFE, "float16 autocast with a GradScaler for loss scaling",
    check=_needs_cuda("fp16_amp"), loss_rtol=LOSS_RTOL_PRECISION, conflicts=("bf16_autocast",),
))
register(FixSpec(
    "batch_fusion", UNSAFE,
    "fuse the gradient-accumulation micro-batches into one larger DataLoader batch",
    check=_check_fusion, loss_rtol=LOSS_RTOL_BATCH, conflicts=("larger_batch",),
))
register(FixSpec(
    "torch_compile", UNSAFE, "compile the model with torch.compile (first steps pay the compile)",
    loss_rtol=LOSS_RTOL_PRECISION,
))
register(FixSpec(
    "cudnn_benchmark", UNSAFE, "let cuDNN autotune convolution algorithms (cudnn.benchmark=True)",
    check=_needs_cuda("cudnn_benchmark"), loss_rtol=LOSS_RTOL_PRECISION,
))
register(FixSpec(
    "tf32", UNSAFE, "TensorFloat-32 matmuls and convolutions (set_float32_matmul_precision('high'))",
    check=_needs_cuda("tf32"), loss_rtol=LOSS_RTOL_PRECISION,
))
register(FixSpec(
    "channels_last", UNSAFE, "channels_last memory format for a conv net and its inputs",
    loss_rtol=LOSS_RTOL_PRECISION,
))
register(FixSpec(
    "fused_optimizer", UNSAFE, "fused (else foreach) optimizer kernels (fused=True)",
    loss_rtol=LOSS_RTOL_PRECISION,
))
register(FixSpec(
    "larger_batch", UNSAFE,
    "multiply the DataLoader batch_size (a x4/x16 ladder, at most 1024 samples): each optimizer "
    "step sees k times the samples, so the learning rate may need scaling",
    check=_check_larger_batch, loss_rtol=LOSS_RTOL_BATCH, conflicts=("batch_fusion",),
))


def safety_of(fix_id: str) -> str:
    """``safe`` or ``unsafe`` for a registered fix id."""
    return get(fix_id).safety


def worker_ladder(cores: int, current: int = 0) -> tuple[int, ...]:
    """Return a short ladder of ``num_workers`` to try: few rungs, sized to the machine.

    Args:
        cores: Cores available.
        current: Workers the script already uses; only larger counts are tried.

    Returns:
        Up to three increasing worker counts, e.g. ``(1, 2)`` on 2 cores, ``(2, 8, 16)`` on 16.
    """
    cores = max(1, cores)
    if cores <= 2:
        rungs = {1, cores}
    elif cores <= 4:
        rungs = {1, 2, cores}
    else:
        rungs = {2, cores // 2, cores}
    return tuple(sorted(r for r in rungs if r > current))


def batch_ladder(batch_size: int, max_batch: int = MAX_BATCH) -> tuple[int, ...]:
    """Return the ``larger_batch`` factors to try for a DataLoader batch of ``batch_size``.

    Args:
        batch_size: The script's batch size (samples per DataLoader batch).
        max_batch: Largest batch a rung may make.

    Returns:
        The factors of :data:`BATCH_FACTORS` that keep the batch at most ``max_batch``, e.g.
        ``(4, 16)`` for a batch of 4 or 64, ``(4,)`` for 200; ``(2,)`` when only doubling fits;
        ``()`` when even that would pass the cap.
    """
    if batch_size < 1:
        return ()
    factors = tuple(k for k in BATCH_FACTORS if batch_size * k <= max_batch)
    if not factors and batch_size * 2 <= max_batch:
        factors = (2,)
    return factors
