"""Independent reference computations over raw trace JSON (plain json + arithmetic).

These deliberately share no code with advisor.trace / advisor.metrics, so the tests compare
two implementations.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path


def events(path: Path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)["traceEvents"]


def steps(evs: list[dict]) -> list[tuple[int, float, float]]:
    """(number, start, end) of CPU-side ProfilerStep spans, sorted."""
    out = []
    for e in evs:
        m = re.fullmatch(r"ProfilerStep#(\d+)", e.get("name", ""))
        if m and e.get("ph") == "X" and e.get("cat") != "gpu_user_annotation":
            out.append((int(m.group(1)), float(e["ts"]), float(e["ts"]) + float(e["dur"])))
    return sorted(out, key=lambda s: s[1])


def union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [(s, e) for s, e in merged]


def length(intervals: list[tuple[float, float]]) -> float:
    return sum(e - s for s, e in union(intervals))


def clip(intervals: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    return [(max(s, lo), min(e, hi)) for s, e in intervals if min(e, hi) > max(s, lo)]


def subtract(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Length of union(a) minus union(b), by brute force over boundaries."""
    ua, ub = union(a), union(b)
    total = 0.0
    for s, e in ua:
        covered = sum(max(0.0, min(e, be) - max(s, bs)) for bs, be in ub)
        total += (e - s) - covered
    return total


def spans(evs: list[dict], pred) -> list[tuple[float, float]]:
    return [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in evs if e.get("ph") == "X" and pred(e)]


GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}


def is_gpu(e: dict) -> bool:
    return e.get("cat") in GPU_CATS
