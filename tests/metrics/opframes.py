"""Events tables built by hand for the metrics' unit tests: one thread, complete events only."""

from __future__ import annotations

import pandas as pd


def events_frame(rows: list[tuple[str, str, float, float]], seq: list[int] | None = None) -> pd.DataFrame:
    """Events from (name, cat, ts, dur) rows, all on one thread (``seq``: autograd sequence numbers)."""
    ev = pd.DataFrame({
        "name": pd.Categorical([r[0] for r in rows]),
        "cat": pd.Categorical([r[1] for r in rows]),
        "ph": pd.Categorical(["X"] * len(rows)),
        "pid": pd.Categorical(["1"] * len(rows)),
        "tid": pd.Categorical(["1"] * len(rows)),
        "ts": [float(r[2]) for r in rows],
        "dur": [float(r[3]) for r in rows],
    })
    ev["end"] = ev["ts"] + ev["dur"]
    ev["seq_nr"] = seq if seq is not None else [-1] * len(rows)
    return ev
