"""What holds memory at the peak, by the user's function (its def line) and module.

From the profiler's ``[memory]`` events (recorded with ``profile_memory``: each allocation and
free with its address and size), the peak is the moment the device's allocated total is
highest inside the profiled steps; the tensors live then are the allocations made before it
whose address was not freed in between. Each is attributed to the user's function that was
running when it was allocated (the resolver the findings' locations use; the profiler's Python
stacks name a function by its def line, so that is the line given) and to the block around it
(the ``nn.Module`` frame just inside the model), so "the training loop holds 67% of the peak at
backward" or "block 3's activations hold 60%" reads off the table, and the checkpointing and
accumulation advice can point at code. Allocations made in a block's forward and still live at
the peak are its activations: what activation checkpointing would free; their share of the
peak is ``peak_activation_frac``, and the top lines become the ``memory`` source locations the
memory findings (ME001, ME002) name.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from advisor.metrics.events import name_mask, take
from advisor.metrics.frames import UserPredicate
from advisor.metrics.model import SourceLocation
from advisor.metrics.modules import MODULE_PREFIX
from advisor.metrics.userframes import _Resolver

if TYPE_CHECKING:
    from advisor.metrics.steps import TraceAnalysis

TOP_LINES = 10
MAX_QUERIES = 20_000
"""Live allocations resolved to a line at most (a sample beyond, scaled; as the locations do)."""
COLUMNS = ["file", "line", "function", "module", "modules", "mib", "share", "tensors"]


def _peak_rows(analysis: TraceAnalysis, device_type: int) -> tuple[pd.DataFrame, float] | None:
    """Return the device's memory events and the time of its peak inside the profiled steps."""
    ev, cls = analysis.trace.events, analysis.cls
    if not cls.memory.any() or "mem_addr" not in ev.columns:
        return None
    mem = ev.loc[cls.memory, ["ts", "tid", "mem_bytes", "mem_addr", "total_allocated", "device_type"]]
    mem = mem[(mem["device_type"] == device_type) & (mem["mem_addr"] >= 0)].sort_values("ts", kind="stable")
    windows = analysis.windows
    inside = mem[(mem["ts"] >= windows.start.min()) & (mem["ts"] <= windows.end.max())] if len(windows) else mem
    if inside.empty:
        return None
    if (inside["total_allocated"] >= 0).any():
        t_peak = float(inside.loc[inside["total_allocated"].idxmax(), "ts"])
    else:
        running = mem["mem_bytes"].cumsum()
        t_peak = float(mem.loc[running[inside.index].idxmax(), "ts"])
    return mem, t_peak


def live_at_peak(mem: pd.DataFrame, t_peak: float) -> pd.DataFrame:
    """Return the allocations made by ``t_peak`` whose address was not freed before it (rows of ``mem``)."""
    by_addr = mem.sort_values(["mem_addr", "ts"], kind="stable")
    same_next = by_addr["mem_addr"].shift(-1) == by_addr["mem_addr"]
    next_ts = by_addr["ts"].shift(-1).where(same_next & (by_addr["mem_bytes"].shift(-1) < 0), np.inf)
    alloc = (by_addr["mem_bytes"] > 0) & (by_addr["ts"] <= t_peak) & (next_ts > t_peak)
    return by_addr[alloc]


def _modules_at(analysis: TraceAnalysis, tids: np.ndarray, ts: np.ndarray) -> list[str]:
    """Return the block running at each (thread, time): the module frame just inside the outermost, or ""."""
    ev, cls = analysis.trace.events, analysis.cls
    rows = np.flatnonzero(cls.python & name_mask(ev["name"], lambda n: n.startswith(MODULE_PREFIX)))
    out = [""] * len(ts)
    if not len(rows):
        return out
    names = [str(n)[len(MODULE_PREFIX):] for n in take(ev["name"], rows)]
    f_tid = ev["tid"].cat.codes.to_numpy()[rows]
    f_ts, f_end = ev["ts"].to_numpy()[rows], ev["end"].to_numpy()[rows]
    for i, (t, x) in enumerate(zip(tids, ts, strict=True)):
        # NOTE: frames covering x nest; in start order the first is the model, the second the
        # block of it that allocated (a checkpointing unit), deeper ones its layers.
        cover = np.flatnonzero((f_tid == t) & (f_ts <= x) & (f_end >= x))
        if len(cover):
            nested = cover[np.argsort(f_ts[cover], kind="stable")]
            out[i] = names[nested[min(1, len(nested) - 1)]]
    return out


@dataclass(frozen=True)
class MemoryAtPeak:
    """What holds the peak: the table by line (:data:`COLUMNS`) and the activations' share of it.

    Attributes:
        table: Bytes live at the peak by the user's line and block, largest first (:data:`TOP_LINES` rows).
        activation_frac: Share of those bytes allocated inside a module's forward (activations
            kept for backward: what checkpointing frees); None without memory events.
    """

    table: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=COLUMNS))
    activation_frac: float | None = None


def memory_by_line(analysis: TraceAnalysis, is_user: UserPredicate) -> MemoryAtPeak:
    """Bytes live at the peak, grouped by the user's line (and module) that allocated them.

    Empty when the trace has no memory events with addresses, or no user frame resolves (the
    resolver is built only for a trace that has the events).
    """
    device = 1 if analysis.cls.has_gpu else 0  # Kineto's Device Type: 0 CPU, 1 CUDA
    found = _peak_rows(analysis, device)
    if found is None:
        return MemoryAtPeak()
    resolver = _Resolver(analysis, is_user)
    if not resolver.ok:
        return MemoryAtPeak()
    live = live_at_peak(*found)
    if live.empty:
        return MemoryAtPeak()
    total = float(live["mem_bytes"].sum())
    pick = np.arange(len(live))
    scale = 1.0
    if len(live) > MAX_QUERIES:
        pick = np.linspace(0, len(live) - 1, MAX_QUERIES).astype(np.int64)
        scale = len(live) / len(pick)
    tids = live["tid"].cat.codes.to_numpy()[pick]
    ts, nbytes = live["ts"].to_numpy()[pick], live["mem_bytes"].to_numpy()[pick]
    modules = _modules_at(analysis, tids, ts)
    groups: dict[tuple[str, int, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    by_module: dict[tuple[str, int, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for t, x, b, module in zip(tids, ts, nbytes, modules, strict=True):
        frame = resolver.resolve(int(t), float(x))
        key = frame if frame is not None and is_user(frame[0]) else ("(not the user's code)", 0, "")
        groups[key][0] += float(b) * scale
        groups[key][1] += scale
        if module:
            by_module[key][module] += float(b) * scale
    rows = [
        {"file": f, "line": line, "function": func, **_top_module(by_module.get((f, line, func), {})),
         "mib": b / 2**20, "share": b / total, "tensors": round(n)}
        for (f, line, func), (b, n) in groups.items()
    ]
    in_blocks = sum(sum(m.values()) for m in by_module.values())
    table = pd.DataFrame(rows, columns=COLUMNS).sort_values("mib", ascending=False).head(TOP_LINES)
    return MemoryAtPeak(table, in_blocks / total if total > 0 else None)


def peak_locations(rows: list[dict[str, Any]]) -> tuple[SourceLocation, ...]:
    """Return the memory table's user lines as ``memory`` locations, most of the peak first.

    The function names the block that allocated there (``forward, block 1 (Wide)``) so a
    finding's ``{locations}`` says which block to checkpoint; ``count`` is the line's share of
    the peak, which orders them (they have no time).
    """
    out = []
    for r in rows:
        if not r.get("file") or not (r.get("line") or r.get("function")):
            continue  # NOTE: line 0 with a function: a frame running since before the window
        function = str(r.get("function") or "")
        if r.get("module"):
            function = f"{function}, block {r['module']}" if function else f"block {r['module']}"
        out.append(SourceLocation("memory", str(r["file"]), int(r["line"]), function, count=float(r.get("share") or 0.0)))
    return tuple(out)


def _top_module(bytes_by_module: dict[str, float]) -> dict[str, object]:
    """Name the module holding most of a line's bytes (``module``) and count the modules holding some (``modules``)."""
    if not bytes_by_module:
        return {"module": "", "modules": 0}
    return {"module": max(bytes_by_module, key=bytes_by_module.__getitem__), "modules": len(bytes_by_module)}
