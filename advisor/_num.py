"""Number helpers every stage shares: one "finite float or None" and one median.

Values in saved files and tables may be None, NaN, infinities, numpy scalars or strings from a
newer writer; these two functions are the one place that decides what counts as a number.
"""

from __future__ import annotations

import math
import numbers
import statistics
from collections.abc import Iterable
from typing import Any


def finite(value: Any) -> float | None:
    """Return ``value`` as a float when it is a finite real number, else None.

    None, NaN, infinities, booleans and strings give None; numpy scalars count as numbers.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def median(values: Iterable[Any]) -> float | None:
    """Return the median of the finite numbers among ``values`` (None, NaN... are skipped); None if there are none."""
    kept = [f for f in map(finite, values) if f is not None]
    return statistics.median(kept) if kept else None
