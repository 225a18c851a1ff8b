"""A captured trace cut to the steps its capture counted: the step the script ended in is left out.

When a script ends while the profiled window is open (its loop ran out of data before the
window's last step), torch.profiler closes the ``ProfilerStep`` in progress at the script's end:
a span holding the loop's tail (the DataLoader's ``StopIteration``, a print), not a step. Counted,
it made "6 profiled steps" of 5 whole ones, a 3.5 ms step beside 100-130 ms ones, and per-step
counts of 5/6 (a ``collate_fn`` called 0.83 times a step). A window that ends after the budget
probe's step has the same tail. The capture knows how many steps the window held
(``RunCapture.profiled_steps``): the spans after them are dropped here, and their events stay
outside every window, like the events before the first step.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from advisor.metrics.events import STEP_RE, name_mask
from advisor.trace.load import Trace


def whole_steps(trace: Trace, steps: int) -> Trace:
    """Return ``trace`` without the ``ProfilerStep`` spans after its first ``steps`` (by start time).

    Every span of a dropped step number goes, its GPU annotation too. A trace with no more step
    numbers than ``steps``, or ``steps`` under 1 (unknown), is returned as it is.
    """
    ev = trace.events
    if steps < 1 or ev.empty:
        return trace
    is_step = name_mask(ev["name"], lambda n: STEP_RE.match(n) is not None)
    if int(is_step.sum()) <= steps:
        return trace
    rows = ev.loc[is_step, ["name", "ts"]]
    digits = rows["name"].astype(str).str.slice(len("ProfilerStep#"))
    if (digits.str.len() > 18).any():
        return trace  # past int64: find_windows says the trace is corrupt
    numbers = digits.astype(np.int64).to_numpy()
    first_ts: dict[int, float] = {}
    for number, ts in zip(numbers.tolist(), rows["ts"].to_numpy().tolist(), strict=True):
        first_ts[number] = min(ts, first_ts.get(number, ts))
    if len(first_ts) <= steps:
        return trace
    dropped = set(sorted(first_ts, key=lambda n: (first_ts[n], n))[steps:])
    drop = np.zeros(len(ev), dtype=bool)
    drop[np.flatnonzero(is_step)[np.isin(numbers, list(dropped))]] = True
    return dataclasses.replace(trace, events=ev.loc[~drop].reset_index(drop=True))
