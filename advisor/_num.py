"""Number helpers every stage shares: one "finite float or None", one median, one way to write milliseconds.

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


def ms_text(v: float) -> str:
    """Milliseconds with sensible precision (``0.042 ms``, ``0.13 ms``, ``12.4 ms``, ``1,234 ms``).

    One writer for the report's tables and the rules' messages: a message that wrote ``{x:.1f}``
    said "0.0 ms per step in DataLoader.__next__" beside a table's 0.13 ms.
    """
    if abs(v) >= 1000:
        return f"{v:,.0f} ms"
    if abs(v) >= 10:
        return f"{v:.1f} ms"
    if abs(v) >= 0.1:
        return f"{v:.2f} ms"
    return f"{v:.3f} ms"
