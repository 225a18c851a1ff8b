"""The fix catalog: one module per fix, collected here without importing torch.

Each module of this package defines ``FIX``, a :class:`~advisor.fixes.fix.Fix` holding the
fix's metadata, applicability check, variants, run-time install and diff plan (or manual
note). :func:`get_fixes` collects them in :data:`MODULES` order, which is also the order the
runtime applies them in (workers before the fixes that need workers, channels_last before
compile). Adding a fix means adding its module here, its test, and a rule that suggests it.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterable

from advisor.fixes.fix import Fix

MODULES: tuple[str, ...] = (
    "dataloader_workers",
    "pin_memory",
    "persistent_workers",
    "prefetch_factor",
    "non_blocking_copy",
    "cpu_threads",
    "bf16_autocast",
    "fp16_amp",
    "script_args",
    "batch_fusion",
    "fused_attention",  # before compile: the rewritten forward is what gets traced
    "channels_last",
    "torch_compile",
    "cudnn_benchmark",
    "tf32",
    "fused_optimizer",
    "larger_batch",
    "inference_mode",
    "host_reads",
    "activation_checkpointing",
    "fit_accumulation",
)
"""Catalog modules, in the order fixes are listed and applied."""


def collect(fixes: Iterable[Fix]) -> dict[str, Fix]:
    """Index fixes by id, refusing a duplicate id or a reference to an unknown fix.

    Raises:
        ValueError: Two fixes share an id, or a fix requires/conflicts with an unknown id.
    """
    out: dict[str, Fix] = {}
    for fix in fixes:
        if fix.id in out:
            raise ValueError(f"fix {fix.id!r} is already registered")
        out[fix.id] = fix
    for fix in out.values():
        for other in (*([fix.requires] if fix.requires else []), *fix.conflicts):
            if other not in out:
                raise ValueError(f"fix {fix.id!r} names unknown fix {other!r}")
    return out


@functools.cache
def get_fixes() -> dict[str, Fix]:
    """Every fix in the catalog, by id, in :data:`MODULES` order (torch is not imported)."""
    fixes = []
    for name in MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        fix = module.FIX
        if fix.id != name:
            raise ValueError(f"{module.__name__} defines fix {fix.id!r}; a module is named by its fix id")
        fixes.append(fix)
    return collect(fixes)


def get(fix_id: str) -> Fix:
    """Return one fix; KeyError for an unknown id."""
    return get_fixes()[fix_id]


def all_fixes() -> tuple[Fix, ...]:
    """Every fix, in catalog order."""
    return tuple(get_fixes().values())


def fix_ids() -> tuple[str, ...]:
    """Every fix id, in catalog order."""
    return tuple(get_fixes())
