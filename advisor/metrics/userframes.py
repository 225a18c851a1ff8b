"""Which frame is the user's, and the resolvers from (thread, time) to the user's line.

A frame is the user's by the run's recorded policy (:func:`user_predicate`) or, for bare traces,
by :func:`looks_like_user_file`. The resolvers read the capture's ``advisor.call@`` ranges
(:class:`_CallSites`), the profiler's ``python_function`` events (:class:`_PythonStacks`) or the
old ``Call stack`` strings (:class:`_CallStacks`); :mod:`advisor.metrics.sources` says which is
used for what.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from advisor.capture.usercode import CALL_PREFIX, parse_call_site
from advisor.metrics.events import cat_mask, name_mask, take
from advisor.metrics.frames import (
    UserPredicate,
    looks_like_user_file,
    parse_frame,
)
from advisor.metrics.steps import top_level_ops

if TYPE_CHECKING:
    from advisor.capture.model import RunCapture
    from advisor.metrics.steps import TraceAnalysis

_NESTING = 4  # call-site ranges looked back through for one op


def user_predicate(capture: RunCapture | None) -> UserPredicate:
    """Return the run's user-code policy when the capture recorded one, else the bare-trace heuristic."""
    if capture is not None and capture.user_code is not None:
        return capture.user_code.is_user_file
    return looks_like_user_file


def first_user_frame(
    frames: Sequence[str], is_user: UserPredicate = looks_like_user_file
) -> tuple[str, int, str] | None:
    """Return the innermost frame (frames ordered innermost first) that is the user's code."""
    for text in frames:
        parsed = parse_frame(text)
        if parsed and is_user(parsed[0]):
            return parsed
    return None


class _CallSites:
    """Resolve (tid, ts) -> the user's call site, from the capture's ``advisor.call@`` ranges."""

    def __init__(self, analysis: TraceAnalysis) -> None:
        ev = analysis.trace.events
        mask = cat_mask(ev["cat"], ("user_annotation", "cpu_op")) & name_mask(
            ev["name"], lambda n: n.startswith(CALL_PREFIX)
        )
        rows = np.flatnonzero(mask)
        self.ok = len(rows) > 0
        if not self.ok:
            return
        self.ts = ev["ts"].to_numpy()[rows]
        self.end = ev["end"].to_numpy()[rows]
        self.site = [parse_call_site(str(n)) for n in take(ev["name"], rows)]
        self.by_tid = _by_tid(_tids(ev)[rows], self.ts)

    def resolve(self, tid: int, ts: float) -> tuple[str, int, str] | None:
        """Return the call site whose range holds (tid, ts), or None."""
        found = _started_before(self.by_tid, tid, ts) if self.ok else None
        if found is None:
            return None
        idx, pos = found
        # NOTE: a range holds another only when a wrapped call makes another wrapped call (a
        # tensor subclass); the latest-starting range that holds ts is the innermost.
        for back in range(pos, max(pos - _NESTING, -1), -1):
            i = int(idx[back])
            if self.end[i] >= ts:
                return self.site[i]
        return None


class _PythonStacks:
    """Resolve (tid, ts) -> the user's innermost frame, from ``python_function`` events."""

    def __init__(self, analysis: TraceAnalysis, is_user: UserPredicate) -> None:
        self.is_user = is_user
        ev = analysis.trace.events
        rows = np.flatnonzero(analysis.cls.python)
        self.ok = len(rows) > 0
        if not self.ok:
            return
        self.tid = _tids(ev)[rows]
        self.ts = ev["ts"].to_numpy()[rows]
        self.end = ev["end"].to_numpy()[rows]
        self.name = take(ev["name"], rows)
        self.py_id = ev["py_id"].to_numpy()[rows]
        parent_ids = ev["py_parent"].to_numpy()[rows]
        # parent row of each frame: a sorted search of the parent ids among the frame ids
        order = np.argsort(self.py_id, kind="stable")
        sorted_ids = self.py_id[order]
        pos = np.clip(np.searchsorted(sorted_ids, parent_ids), 0, max(len(sorted_ids) - 1, 0))
        found = (parent_ids >= 0) & (sorted_ids[pos] == parent_ids)
        self.parent = np.where(found, order[pos], -1).astype(np.int64)
        self.by_tid = _by_tid(self.tid, self.ts)
        self._cache: dict[int, tuple[str, int, str] | None] = {}
        # NOTE: a frame already running when profiling began is named by the line it was at
        # then (a module-level loop: the `opt.step()` line where advisor's hook starts the
        # profiler), not by where the ops ran: such a frame keeps its function, line unknown (0).
        windows = analysis.windows
        self.since = float(windows.start[0]) if analysis.real_steps and len(windows) else -np.inf

    def resolve(self, tid: int, ts: float) -> tuple[str, int, str] | None:
        """Return the user's innermost frame around (tid, ts)."""
        found = _started_before(self.by_tid, tid, ts) if self.ok else None
        if found is None:
            return None
        idx, pos = found
        i = int(idx[pos])
        while i >= 0 and self.end[i] < ts:  # a finished sibling: climb to the enclosing frame
            i = int(self.parent[i])
        if i < 0:
            return None
        return self._user_frame(i)

    def _user_frame(self, i: int) -> tuple[str, int, str] | None:
        start = i
        if start in self._cache:
            return self._cache[start]
        found = None
        depth = 0
        while i >= 0 and depth < 512:
            parsed = parse_frame(str(self.name[i]))
            if parsed and self.is_user(parsed[0]):
                found = parsed if self.ts[i] >= self.since else (parsed[0], 0, parsed[2])
                break
            i = int(self.parent[i])
            depth += 1
        self._cache[start] = found
        return found


class _CallStacks:
    """Resolve (tid, ts) -> user frame from old traces' ``Call stack`` args on top-level ops."""

    def __init__(self, analysis: TraceAnalysis, is_user: UserPredicate) -> None:
        self.is_user = is_user
        ev = analysis.trace.events
        stacks = ev["call_stack"]
        self.ok = bool(stacks.notna().any())
        if not self.ok:
            return
        # Top-level ops do not overlap on a thread, so one searchsorted finds the op around
        # any instant, and its stack starts at the user's call site.
        top = top_level_ops(ev, analysis.cls)
        rows = top[stacks.notna().to_numpy()[top]]
        self.tid = _tids(ev)[rows]
        self.ts = ev["ts"].to_numpy()[rows]
        self.end = ev["end"].to_numpy()[rows]
        self.stack = take(stacks, rows)
        self.by_tid = _by_tid(self.tid, self.ts)
        self._cache: dict[str, tuple[str, int, str] | None] = {}

    def resolve(self, tid: int, ts: float) -> tuple[str, int, str] | None:
        """Return the first user frame of the top-level op around (tid, ts)."""
        found = _started_before(self.by_tid, tid, ts) if self.ok else None
        if found is None:
            return None
        idx, pos = found
        i = int(idx[pos])
        return self._frame(str(self.stack[i])) if self.end[i] >= ts else None

    def _frame(self, stack: str) -> tuple[str, int, str] | None:
        if stack not in self._cache:
            self._cache[stack] = first_user_frame(stack.split(";"), self.is_user)
        return self._cache[stack]


def _tids(ev: Any) -> np.ndarray:
    """Thread ids as the tid column's integer codes (cheap to compare and group)."""
    return ev["tid"].cat.codes.to_numpy()


def _by_tid(tid: np.ndarray, ts: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Row positions per thread, sorted by start time, with those start times.

    The starts are kept sorted once here: taking them per query (``ts[idx]``) copied a whole
    thread's column for every resolved op, about 1% of ``advisor analyze``'s CPU on a 385 MB trace.
    """
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for t in np.unique(tid):
        idx = np.flatnonzero(tid == t)
        idx = idx[np.argsort(ts[idx], kind="stable")]
        out[int(t)] = idx, ts[idx]
    return out


def _started_before(by_tid: dict[int, tuple[np.ndarray, np.ndarray]], tid: int, ts: float) -> tuple[np.ndarray, int] | None:
    """Return the thread's sorted rows and the position of the last one starting by ``ts``."""
    found = by_tid.get(int(tid))
    if found is None or len(found[0]) == 0:
        return None
    pos = int(np.searchsorted(found[1], ts, side="right")) - 1
    return (found[0], pos) if pos >= 0 else None


def _resolver(analysis: TraceAnalysis, is_user: UserPredicate) -> Any:
    stacks = _PythonStacks(analysis, is_user)
    return stacks if stacks.ok else _CallStacks(analysis, is_user)


class _Resolver:
    """The call-site ranges first (the call's own line), then the stacks (its enclosing frame)."""

    def __init__(self, analysis: TraceAnalysis, is_user: UserPredicate) -> None:
        self.sites = _CallSites(analysis)
        self.stacks = _resolver(analysis, is_user)
        self.ok = self.sites.ok or self.stacks.ok

    def resolve(self, tid: int, ts: float) -> tuple[str, int, str] | None:
        """Return the user's line for an op at (tid, ts), or None."""
        return self.sites.resolve(tid, ts) or (self.stacks.resolve(tid, ts) if self.stacks.ok else None)
