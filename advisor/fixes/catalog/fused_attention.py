"""``fused_attention``: hand-written attention replaced by ``scaled_dot_product_attention``.

Attention written out by hand (``q @ k.transpose(-2, -1)``, scale, mask, ``softmax``, dropout,
``@ v``) materialises the (batch, heads, T, T) score matrix several times; SDPA computes the
same attention in one fused kernel (flash / memory-efficient on a GPU) without keeping it.

At run time, on the model's first call:

- a Hugging Face style model (a submodule with ``config._attn_implementation``) is switched to
  ``"sdpa"`` (``set_attn_implementation`` when the model has it, else the config field; both are
  read at forward time by recent transformers versions);
- otherwise every module class of the model whose ``forward`` holds hand-written attention is
  rewritten by :mod:`advisor.fixes.attention`, the transformation that also makes the diff, and
  the rewritten ``forward`` is bound to the class, so the trial measures exactly the diff's
  change. A forward whose masks, scale or dropout cannot be mapped with certainty is left alone
  and the note says why.

The diff rewrites the script's own classes the same way and adds ``attn_implementation="sdpa"``
to ``from_pretrained(...)`` calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from advisor.fixes.diff_plan import DiffPlan, EditScope
from advisor.fixes.fix import UNSAFE, Fix

# NOTE: SDPA is the same attention rounded differently. Measured on examples/attention_lm.py
# (context 128, 6 steps, same seed, CPU, torch 2.13): the first losses differ by 1e-7 relative
# without dropout, and not at all with dropout 0.1 (the CPU path draws its dropout masks from the
# same generator in the same order; a GPU's flash kernels draw their own, so there losses differ
# as two seeds of one model do, by a few tenths of a percent at ln(vocab) ~ 4.6). 10% rejects a
# run that diverged or produced NaN. It could NOT catch a wrong mask: the same run with the causal
# mask dropped moved the first losses by 0.1% only (the model has not learnt to peek yet), which is
# why the transformation refuses every mapping it cannot prove instead (tests/fixes/
# test_fused_attention.py checks each accepted form numerically).
LOSS_RTOL_ATTENTION = 0.10

FUSED = frozenset({"sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"})
"""Hugging Face attention implementations that already fuse attention."""


def install(state: Any, params: dict[str, Any]) -> None:
    """Child side: rewrite the model's attention on its first call."""
    state.want_model("fused_attention", params)


def on_model(state: Any, module: Any) -> None:
    """Switch a Hugging Face model to SDPA, or rewrite the forward of classes with hand-written attention."""
    configs = _hf_configs(module)
    if configs:
        _hf(state, module, configs)
        return
    rewritten: list[str] = []
    refused: list[str] = []
    for cls in _model_classes(module):
        done, why = rewrite_class(cls)
        if done:
            rewritten.append(cls.__qualname__)
        elif why:
            refused.append(why)
    if rewritten:
        left = f"; left as written: {'; '.join(refused)}" if refused else ""
        state.applied(
            "fused_attention",
            f"{', '.join(rewritten)}.forward rewritten to scaled_dot_product_attention (the diff's change){left}",
        )
    elif refused:
        state.skipped("fused_attention", "hand-written attention not mapped with certainty: " + "; ".join(refused))
    else:
        state.skipped(
            "fused_attention",
            f"no module of {type(module).__name__} has a forward recognisably q @ k.transpose -> softmax -> @ v",
        )


def _hf_configs(module: Any) -> list[Any]:
    """Return the distinct configs (``config._attn_implementation``) of a Hugging Face style model."""
    out: list[Any] = []
    for m in module.modules():
        cfg = getattr(m, "config", None)
        if cfg is not None and hasattr(cfg, "_attn_implementation") and all(c is not cfg for c in out):
            out.append(cfg)
    return out


def _hf(state: Any, module: Any, configs: list[Any]) -> None:
    impls = {getattr(c, "_attn_implementation", None) for c in configs}
    if impls and impls <= FUSED:
        state.skipped("fused_attention", f"the model already uses attn_implementation={sorted(impls)[0]!r}")
        return
    setter = getattr(module, "set_attn_implementation", None)
    if callable(setter):
        setter("sdpa")
        how = f"{type(module).__name__}.set_attn_implementation('sdpa')"
    else:
        for c in configs:
            c._attn_implementation = "sdpa"
        how = "config._attn_implementation = 'sdpa' (read at forward time by transformers >= 4.48)"
    state.applied("fused_attention", f"{how}; was {sorted(str(i) for i in impls)}")


def _model_classes(module: Any) -> list[type]:
    """Return the classes defining ``forward`` for the model's modules, outside torch, each once."""
    seen: list[type] = []
    for m in module.modules():
        owner = next((c for c in type(m).__mro__ if "forward" in c.__dict__), None)
        if owner is None or owner.__module__.split(".")[0] == "torch" or owner in seen:
            continue
        seen.append(owner)
    return seen


def rewrite_class(cls: type) -> tuple[bool, str | None]:
    """Rewrite ``cls.forward`` as the diff would and bind it to the class (undone by ``runtime.uninstall``).

    Returns:
        ``(True, None)`` when rewritten; ``(False, reason)`` when hand-written attention was found
        but refused (or cannot be rebuilt); ``(False, None)`` when the forward has none.
    """
    import inspect
    import textwrap

    import torch

    from advisor.fixes import attention
    from advisor.fixes.runtime_torch import patch

    fwd = cls.__dict__.get("forward")
    if not inspect.isfunction(fwd):
        return False, None
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return False, None  # no source (built in a REPL or from bytecode): nothing to read
    g = fwd.__globals__
    if g.get("F") is torch.nn.functional:
        callee = "F.scaled_dot_product_attention"
    elif g.get("torch") is torch:
        callee = attention.SDPA
    else:
        callee = "__advisor_sdpa__"
    try:
        result = attention.rewrite_source(source, callee)
    except Exception as exc:  # noqa: BLE001 - a source libcst cannot parse is left alone
        return False, f"{cls.__qualname__}: cannot parse its source ({type(exc).__name__})"
    if result.refused:
        return False, "; ".join(result.refused)
    if not result.changed:
        return False, None
    if fwd.__code__.co_freevars and set(fwd.__code__.co_freevars) - {"__class__"}:
        return False, f"{cls.__qualname__}.forward is a closure; only the diff can change it"
    new_src = attention.forward_source(result.source, cls.__name__)
    if new_src.lstrip().startswith("@"):
        return False, f"{cls.__qualname__}.forward is decorated; only the diff can change it"
    factory = (
        "def __advisor_make__(__class__, __advisor_sdpa__):\n"
        + textwrap.indent(new_src, "    ")
        + "    return forward\n"
    )
    local: dict[str, Any] = {}
    # NOTE: module globals, separate locals: the rewritten forward reads the module's names as
    # the original does, and nothing new lands in the module.
    exec(compile(factory, f"<advisor fused_attention: {cls.__qualname__}.forward>", "exec"), g, local)  # noqa: S102
    new = local["__advisor_make__"](cls, torch.nn.functional.scaled_dot_product_attention)
    new.__defaults__, new.__kwdefaults__ = fwd.__defaults__, fwd.__kwdefaults__
    new.__qualname__ = fwd.__qualname__
    new.__module__ = fwd.__module__
    patch(cls, "forward", new)
    return True, None


@dataclass(frozen=True)
class RewriteAttention:
    """The diff's edit (:class:`~advisor.fixes.diff_plan.SourceEdit`): :mod:`advisor.fixes.attention`, as at run time."""

    name = "fused_attention"

    def apply(self, module: Any, scope: EditScope) -> tuple[Any, list[str]]:
        """Rewrite hand-written attention in the script's classes; say what is left as written."""
        from advisor.fixes.attention import rewrite_module

        new, rw = rewrite_module(module)
        notes = [f"fused_attention: {why}; left as written" for why in rw.refused]
        if not rw.changed and not rw.loads:
            notes.append(
                "fused_attention: no class forward with q @ k.transpose(-2, -1) -> softmax -> @ v found in this "
                "script; call torch.nn.functional.scaled_dot_product_attention(q, k, v, ...) where attention is "
                "computed (Hugging Face: from_pretrained(..., attn_implementation=\"sdpa\"))"
            )
        return new, notes


def plan_diff(plan: DiffPlan, params: dict[str, Any]) -> None:
    """Rewrite hand-written attention in the script's classes; ``attn_implementation="sdpa"`` on loads."""
    plan.edits.append(RewriteAttention())


FIX = Fix(
    id="fused_attention",
    safety=UNSAFE,
    description=(
        "replace hand-written attention (q @ k.T, softmax, @ v) with "
        "torch.nn.functional.scaled_dot_product_attention (Hugging Face models: attn_implementation='sdpa')"
    ),
    applies_when="the trace shows matmul -> softmax -> matmul on one call path, once per attention layer",
    measured=(
        "one run with the model's attention forwards rewritten at run time by the same transformation "
        "that makes the diff, against the interleaved baseline runs; loss parity within 10%"
    ),
    loss_rtol=LOSS_RTOL_ATTENTION,
    install=install,
    on_model=on_model,
    plan_diff=plan_diff,
)
