"""The fix catalog: one module per fix, collected here without importing torch.

Each module of this package defines ``FIX``, a :class:`~advisor.fixes.fix.Fix` holding the
fix's metadata, applicability check, variants, run-time install and diff plan (or manual
note). :func:`get_fixes` collects every module of the package: those in :data:`MODULES` first,
in that order, which is also the order the runtime applies them in (workers before the fixes
that need workers, channels_last before compile), then any other in name order. Adding a fix
means adding its module here (listed in :data:`MODULES` only when its run-time place matters),
its test, and a rule that suggests it.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
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
"""Catalog modules whose place in the run-time order is fixed, in the order fixes are listed and applied.

A module of this package that is not listed follows them, in name order.
"""


def module_names() -> tuple[str, ...]:
    """Every fix module of this package: :data:`MODULES` in order, then the others by name.

    Raises:
        ValueError: :data:`MODULES` names a module the package does not have.
    """
    found = {m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")}
    missing = [name for name in MODULES if name not in found]
    if missing:
        raise ValueError(f"advisor.fixes.catalog.MODULES names no module: {', '.join(missing)}")
    return (*MODULES, *sorted(found - set(MODULES)))


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
    """Every fix in the catalog, by id, in :func:`module_names` order (torch is not imported)."""
    fixes = []
    for name in module_names():
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
