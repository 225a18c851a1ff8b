"""``torch_compile``: compile the model with ``torch.compile`` (first steps pay the compile).

Modes are a ladder: the default mode everywhere; on CUDA also ``reduce-overhead`` (CUDA graphs
cut the launch cost of small kernels) and ``max-autotune`` (autotuned matmul/conv kernels, plus
CUDA graphs). On CPU only the default rung runs: ``reduce-overhead``'s CUDA graphs do nothing
there, and ``max-autotune`` spends minutes autotuning GEMM templates on a few cores. The compile
itself lands in the time to first step, reported apart from the steady speed.
"""

from __future__ import annotations

from typing import Any

from advisor.capture.model import RunSpec
from advisor.fixes.diff_plan import DiffPlan
from advisor.fixes.fix import LOSS_RTOL_PRECISION, UNSAFE, Fix, FixContext, VariantPlan

# torch.compile keywords a trial may choose (tests use the fast "eager" backend).
COMPILE_KEYS = ("backend", "mode", "dynamic")
CUDA_MODES: tuple[str, ...] = ("reduce-overhead", "max-autotune")
"""Modes tried after the default on a CUDA run."""


COMPILED_WARMUP = 5
"""Warm-up steps before any rung is timed. On the H200 (2026-11-27) a compiled model took 17 s on
its first step and recompiled on its third (1.2 s, the capture's hooks having left): timed from
step 3, the default rung read 0.13x where its steady steps ran 1.5x. The CUDA-graph modes need as
many: cudagraph trees run a step eagerly, record the next and replay from the third."""
AUTOTUNE_TIMEOUT_S = 900.0
"""A max-autotune rung's run limit when the user set none: a cold autotune of every matmul and
convolution takes minutes, beyond the trials' usual limit (the baseline's wall time x 6, >= 120 s)."""
AUTOTUNE_MIN_GPU_BUSY = 0.5
"""max-autotune is tried only where the GPU is busy at least this share of the step: beyond
reduce-overhead's CUDA graphs it only makes kernels faster, which cannot pay for minutes of
autotuning per cold trial run where the GPU idles most of the step (chargpt on the H200: busy
15%, its max-autotune rung spent 148 s autotuning and was cut off)."""


def step_overrides(params: dict[str, Any], spec: RunSpec, ctx: FixContext, step_ms: float | None) -> dict[str, Any]:
    """Warm-up past the compile and its recompile on every rung, and max-autotune's time to autotune."""
    out: dict[str, Any] = {"warmup_steps": max(spec.warmup_steps, COMPILED_WARMUP)}
    if params.get("mode") == "max-autotune" and spec.timeout_s is None:
        out["timeout_s"] = AUTOTUNE_TIMEOUT_S
    return out


def variants(ctx: FixContext, spec: RunSpec, step_ms: float | None) -> list[VariantPlan]:
    """Return the default mode's rung, then (CUDA only) one per mode of :data:`CUDA_MODES`.

    max-autotune only where the GPU is busy enough for faster kernels to matter
    (:data:`AUTOTUNE_MIN_GPU_BUSY`; an unknown share does not rule it out).
    """
    modes = [m for m in CUDA_MODES if m != "max-autotune" or ctx.gpu_busy is None or ctx.gpu_busy >= AUTOTUNE_MIN_GPU_BUSY]
    rungs = [VariantPlan({}, step_overrides({}, spec, ctx, step_ms))]
    if ctx.cuda:
        rungs += [VariantPlan(p, step_overrides(p, spec, ctx, step_ms)) for p in ({"mode": m} for m in modes)]
    return rungs


def install(state: Any, params: dict[str, Any]) -> None:
    """Child side: compile the model in place on its first call."""
    state.want_model("torch_compile", params)


def on_model(state: Any, module: Any) -> None:
    """``module.compile(...)`` in place: the optimizer's parameters stay the same objects."""
    if type(module).__name__ == "OptimizedModule" or getattr(module, "_compiled_call_impl", None):
        state.skipped("torch_compile", "the model is already compiled")
        return
    params = state.model_fixes.get("torch_compile", {})
    module.compile(**{k: params[k] for k in COMPILE_KEYS if k in params})
    mode = f"(mode={params['mode']!r})" if params.get("mode") else "()"
    state.applied("torch_compile", f"{type(module).__name__}.compile{mode} on its first call")


def plan_diff(plan: DiffPlan, params: dict[str, Any]) -> None:
    """``model.compile()`` after the model is built: in place, as the trial ran it."""
    plan.compile = True
    if params.get("mode"):
        plan.compile_kwargs = f"mode={params['mode']!r}"


FIX = Fix(
    id="torch_compile",
    safety=UNSAFE,
    description="compile the model with torch.compile (first steps pay the compile)",
    applies_when="many small kernels or Python overhead per step that graph capture and fusion remove",
    measured=(
        "a ladder of modes (default; on CUDA also reduce-overhead and max-autotune), the best rung "
        "reported; the compile time shows in the time to first step, reported apart from the steady speed"
    ),
    loss_rtol=LOSS_RTOL_PRECISION,
    variants=variants,
    step_overrides=step_overrides,
    rung=lambda p: str(p.get("mode", "default")),
    rung_key=lambda p: p.get("mode"),
    install=install,
    on_model=on_model,
    plan_diff=plan_diff,
)
