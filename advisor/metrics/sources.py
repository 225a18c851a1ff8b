"""Point at the user's code: ``file:line`` for syncs, host-to-device copies and data loading.

Three sources, best first:

* call-site ranges the capture's hooks put in the trace (``advisor.call@<line>@<func>@<file>``,
  see :mod:`advisor.capture.usercode`): the user's line that called ``.item()``, ``.to()``,
  ``.cpu()``, ``torch.cuda.synchronize()``..., read from the caller's frame while it ran, so a
  finding names the call itself rather than the enclosing function's ``def`` line;
* the profiler's Python stacks in the trace. New traces (``with_stack`` on torch >= 2) hold
  ``python_function`` events that nest by time on the thread that ran them, linked by
  ``Python id`` / ``Python parent id``; an event's innermost enclosing frame is found with a
  ``searchsorted`` on the thread's frames, then the parent chain is walked up to the first frame
  in the user's code. The line of a ``python_function`` frame is where the frame was when it
  was entered (the ``def`` line for functions called while profiling); a frame already running
  when the profiled steps began (a module-level training loop) keeps its function with line 0,
  unknown, since its recorded line is wherever it stood then. Old traces carry a
  ``Call stack`` string on each operator (innermost frame first, with the current line).
* the cProfile output (``profile.pstats``; read with :mod:`pstats`, which uses marshal, never
  pickle) for data-loading hot spots: the user's functions reached from
  ``torch/utils/data`` (a Dataset's ``__getitem__`` and what it calls), by cumulative time.

Frames in torch, site-packages, the standard library and advisor itself are skipped. What is the
user's code is decided by the run's recorded policy (``RunCapture.user_code``); only traces
without a capture fall back to :func:`looks_like_user_file`, a name heuristic. On a trace with no
GPU activity no host-to-device copy is reported: ``.to(device)`` copies nothing there. The
policy and the resolvers live in :mod:`advisor.metrics.userframes`; this module aggregates.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from advisor.metrics.events import take
from advisor.metrics.intervals import Windows, clip_to_steps, merge, point_step
from advisor.metrics.model import SourceLocation
from advisor.metrics.steps import top_level_ops
from advisor.metrics.userframes import (
    UserPredicate,
    _PythonStacks,
    _Resolver,
    _tids,
    first_user_frame,
    looks_like_user_file,
    parse_frame,
    user_predicate,
)

if TYPE_CHECKING:
    from advisor.capture.model import RunCapture
    from advisor.metrics.steps import TraceAnalysis

MAX_QUERIES = 5000  # per kind; beyond that, an even sample is resolved and counts scaled


def _aggregate(
    kind: str,
    resolver: Any,
    tids: np.ndarray,
    ts: np.ndarray,
    cost_us: np.ndarray,
    n_steps: int,
) -> list[SourceLocation]:
    if len(ts) == 0 or not resolver.ok:
        return []
    scale = 1.0
    pick = np.arange(len(ts))
    if len(ts) > MAX_QUERIES:
        pick = np.linspace(0, len(ts) - 1, MAX_QUERIES).astype(np.int64)
        scale = len(ts) / len(pick)
    counts: dict[tuple[str, int, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for i in pick:
        frame = resolver.resolve(int(tids[i]), float(ts[i]))
        if frame is None:
            continue
        acc = counts[frame]
        acc[0] += scale
        acc[1] += float(cost_us[i]) * scale
    per = max(n_steps, 1)
    return [
        SourceLocation(kind=kind, file=f, line=line, function=func, count=c / per, time_ms=t / per / 1e3, source="trace")
        for (f, line, func), (c, t) in counts.items()
    ]


def _in_step(analysis: TraceAnalysis, mask: np.ndarray) -> np.ndarray:
    rows = np.flatnonzero(mask)  # only the masked rows are looked up
    out = np.zeros(len(mask), dtype=bool)
    out[rows] = point_step(analysis.trace.events["ts"].to_numpy()[rows], analysis.windows) >= 0
    return out


def _trace_locations(analysis: TraceAnalysis, is_user: UserPredicate) -> list[SourceLocation]:
    ev = analysis.trace.events
    cls = analysis.cls
    resolver = _Resolver(analysis, is_user)
    if not resolver.ok:
        return []
    n = len(analysis.windows)
    tid = _tids(ev)
    ts = ev["ts"].to_numpy()
    dur = ev["dur"].to_numpy()
    out: list[SourceLocation] = []
    # .item() / _local_scalar_dense: one location per call (outermost of the two)
    item_mask = _in_step(analysis, cls.item)
    item_rows = np.flatnonzero(item_mask)
    if len(item_rows):
        names = take(ev["name"], item_rows)
        has_item = (names == "aten::item").any()
        keep = names == ("aten::item" if has_item else "aten::_local_scalar_dense")
        item_rows = item_rows[keep]
        out += _aggregate("item", resolver, tid[item_rows], ts[item_rows], dur[item_rows], n)
    # sync calls not already inside an item() call
    sync_rows = np.flatnonzero(_in_step(analysis, cls.sync_call))
    if len(sync_rows) and len(item_rows):
        one = Windows(np.array([0]), np.array([-np.inf]), np.array([np.inf]))
        merged = merge(clip_to_steps(ts[item_rows], ts[item_rows] + dur[item_rows], one))
        pos = np.searchsorted(merged.start, ts[sync_rows], side="right") - 1
        inside = (pos >= 0) & (ts[sync_rows] < merged.end[np.clip(pos, 0, None)])
        sync_rows = sync_rows[~inside]
    out += _aggregate("sync", resolver, tid[sync_rows], ts[sync_rows], dur[sync_rows], n)
    # host-to-device copies: the runtime call that launched each HtoD memcpy
    if cls.has_gpu:
        h_rows = np.flatnonzero(cls.h2d)
        corr = ev["correlation"].to_numpy()
        rt_rows = np.flatnonzero(cls.runtime & (corr >= 0))
        keys, first = np.unique(corr[rt_rows], return_index=True)
        if len(keys) and len(h_rows):
            c = corr[h_rows]
            p = np.clip(np.searchsorted(keys, c), 0, len(keys) - 1)
            found = keys[p] == c
            launch = rt_rows[first[p[found]]]
            cost = dur[h_rows[found]]
            keep = point_step(ts[launch], analysis.windows) >= 0
            out += _aggregate("h2d", resolver, tid[launch[keep]], ts[launch[keep]], cost[keep], n)
    # NOTE: without GPU activity `.to(device)` copies nothing: no host-to-device location.
    tiny = analysis.tiny
    if tiny is not None and len(tiny.members):
        m = tiny.members
        out += _aggregate("tiny_ops", resolver, tid[m], ts[m], tiny.member_us, n)
    out += _dataloader_frames(analysis, resolver.stacks, is_user)
    out += _assembly_frames(analysis, is_user)
    return out


def _assembly_frames(analysis: TraceAnalysis, is_user: UserPredicate) -> list[SourceLocation]:
    """Locate the user's batch-assembling functions (:mod:`advisor.metrics.input_work`), by time per step.

    Every qualifying call, not only the outermost the breakdown counts: a generator that wraps
    the one doing the work would otherwise be the only line named.
    """
    if analysis.assembly_calls is None:
        return []
    ev = analysis.trace.events
    rows = np.flatnonzero(_in_step(analysis, analysis.assembly_calls))
    totals: dict[tuple[str, int, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    durs = ev["dur"].to_numpy()
    for row, name in zip(rows, take(ev["name"], rows), strict=True):
        frame = parse_frame(str(name))
        if frame and is_user(frame[0]):
            totals[frame][0] += 1.0
            totals[frame][1] += float(durs[row])
    return _ranked_loading(totals, len(analysis.windows))


def _ranked_loading(totals: dict[tuple[str, int, str], list[float]], n_steps: int) -> list[SourceLocation]:
    """Return the five frames with the most time as data-loading locations, per step (count, time)."""
    per = max(n_steps, 1)
    return [
        SourceLocation("data_loading", f, line, func, count=c / per, time_ms=t / per / 1e3, source="trace")
        for (f, line, func), (c, t) in sorted(totals.items(), key=lambda kv: -kv[1][1])[:5]
    ]


def _dataloader_frames(analysis: TraceAnalysis, resolver: Any, is_user: UserPredicate) -> list[SourceLocation]:
    """User functions running inside DataLoader ``__next__`` ranges, by time per step."""
    ev = analysis.trace.events
    cls = analysis.cls
    dl = np.flatnonzero(_in_step(analysis, cls.dataloader))
    if len(dl) == 0:
        return []
    ts = ev["ts"].to_numpy()
    end = ev["end"].to_numpy()
    one = Windows(np.array([0]), np.array([-np.inf]), np.array([np.inf]))
    ranges = merge(clip_to_steps(ts[dl], end[dl], one))
    n = len(analysis.windows)
    if isinstance(resolver, _PythonStacks):
        rows = np.flatnonzero(cls.python)
    else:
        rows = np.flatnonzero(cls.cpu_op)
    pos = np.searchsorted(ranges.start, ts[rows], side="right") - 1
    inside = (pos >= 0) & (ts[rows] < ranges.end[np.clip(pos, 0, None)])
    rows = rows[inside]
    if len(rows) == 0:
        return []
    totals: dict[tuple[str, int, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    durs = ev["dur"].to_numpy()[rows]
    if isinstance(resolver, _PythonStacks):
        # every user frame running inside the loader ranges, grouped by distinct frame name
        column, parse = ev["name"], parse_frame
    else:
        top = top_level_ops(ev, cls)
        is_top = np.zeros(len(ev), dtype=bool)  # a row lookup: np.isin would sort both arrays
        is_top[top] = True
        keep = is_top[rows]
        rows, durs = rows[keep], durs[keep]
        column, parse = ev["call_stack"], lambda stack: first_user_frame(stack.split(";"), is_user)
    codes = column.cat.codes.to_numpy()[rows]
    ok = codes >= 0
    count = np.bincount(codes[ok], minlength=len(column.cat.categories))
    time_us = np.bincount(codes[ok], weights=durs[ok], minlength=len(column.cat.categories))
    cats = column.cat.categories
    for code in np.flatnonzero(count):
        frame = parse(str(cats[code]))
        if frame and (not isinstance(resolver, _PythonStacks) or is_user(frame[0])):
            totals[frame][0] += float(count[code])
            totals[frame][1] += float(time_us[code])
    return _ranked_loading(totals, n)


def pstats_locations(
    pstats_path: Path, steps: int, is_user: UserPredicate = looks_like_user_file
) -> list[SourceLocation]:
    """Data-loading hot spots from a cProfile file: user functions called from torch.utils.data."""
    import pstats

    try:
        stats = pstats.Stats(str(pstats_path)).stats  # type: ignore[attr-defined]
        return _hot_spots(stats, steps, is_user)
    except Exception:  # noqa: BLE001 - a broken optional file must not stop the analysis
        # NOTE: a crafted file with the wrong shapes inside (a caller that is not a tuple) raised
        # TypeError past this guard (issue #30): the whole walk is inside it now.
        return []


def _hot_spots(stats: dict, steps: int, is_user: UserPredicate) -> list[SourceLocation]:
    """Find the user's functions reached from torch.utils.data in cProfile ``stats``, costliest first (five)."""
    callees: dict[tuple, set] = defaultdict(set)
    roots = []
    for func, (_cc, _nc, _tt, _ct, callers) in stats.items():
        for caller in callers:
            callees[caller].add(func)
            if "torch/utils/data" in caller[0].replace("\\", "/") and is_user(func[0]):
                roots.append(func)
    seen: set = set()
    stack = list(dict.fromkeys(roots))
    while stack:
        func = stack.pop()
        if func in seen:
            continue
        seen.add(func)
        stack.extend(c for c in callees.get(func, ()) if is_user(c[0]) and c not in seen)
    per = max(steps, 1)
    ranked = sorted(seen, key=lambda f: -stats[f][3])[:5]
    return [
        SourceLocation(
            "data_loading", f[0], int(f[1]), f[2], count=stats[f][1] / per, time_ms=stats[f][3] * 1e3 / per, source="pstats"
        )
        for f in ranked
    ]


def lead_locations(first: TraceAnalysis, is_user: UserPredicate) -> tuple[list[SourceLocation], bool]:
    """Find the lead rank's locations in its trace, and tell whether the trace has Python stacks at all."""
    has_stacks = bool(first.cls.python.any() or first.trace.events["call_stack"].notna().any())
    return _trace_locations(first, is_user), has_stacks


def _window_factor(capture: RunCapture | None) -> float:
    """Return the factor that puts the cProfile window's ms per step on the profiled window's scale.

    Every location's time is then on the trace's scale, which the report puts on the headline
    step's as it does the breakdown's parts. Both windows' wall time per step come from the
    capture's phase clock (1.0 when either is unknown).
    """
    if capture is None:
        return 1.0
    prof_s, cprof_s = capture.phases_s.get("profiled"), capture.phases_s.get("cprofile")
    if not (prof_s and cprof_s and capture.profiled_steps and capture.cprofiled_steps):
        return 1.0
    return (prof_s / capture.profiled_steps) / (cprof_s / capture.cprofiled_steps)


def finish_locations(
    lead: tuple[list[SourceLocation], bool] | None,
    lead_steps: int | None,
    pstats_path: Path | None,
    capture: RunCapture | None,
) -> tuple[list[SourceLocation], list[str]]:
    """Add cProfile's locations to the lead rank's (:func:`lead_locations`), merge and sort them.

    Args:
        lead: The lead rank's trace locations and whether it has stacks (None: no trace).
        lead_steps: The lead rank's profiler step count (None: no trace).
        pstats_path: The run's cProfile output, if any.
        capture: The run's capture, if any.
    """
    notes: list[str] = []
    locations: list[SourceLocation] = []
    is_user = user_predicate(capture)
    if lead is not None:
        locations += lead[0]
        if not locations and not lead[1]:
            notes.append("no Python stacks in the trace (record with with_stack=True to get file:line locations)")
    if pstats_path is not None and Path(pstats_path).is_file():
        # NOTE: cProfile has its own window after the torch.profiler one (they cannot share
        # CPython's profile hook), so per-step figures divide by that window's step count.
        steps = (capture.cprofiled_steps or capture.profiled_steps if capture else 0) or (
            lead_steps if lead_steps is not None else 1
        )
        k = _window_factor(capture)
        locations += [
            replace(loc, time_ms=loc.time_ms * k)
            for loc in pstats_locations(Path(pstats_path), steps, is_user)
            if loc.line > 0 and is_user(loc.file)
        ]
    locations = merge_locations(locations, capture.script if capture else None)
    locations.sort(key=lambda loc: (-loc.time_ms, -loc.count, loc.kind, loc.file, loc.line))
    return locations, notes


def merge_locations(locations: Sequence[SourceLocation], script: str | None = None) -> list[SourceLocation]:
    """One location per (kind, file, line), with bare file names resolved to full paths.

    Profiler stacks name files by their base name (``train.py(39): step``) while cProfile
    records full paths, so the same line would otherwise appear twice. A base name is resolved
    to the full path another location (or the captured script) gives it when that is unique.
    """
    merged: dict[tuple[str, str, int], SourceLocation] = {}
    for loc in resolve_names(locations, script):
        key = (loc.kind, loc.file, loc.line)
        prev = merged.get(key)
        if prev is None:
            merged[key] = loc
        else:
            # Two windows measured the same line: keep the profiler's count and time (its steps
            # are the analysed ones, the breakdown's), and say both sources agreed. The larger
            # time was kept before: cProfile's, whose per-call overhead inflates per-sample Python
            # code, showed a __getitem__ at 32.6 ms per step under a 19.1 ms data-loading part.
            best = prev if prev.source == "trace" else loc
            merged[key] = replace(
                best,
                time_ms=best.time_ms or prev.time_ms or loc.time_ms,
                function=best.function or prev.function or loc.function,
                source="trace+pstats" if {prev.source, loc.source} == {"trace", "pstats"} else best.source,
            )
    return list(merged.values())


def resolve_names(locations: Sequence[SourceLocation], script: str | None = None) -> list[SourceLocation]:
    """Give each bare file name the full path another location (or the captured script) has for it, where that is unique.

    Profiler stacks name a file by its path under its ``sys.path`` entry (``attention_lm.py(84):
    forward``), advisor's own hooks and cProfile by its full path: on an H200 one finding listed
    ``attention_lm.py:84`` beside ``examples/attention_lm.py:134``, the same file.
    """
    full_paths: dict[str, set[str]] = defaultdict(set)
    for loc in locations:
        if "/" in loc.file or "\\" in loc.file:
            full_paths[Path(loc.file).name].add(loc.file)
    if script:
        full_paths[Path(script).name].add(str(script))
    out = []
    for loc in locations:
        candidates = full_paths.get(loc.file, set()) if "/" not in loc.file else set()
        out.append(replace(loc, file=next(iter(candidates))) if len(candidates) == 1 else loc)
    return out


def tidy_locations(locations: Sequence[SourceLocation], script: str | None = None) -> list[SourceLocation]:
    """Resolve bare names (:func:`resolve_names`), then drop a line-less location that a located one names.

    A frame running since before the profiled window has a function but no line (``main`` of
    ``attention_lm.py``); beside ``attention_lm.py:134 (main)`` of the same kind it only repeats
    the function, without saying where.
    """
    resolved = resolve_names(locations, script)
    located = {(loc.kind, loc.file, loc.function) for loc in resolved if loc.line}
    return [loc for loc in resolved if loc.line or (loc.kind, loc.file, loc.function) not in located]
