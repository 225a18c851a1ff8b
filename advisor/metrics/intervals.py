"""Vectorised interval arithmetic over step windows (no per-event Python loops).

Step windows are the ``ProfilerStep#N`` spans of one trace: sorted and disjoint. Every helper
here works on numpy arrays of interval starts/ends (float microseconds):

* :func:`point_step` maps instants to the window that contains them (``searchsorted``);
* :func:`clip_to_steps` cuts intervals at window edges (one piece per window they touch);
* :func:`merge` unions intervals (running maximum of ends after a sort);
* :func:`union_per_step` is the covered time of a set of intervals, per window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Windows:
    """Sorted, disjoint step windows of one trace."""

    step: np.ndarray  # step numbers (N of ProfilerStep#N), int64
    start: np.ndarray  # float64 us
    end: np.ndarray  # float64 us

    def __len__(self) -> int:
        return len(self.start)

    @property
    def duration(self) -> np.ndarray:
        """Wall time of each window (us)."""
        return self.end - self.start


@dataclass(frozen=True)
class Pieces:
    """Intervals clipped to windows: ``window`` index (into Windows), ``start``, ``end``, ``src``.

    ``src`` is the index of the original interval each piece came from.
    """

    window: np.ndarray
    start: np.ndarray
    end: np.ndarray
    src: np.ndarray

    @property
    def length(self) -> np.ndarray:
        """Length of each piece (us)."""
        return self.end - self.start


def point_step(ts: np.ndarray, windows: Windows) -> np.ndarray:
    """Index of the window containing each instant ``ts`` (start <= ts < end), or -1."""
    if len(windows) == 0:
        return np.full(len(ts), -1, dtype=np.int64)
    idx = np.searchsorted(windows.start, ts, side="right") - 1
    safe = np.clip(idx, 0, None)
    inside = (idx >= 0) & (ts < windows.end[safe])
    return np.where(inside, idx, -1).astype(np.int64)


def clip_to_steps(start: np.ndarray, end: np.ndarray, windows: Windows) -> Pieces:
    """Cut intervals ``[start, end)`` at window edges; parts outside every window are dropped."""
    start = np.asarray(start, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    n = len(start)
    empty = np.zeros(0, dtype=np.int64)
    if n == 0 or len(windows) == 0:
        return Pieces(empty, np.zeros(0), np.zeros(0), empty)
    i0 = np.searchsorted(windows.start, start, side="right") - 1
    safe = np.clip(i0, 0, None)
    first = np.where((i0 >= 0) & (start < windows.end[safe]), i0, i0 + 1)
    last = np.searchsorted(windows.start, end, side="left") - 1
    count = np.clip(last - first + 1, 0, None)
    if count.max() <= 1:
        # the usual case, no interval crossing a window edge: one piece per interval kept
        src = np.flatnonzero(count)
        win = first[src]
    else:
        total = int(count.sum())
        src = np.repeat(np.arange(n), count)
        offsets = np.repeat(np.cumsum(count) - count, count)
        win = first[src] + (np.arange(total) - offsets)
    s = np.maximum(start[src], windows.start[win])
    e = np.minimum(end[src], windows.end[win])
    keep = e > s
    return Pieces(win[keep].astype(np.int64), s[keep], e[keep], src[keep])


def merge(pieces: Pieces) -> Pieces:
    """Union of clipped pieces: disjoint, sorted segments, each inside one window.

    Pieces never cross window edges and windows are disjoint and sorted, so sorting by start
    alone also groups by window; a new segment starts wherever a piece begins at or after the
    running maximum end of the pieces before it.
    """
    if len(pieces.start) == 0:
        return pieces
    order = np.argsort(pieces.start, kind="stable")
    s = pieces.start[order]
    e = pieces.end[order]
    w = pieces.window[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] >= run_end[:-1]
    # a window change always starts a new segment (touching windows must not merge)
    new[1:] |= w[1:] != w[:-1]
    seg = np.cumsum(new) - 1
    starts = s[new]
    ends = np.zeros(len(starts))
    np.maximum.at(ends, seg, e)
    return Pieces(w[new], starts, ends, order[new])


def union_per_step(pieces: Pieces, n_windows: int) -> np.ndarray:
    """Covered time (us) per window of a set of clipped pieces."""
    merged = merge(pieces)
    return np.bincount(merged.window, weights=merged.length, minlength=n_windows).astype(np.float64)


def concat(*parts: Pieces) -> Pieces:
    """Concatenate piece sets (``src`` loses meaning across sets)."""
    parts = tuple(p for p in parts if len(p.start))
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return Pieces(empty, np.zeros(0), np.zeros(0), empty)
    return Pieces(
        np.concatenate([p.window for p in parts]),
        np.concatenate([p.start for p in parts]),
        np.concatenate([p.end for p in parts]),
        np.concatenate([p.src for p in parts]),
    )


def max_gap_per_step(busy: Pieces, windows: Windows) -> np.ndarray:
    """Longest stretch (us) of each window not covered by ``busy``, edges included."""
    n = len(windows)
    merged = merge(busy)
    # Gaps: window start -> first segment, between segments, last segment -> window end.
    w = merged.window
    gaps_w = [np.arange(n)]
    gaps_len = [windows.duration.copy()]  # a window with no busy time is one gap
    if len(w):
        first = np.r_[True, w[1:] != w[:-1]]
        last = np.r_[w[1:] != w[:-1], True]
        lead = merged.start[first] - windows.start[w[first]]
        trail = windows.end[w[last]] - merged.end[last]
        inner_mask = ~first
        inner = merged.start[inner_mask] - merged.end[np.flatnonzero(inner_mask) - 1]
        has = np.zeros(n, dtype=bool)
        has[w] = True
        gaps_len[0] = np.where(has, 0.0, windows.duration)
        gaps_w += [w[first], w[last], w[inner_mask]]
        gaps_len += [lead, trail, inner]
    out = np.zeros(n)
    np.maximum.at(out, np.concatenate(gaps_w), np.concatenate(gaps_len))
    return out
