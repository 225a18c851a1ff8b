"""``script_args``: re-run the script with its own arguments changed (no run-time patch).

When the script exposes a knob on its command line (argparse options, or nanoGPT-style
``--key=value`` configurator globals; see :mod:`advisor.capture.scriptconfig`), changing that
knob is exactly what the user will do, so it is tried that way: the trial re-runs the script
with a new command line, interleaved and loss-checked like every trial, and the diff it hands
over is that command line.

Recognised knobs (by name, and only when their value matches what the baseline measured):

* gradient accumulation: an accumulation-steps option equal to the backward calls per
  optimizer step, next to a batch-size option equal to the samples per backward call. The trial
  keeps the effective batch: one batch of ``micro x accum`` and accumulation 1.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from advisor.capture.model import RunSpec
from advisor.capture.records import ScriptOption
from advisor.capture.vocab import ConfigStyle
from advisor.fixes.diff_plan import DiffPlan
from advisor.fixes.fix import LOSS_RTOL_BATCH, UNSAFE, Fix, FixContext, VariantPlan

ACCUMULATION_NAMES = frozenset({
    "accum", "accumsteps", "accumulation", "accumulationsteps", "accumulate", "accumulategradbatches",
    "gradaccum", "gradaccumsteps", "gradientaccumulation", "gradientaccumulationsteps", "gradaccumulation",
})
"""Normalised names (lower case, no ``-``/``_``) of gradient-accumulation options."""

BATCH_NAMES = frozenset({
    "batchsize", "batch", "bs", "b", "microbatch", "microbatchsize", "microbs",
    "perdevicetrainbatchsize", "trainbatchsize", "minibatchsize",
})
"""Normalised names of per-micro-batch batch-size options."""

SIZE_NAMES: tuple[str, ...] = (
    "patchsize", "roisize", "roi", "cropsize", "spatialsize", "imagesize", "imgsize", "inputsize", "resolution",
    "seqlen", "seqlength", "sequencelength", "maxseqlen", "contextlength", "ctxlen", "blocksize", "size",
)
"""Normalised names of input-size options (a patch's or image's side, a sequence's length), most
specific first: a script with ``--size`` (its stored volumes) and ``--roi`` (the crop the model
sees) has its ``--roi`` swept."""

MAX_FUSED_BATCH = 4096
"""A fused batch larger than this is not tried (memory; accumulation may be there to save it)."""


def normalise(name: str) -> str:
    """``--gradient-accumulation-steps`` / ``gradient_accumulation_steps`` -> ``gradientaccumulationsteps``."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def knob(ctx: FixContext, names: frozenset[str]) -> ScriptOption | None:
    """Return the script's integer option with one of ``names``, or None."""
    for option in ctx.script_config.options:
        if normalise(option.name) in names and type(option.value) is int and option.action == "store":
            return option
    return None


def first_knob(ctx: FixContext, names: tuple[str, ...]) -> ScriptOption | None:
    """Return the script's integer option whose name comes first in ``names``, or None."""
    found = {normalise(o.name): o for o in ctx.script_config.options
             if type(o.value) is int and o.action == "store" and normalise(o.name) in names}
    return next((found[n] for n in names if n in found), None)


def accumulation_knobs(ctx: FixContext) -> tuple[ScriptOption, ScriptOption] | str:
    """Return the (batch, accumulation) options that match the measured accumulation, or why there are none."""
    if not ctx.script_config.options:
        return "the script exposes no command-line configuration advisor can read (argparse or --key=value)"
    measured = ctx.loop_accumulation or (ctx.accumulation if ctx.dataloaders else None)
    if not measured or measured < 2:
        return "one micro-batch per optimizer step: there is no gradient accumulation to change"
    accum, batch = knob(ctx, ACCUMULATION_NAMES), knob(ctx, BATCH_NAMES)
    if accum is None or batch is None:
        return "no gradient-accumulation and batch-size options were recognised among the script's arguments"
    if accum.value != measured:
        return (
            f"the script's {accum.name}={accum.value} does not match the {measured} backward calls per "
            "optimizer step measured: changing it may not change the accumulation"
        )
    micro = ctx.micro_batch_samples
    if micro is not None and round(micro) != batch.value:
        return (
            f"the script's {batch.name}={batch.value} does not match the {micro:g} samples per backward "
            "call measured"
        )
    if batch.value * accum.value > MAX_FUSED_BATCH:
        return f"one batch of {batch.value * accum.value} samples passes {MAX_FUSED_BATCH}; not tried"
    return batch, accum


def check(ctx: FixContext) -> str | None:
    """Needs recognised batch-size and accumulation options that match the measured accumulation."""
    found = accumulation_knobs(ctx)
    return found if isinstance(found, str) else None


def with_values(args: tuple[str, ...], changes: list[tuple[ScriptOption, int]]) -> tuple[str, ...]:
    """``args`` with each option set to its new value: replaced where its flag is given, else appended.

    argparse and nanoGPT's configurator both let the last occurrence win, so an appended
    ``--flag value`` overrides another spelling of it (``-b 8``) earlier on the line.
    """
    out = list(args)
    for option, value in changes:
        flag = option.flag or f"--{option.name}"
        text = str(value)
        keyed = option.style == ConfigStyle.CONFIGURATOR
        for i, a in enumerate(out):
            if a.startswith(flag + "="):
                out[i] = f"{flag}={text}"
                break
            if a == flag and not keyed and i + 1 < len(out):
                out[i + 1] = text
                break
        else:
            out.extend([f"{flag}={text}"] if keyed else [flag, text])
    return tuple(out)


def command_line(spec: RunSpec, args: tuple[str, ...]) -> str:
    """How the user runs the script with ``args`` (``python -m`` for a module run)."""
    script = Path(spec.script)
    here = Path(spec.cwd or Path.cwd()).resolve()
    if script.is_absolute() and script.resolve().is_relative_to(here):
        script = script.resolve().relative_to(here)  # as the user would type it from there
    target = ["-m", spec.module] if spec.module else [str(script)]
    return shlex.join(["python", *target, *args])


def variants(ctx: FixContext, spec: RunSpec, step_ms: float | None) -> list[VariantPlan]:
    """One run: one batch of ``micro x accum`` samples and no accumulation (same effective batch)."""
    found = accumulation_knobs(ctx)
    if isinstance(found, str):
        return []
    batch, accum = found
    args = with_values(tuple(spec.args), [(batch, batch.value * accum.value), (accum, 1)])
    params = {
        "args": list(args),
        "command": command_line(spec, args),
        "changes": {batch.name: batch.value * accum.value, accum.name: 1},
    }
    return [VariantPlan(params, step_overrides(params, spec, ctx, step_ms))]


def step_overrides(params: dict[str, Any], spec: RunSpec, ctx: FixContext, step_ms: float | None) -> dict[str, Any]:
    """Return the new arguments; step counts stay (a step holds the same samples as the baseline's)."""
    return {"args": tuple(params.get("args", spec.args))}


def install(state: Any, params: dict[str, Any]) -> None:
    """Child side: nothing to patch; the note records the arguments the script ran with."""
    changes = ", ".join(f"{k}={v}" for k, v in dict(params.get("changes", {})).items())
    state.applied("script_args", f"the script ran with its own arguments changed: {changes}")


def plan_diff(plan: DiffPlan, params: dict[str, Any]) -> None:
    """Add the new command line: nothing in the source changes."""
    if params.get("command"):
        plan.commands.append(str(params["command"]))


def rung(params: dict[str, Any]) -> str:
    """``batch_size=320 accum=1``."""
    return " ".join(f"{k}={v}" for k, v in dict(params.get("changes", {})).items()) or "script_args"


FIX = Fix(
    id="script_args",
    safety=UNSAFE,
    description="change the script's own arguments: one batch of micro x accum samples, no accumulation",
    applies_when=(
        "the script exposes its batch size and gradient-accumulation steps as arguments and "
        "accumulates over several micro-batches per optimizer step"
    ),
    measured="one run with the new command line against the interleaved baseline runs",
    check=check,
    loss_rtol=LOSS_RTOL_BATCH,
    conflicts=("batch_fusion", "larger_batch"),
    changes_samples=True,
    variants=variants,
    step_overrides=step_overrides,
    rung=rung,
    install=install,
    plan_diff=plan_diff,
)
