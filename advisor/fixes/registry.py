"""Look-ups over the fix catalog, for the parent side (no torch).

The fixes themselves live in :mod:`advisor.fixes.catalog` (one module per fix, each a
:class:`~advisor.fixes.fix.Fix`); this module keeps the short names the rest of the fix stage
and its callers use: :func:`get`, :func:`all_fixes`, :func:`fix_ids`, :func:`safety_of`, and the
ladders.
"""

from __future__ import annotations

from advisor.fixes import catalog
from advisor.fixes.catalog.dataloader_workers import worker_ladder
from advisor.fixes.catalog.larger_batch import BATCH_FACTORS, MAX_BATCH, batch_ladder
from advisor.fixes.fix import (
    LOSS_RTOL_BATCH,
    LOSS_RTOL_PRECISION,
    LOSS_RTOL_SAFE,
    SAFE,
    UNSAFE,
    Fix,
    FixContext,
    Safety,
    available_cores,
    context_from_capture,
)

FixSpec = Fix
"""The former name of :class:`~advisor.fixes.fix.Fix`."""

__all__ = [
    "BATCH_FACTORS", "LOSS_RTOL_BATCH", "LOSS_RTOL_PRECISION", "LOSS_RTOL_SAFE", "MAX_BATCH", "SAFE",
    "UNSAFE", "Fix", "FixContext", "FixSpec", "Safety", "all_fixes", "available_cores", "batch_ladder",
    "context_from_capture", "fix_ids", "get", "safety_of", "worker_ladder",
]


def get(fix_id: str) -> Fix:
    """Return a catalog fix; KeyError for an unknown id."""
    return catalog.get(fix_id)


def all_fixes() -> tuple[Fix, ...]:
    """Every fix, in catalog order."""
    return tuple(catalog.get_fixes().values())


def fix_ids() -> tuple[str, ...]:
    """Every fix id, in catalog order."""
    return catalog.fix_ids()


def safety_of(fix_id: str) -> Safety:
    """:class:`~advisor.fixes.fix.Safety` of a catalog fix."""
    return get(fix_id).safety
