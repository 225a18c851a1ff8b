"""Values no profiler writes: a trace holding them is bad input (exit 2), never a report.

A trace with negative durations, timestamps from beyond any clock, NaN, or no events at all
was analysed as if it were real: "Step time -169.4 ms", "0.000 ms", "none found" with exit 0
(issue #30). :func:`check_values` refuses such a trace with one line naming the file and what
is wrong, so the user re-records it instead of acting on a report of nothing.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from advisor.errors import TraceError

# NaN and Infinity as Python's json writes them: numbers JSON has no words for.
_NOT_A_NUMBER = re.compile(rb"[:\[,]\s*-?(NaN|Infinity)\s*[,}\]]")

MAX_TIMESTAMP_US = 1e17
"""Later than any clock a profiler reads: Kineto writes microseconds since the epoch (about
1.8e15 in 2026) or since the process started; 1e17 us is the year 5138."""
MAX_DURATION_US = 1e12
"""About 11.6 days: no one event of a profiled step lasts longer."""


def check_values(path: Path, events: pd.DataFrame) -> None:
    """Raise TraceError when ``events`` holds no event or a time no profiler can have written.

    Args:
        path: The trace file (named in the message).
        events: Its decoded events (``ts``, ``dur`` in microseconds).
    """
    if len(events) == 0:
        raise TraceError(f"{path} holds no trace events; re-record it (torch.profiler writes one per operator)")
    ts = events["ts"].to_numpy(dtype=np.float64, na_value=np.nan)
    dur = events["dur"].to_numpy(dtype=np.float64, na_value=np.nan)
    problem = None
    if not np.isfinite(ts).all():
        problem = "a timestamp that is not a finite number"
    elif not np.isfinite(dur).all():
        problem = "a duration that is not a finite number"
    elif (dur < 0).any():
        problem = f"a negative duration ({dur.min():g} us)"
    elif (np.abs(ts) > MAX_TIMESTAMP_US).any():
        problem = f"a timestamp no clock reads ({np.abs(ts).max():.3g} us)"
    elif (dur > MAX_DURATION_US).any():
        problem = f"an event lasting {dur.max():.3g} us (over 11 days)"
    if problem is not None:
        raise TraceError(f"{path} holds {problem}: it was not written by a profiler as it is; re-record it")


def not_a_number(path: Path, raw: Any) -> str | None:
    """Return the message for a trace that is invalid JSON because it holds NaN or Infinity, else None.

    The parser's own message ("the file may be truncated") sent users after a copy problem.
    """
    found = _NOT_A_NUMBER.search(raw)  # bytes, bytearray or mmap: searched in place, never copied
    if found is None:
        return None
    return (f"{path} holds {found.group(1).decode()} as a number, which JSON does not allow and no profiler "
            "writes; re-record it")
