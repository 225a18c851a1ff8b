"""Dump the full ``compute_metrics`` output of traces as canonical JSON, to compare two versions.

An optimisation of the analysis must not change any result; this writes every summary value,
the steps and ranks tables, locations, notes and the extra tables exactly (floats by ``repr``),
so ``diff`` of two dumps (before/after a change) shows any difference.

    PYTHONPATH=$PWD python benchmarks/metrics_fingerprint.py OUT.json TRACE [TRACE ...]
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from advisor.metrics.compute import compute_metrics
from advisor.trace.load import load_traces


def canonical(value: Any) -> Any:
    """A JSON value that keeps every float exactly and names NaN/inf as strings."""
    if isinstance(value, pd.DataFrame):
        return {
            "columns": [str(c) for c in value.columns],
            "dtypes": [str(d) for d in value.dtypes],
            "index": canonical(list(value.index)),
            "rows": canonical(value.to_numpy(dtype=object).tolist()),
        }
    if isinstance(value, pd.Series):
        return {"dtype": str(value.dtype), "index": canonical(list(value.index)), "values": canonical(value.tolist())}
    if isinstance(value, np.ndarray):
        return canonical(value.tolist())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, np.generic):
        return canonical(value.item())
    if isinstance(value, float):
        return repr(value) if not math.isfinite(value) else value
    if value is pd.NA or value is pd.NaT:
        return repr(value)
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    return repr(value)


def main(argv: list[str]) -> int:
    """Write one canonical dump per trace argument into the JSON file ``argv[0]``."""
    out: dict[str, Any] = {}
    for path in argv[1:]:
        start = time.perf_counter()
        metrics = compute_metrics(load_traces(path), source=str(path))
        print(f"{path}: {time.perf_counter() - start:.2f} s", file=sys.stderr)
        out[path] = canonical(metrics)
    Path(argv[0]).write_text(json.dumps(out, sort_keys=True, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
