"""``activation_checkpointing``: recompute each repeated block's activations in the backward pass.

A training step keeps every intermediate activation of the forward pass alive until backward
uses it; for a stack of identical blocks that is most of the peak memory. Checkpointing a block
keeps only its input and recomputes its inside during backward (``torch.utils.checkpoint``,
``use_reentrant=False``, which also restores the RNG state, so dropout draws the same masks and
the numerics are unchanged). It costs about one more forward pass per step: the fix trades speed
for memory, so its objective is memory (:class:`~advisor.fixes.fix.Objective`): the trial is
kept when it saves memory with loss parity, and the speed it costs is reported beside it.

At run time, on the model's first call, the blocks are found without reading the source:

- a model with a ``gradient_checkpointing_enable()`` method (Hugging Face ``PreTrainedModel``)
  is asked to do it itself, with ``use_reentrant=False`` where the method takes it;
- otherwise the repeated blocks: the children of an ``nn.ModuleList`` or ``nn.Sequential``
  that are at least two instances of one composite module class (a class with submodules:
  checkpointing a single ``Linear`` saves nothing), outermost containers first. Each block's
  ``forward`` is replaced on the instance by a checkpointed call, while gradients are enabled.

The diff rewrites the mechanical case, a loop ``for layer in self.layers: x = layer(x)``, into
``x = checkpoint(layer, x, use_reentrant=False)``; anything else gets a note saying what to
change by hand.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any

from advisor.capture.model import RunSpec
from advisor.capture.vocab import StepSource
from advisor.fixes.diff_plan import DiffPlan, EditScope
from advisor.fixes.fix import SAFE, Fix, FixContext, Objective, VariantPlan, peak_note, peak_params

MANUAL = (
    "activation_checkpointing: call each repeated block through "
    "torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) in the model's forward "
    "(torch.utils.checkpoint.checkpoint_sequential for an nn.Sequential stack; "
    "model.gradient_checkpointing_enable() on a Hugging Face model)"
)


def check(ctx: FixContext) -> str | None:
    """Needs a training loop (a backward pass keeps activations; an inference loop keeps none)."""
    if ctx.step_source == StepSource.DATALOADER:
        return "the loop runs no optimizer step: without a backward pass there are no activations to recompute"
    return None


def variants(ctx: FixContext, spec: RunSpec, step_ms: float | None) -> list[VariantPlan]:
    """One run; it carries where the diagnosed peak is allocated, for the diff's note."""
    return [VariantPlan(peak_params(ctx))]


def install(state: Any, params: dict[str, Any]) -> None:
    """Child side: find and wrap the repeated blocks on the model's first call."""
    state.want_model("activation_checkpointing", params)


def repeated_blocks(model: Any) -> list[tuple[str, list[Any]]]:
    """Return ``(container name, blocks)`` for each container of repeated composite blocks.

    Containers are ``nn.ModuleList`` / ``nn.Sequential`` modules holding at least two children
    of one class that has submodules of its own; a container inside an already chosen block is
    left out (its block is checkpointed whole).
    """
    from torch import nn

    found: list[tuple[str, list[Any]]] = []
    inside: set[int] = set()
    for name, module in model.named_modules():
        if id(module) in inside or not isinstance(module, (nn.ModuleList, nn.Sequential)):
            continue
        by_class: dict[type, list[Any]] = {}
        for child in module.children():
            if next(child.children(), None) is not None:  # composite: worth checkpointing
                by_class.setdefault(type(child), []).append(child)
        blocks = max(by_class.values(), key=len, default=[])
        if len(blocks) < 2:
            continue
        found.append((name or type(model).__name__, blocks))
        for block in blocks:
            inside.update(id(m) for m in block.modules())
    return found


def checkpointed(forward: Any) -> Any:
    """Wrap a bound ``forward`` so that, with gradients on, it runs under non-reentrant checkpointing."""
    import torch
    from torch.utils.checkpoint import checkpoint

    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():  # eval / no_grad: nothing is kept for backward anyway
            return forward(*args, **kwargs)
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    return run


def on_model(state: Any, module: Any) -> None:
    """Checkpoint the model's repeated blocks (or let a Hugging Face model do it)."""
    enable = getattr(module, "gradient_checkpointing_enable", None)
    if callable(enable):
        try:
            takes = "gradient_checkpointing_kwargs" in inspect.signature(enable).parameters
        except (TypeError, ValueError):
            takes = False
        if takes:
            enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            enable()
        state.applied("activation_checkpointing", f"{type(module).__name__}.gradient_checkpointing_enable()")
        return
    stacks = repeated_blocks(module)
    if not stacks:
        state.skipped(
            "activation_checkpointing",
            f"{type(module).__name__} has no repeated blocks (an nn.ModuleList or nn.Sequential of "
            "identical composite modules) to checkpoint",
        )
        return
    for _, blocks in stacks:
        for block in blocks:
            block.forward = checkpointed(block.forward)
    what = ", ".join(f"{len(b)} {type(b[0]).__name__} blocks of {n}" for n, b in stacks)
    state.applied("activation_checkpointing", f"checkpointed {what} (use_reentrant=False)")


@dataclass(frozen=True)
class CheckpointLoops:
    """The diff's edit (:class:`~advisor.fixes.diff_plan.SourceEdit`): :mod:`advisor.fixes.edits.activation_checkpointing`."""

    name = "activation_checkpointing"

    def apply(self, module: Any, scope: EditScope) -> tuple[Any, list[str]]:
        """Checkpoint the block calls of loops over blocks and import ``checkpoint``; else say what to do by hand."""
        from advisor.fixes.edits.activation_checkpointing import IMPORT, checkpoint_loops

        new, done = checkpoint_loops(module, scope.loaders)
        if not done:
            return new, [MANUAL]
        if IMPORT not in scope.header_statements:
            scope.header_statements.append(IMPORT)
        return new, []


def plan_diff(plan: DiffPlan, params: dict[str, Any]) -> None:
    """Checkpoint the calls in loops over a block list (``x = checkpoint(layer, x, ...)``); say which block holds the peak."""
    plan.edits.append(CheckpointLoops())
    note = peak_note("activation_checkpointing", params)
    if note is not None:
        plan.manual.append(f"{note}: checkpoint the block named there first (it frees at most that share)")


FIX = Fix(
    id="activation_checkpointing",
    safety=SAFE,
    description=(
        "recompute the activations of each repeated block (nn.ModuleList / nn.Sequential of identical "
        "blocks, or a Hugging Face model's gradient_checkpointing_enable()) in the backward pass "
        "instead of keeping them: less peak memory for about one more forward pass"
    ),
    applies_when="peak memory is near the limit (the --memory-budget, or the GPU) in a model built of repeated blocks",
    measured=(
        "one run against the interleaved baseline runs; its objective is memory: kept when the peak "
        "falls by 5% or more with loss parity, the speed it costs reported beside the memory saved"
    ),
    check=check,
    variants=variants,
    objective=Objective.MEMORY,
    install=install,
    on_model=on_model,
    plan_diff=plan_diff,
    manual=MANUAL,
)
