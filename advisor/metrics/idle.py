"""Why the GPU idles: every GPU-idle interval of a step, attributed to what the CPU was doing.

The GPU is idle wherever no kernel, memcpy or memset runs inside a ``ProfilerStep`` window
(step start to first kernel, between kernels, last kernel to step end). Each idle instant goes
to exactly one class, first match wins:

``sync``
    the CPU waits in a sync call (``cudaStreamSynchronize``, ``.item()``, ...);
``data_loading``
    the CPU is in ``DataLoader.__next__`` or in input preprocessing in the main process: a
    Python frame that is (or is called from) a dataset ``__getitem__``, a collate function, a
    tokenizer, an image/video/audio/feature processor, PIL, cv2, torchvision/torchaudio
    transforms (:data:`PREPROCESS_PATTERNS`);
``launch``
    the rest of the idle time in *short* gaps (under :data:`LONG_GAP_US`): the CPU is queueing
    the next kernel (op dispatch, Python between ops), the launch-bound signature;
``host``
    the rest of the idle time in *long* gaps, while the CPU runs Python or operators: its own
    work (logging, metrics, checkpoint saving, evaluation) keeps the GPU waiting;
``unattributed``
    long-gap time in which the trace shows nothing on the CPU (no Python stacks, no operator).

So launch-bound and host-bound are told apart by the length of the gaps the time sits in, not
by one share. The Python function to blame is the innermost non-built-in ``python_function``
frame at each instant: a frame's *self* idle time is the idle time inside it minus that inside
its child frames (built-in children such as ``<built-in method write>`` fold into the caller),
so nested frames are never counted twice. Everything is vectorised interval arithmetic over
sorted, disjoint interval sets (:class:`Spans`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from advisor.metrics.events import name_mask, take
from advisor.metrics.frames import is_instrumentation
from advisor.metrics.intervals import clip_to_steps, merge
from advisor.metrics.model import SourceLocation
from advisor.metrics.steps import top_level_ops
from advisor.metrics.userframes import UserPredicate, looks_like_user_file, parse_frame

if TYPE_CHECKING:
    from advisor.metrics.steps import TraceAnalysis

LONG_GAP_US = 1000.0
"""A GPU gap at least this long is not launch latency: eager launches cost 5-50 us each, so 1 ms
is twenty or more launches' worth of CPU time with nothing queued."""

IDLE_CLASSES: tuple[str, ...] = ("sync", "data_loading", "launch", "host", "unattributed")
"""Where GPU-idle time goes, in priority order (see the module docstring)."""

# Python frames that prepare inputs (matched on the frame text "file(line): function").
PREPROCESS_PATTERNS = re.compile(
    r"tokeniz|processing_|image_process|video_process|feature_extract|audio_utils|image_transforms"
    r"|(^|/)(PIL|cv2|albumentations|librosa|decord|av|imageio|skimage)/"
    r"|(^|/)torchvision/(transforms|io|datasets)/|(^|/)torchaudio/(transforms|functional|io)/"
    r"|(^|/)torch/utils/data/",
    re.IGNORECASE,
)
# Dataset / collate entry points; only in the user's code or a dataset library, since every
# mapping type has a __getitem__ (os.environ, ModelOutput, ...).
DATASET_FUNCTIONS = frozenset({"__getitem__", "__getitems__", "collate", "collate_fn", "default_collate"})
DATASET_LIBRARIES = ("datasets/", "torch/utils/data/", "webdataset/", "torchdata/")


def is_preprocessing(frame: str, is_user: UserPredicate = looks_like_user_file) -> bool:
    """Tell whether a ``python_function`` frame prepares inputs (see :data:`PREPROCESS_PATTERNS`)."""
    if PREPROCESS_PATTERNS.search(frame):
        return True
    parsed = parse_frame(frame)
    if parsed is None or parsed[2] not in DATASET_FUNCTIONS:
        return False
    return is_user(parsed[0]) or parsed[0].startswith(DATASET_LIBRARIES)


@dataclass(frozen=True)
class Spans:
    """A set of disjoint, sorted intervals ``[start, end)`` (us) on one clock."""

    start: np.ndarray
    end: np.ndarray

    @staticmethod
    def of(start: np.ndarray, end: np.ndarray) -> Spans:
        """Build the union of arbitrary intervals."""
        start = np.asarray(start, dtype=np.float64)
        end = np.asarray(end, dtype=np.float64)
        keep = end > start
        start, end = start[keep], end[keep]
        if not len(start):
            return _EMPTY
        order = np.argsort(start, kind="stable")
        s, e = start[order], end[order]
        run = np.maximum.accumulate(e)
        new = np.r_[True, s[1:] > run[:-1]]
        seg = np.cumsum(new) - 1
        ends = np.zeros(int(seg[-1]) + 1)
        np.maximum.at(ends, seg, e)
        return Spans(s[new], ends)

    @property
    def length(self) -> np.ndarray:
        """Length of each interval."""
        return self.end - self.start

    def cumulative(self, x: np.ndarray) -> np.ndarray:
        """Covered length of ``(-inf, x]``, for each ``x`` (so ``F(b) - F(a)`` measures ``[a, b]``)."""
        x = np.asarray(x, dtype=np.float64)
        if not len(self.start):
            return np.zeros(len(x))
        before = np.r_[0.0, np.cumsum(self.length)]
        i = np.searchsorted(self.start, x, side="right")  # intervals starting at or before x
        j = np.clip(i - 1, 0, None)
        partial = np.where(i > 0, np.clip(x - self.start[j], 0.0, self.length[j]), 0.0)
        return before[np.clip(i - 1, 0, None)] * (i > 0) + partial

    def overlapping(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Whether each ``[start, end)`` shares time with one of these intervals."""
        i = np.searchsorted(self.end, start, side="right")  # the first interval ending after start
        inside = i < len(self.start)
        return inside & (self.start[np.where(inside, i, 0)] < end) if len(self.start) else np.zeros(len(start), dtype=bool)

    def measure(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Covered length inside each ``[start, end]``."""
        return self.cumulative(end) - self.cumulative(start)

    def combine(self, other: Spans, keep_self: bool, keep_other: bool) -> Spans:
        """Set algebra by a sweep: ``&`` (True, True) or ``self - other`` (True, False)."""
        pos = np.concatenate([self.start, self.end, other.start, other.end])
        delta = np.concatenate(
            [np.ones(len(self.start)), -np.ones(len(self.end)), 2 * np.ones(len(other.start)), -2 * np.ones(len(other.end))]
        )
        if not len(pos):
            return _EMPTY
        order = np.lexsort((delta, pos))  # ends (negative) before starts at the same position
        pos, state = pos[order], np.cumsum(delta[order])
        in_self = (state == 1) | (state == 3)
        in_other = state >= 2
        wanted = in_self & (in_other if keep_other else ~in_other)
        s, e = pos[:-1], pos[1:]
        pick = wanted[:-1] & (e > s)
        return Spans.of(s[pick], e[pick])

    def __and__(self, other: Spans) -> Spans:
        return self.combine(other, True, True)

    def __sub__(self, other: Spans) -> Spans:
        return self.combine(other, True, False)


_EMPTY = Spans(np.zeros(0), np.zeros(0))


@dataclass(frozen=True)
class IdleResult:
    """Idle attribution of one trace.

    Attributes:
        steps: One row per step window: ``idle_frac`` and ``idle_<class>_frac`` for each class
            of :data:`IDLE_CLASSES` (shares of the step's wall time), ``idle_gap_count``,
            ``idle_gap_median_us``, ``idle_long_gap_frac`` (share of idle time in gaps of at
            least :data:`LONG_GAP_US`) and ``idle_preprocess_frac`` (the data-loading part spent
            in preprocessing outside ``DataLoader.__next__``).
        functions: Python functions the idle time is attributed to, most first: ``function``
            (frame text), ``idle_class``, ``idle_ms`` (per step), ``longest_gap_ms``.
        locations: The same as :class:`SourceLocation` (kinds ``preprocess``/``host``).
    """

    steps: pd.DataFrame
    functions: pd.DataFrame
    locations: tuple[SourceLocation, ...]


def _gaps(analysis: TraceAnalysis) -> tuple[Spans, np.ndarray]:
    """GPU-idle gaps inside the step windows, and the window index of each gap."""
    ev, cls, win = analysis.trace.events, analysis.cls, analysis.windows
    ts, end = ev["ts"].to_numpy(), ev["end"].to_numpy()
    pieces = merge(clip_to_steps(ts[cls.gpu], end[cls.gpu], win))
    # merge() keeps touching segments apart; join them (not across windows) so every gap found
    # below lies strictly between two busy segments
    join = np.zeros(len(pieces.start), dtype=bool)
    join[1:] = (pieces.start[1:] <= pieces.end[:-1]) & (pieces.window[1:] == pieces.window[:-1])
    seg = np.cumsum(~join) - 1
    starts = pieces.start[~join]
    ends = np.zeros(len(starts))
    np.maximum.at(ends, seg, pieces.end)
    busy = Spans(starts, ends)
    # complement of the busy segments inside each window (edges included): boundaries interleave
    # as [w.start, b0.start), [b0.end, b1.start), ..., [bk.end, w.end)
    points = np.concatenate([win.start, win.end, busy.start, busy.end])
    kinds = np.concatenate([np.ones(len(win)), np.zeros(len(win)), np.zeros(len(busy.start)), np.ones(len(busy.end))])
    # closes sort before opens at the same instant (adjacent windows touch)
    order = np.lexsort((kinds, points))
    p, k = points[order], kinds[order]
    # idle runs from an opening boundary (window start, busy end) to the next closing one
    opens = np.flatnonzero(k == 1)
    nxt = opens + 1
    ok = nxt < len(p)
    s, e = p[opens[ok]], p[nxt[ok]]
    good = (k[nxt[ok]] == 0) & (e > s)
    gaps = Spans(s[good], e[good])
    widx = np.searchsorted(win.start, gaps.start, side="right") - 1
    return gaps, widx


def _main_thread(analysis: TraceAnalysis) -> int:
    """Code of the thread that runs the training loop.

    That is the thread recording ProfilerStep, else the one with the most Python frames (other
    threads' frames, a profiler thread's ``wait``, say nothing about why the GPU idles).
    """
    ev, win = analysis.trace.events, analysis.windows
    tid = ev["tid"].cat.codes.to_numpy()
    if analysis.real_steps:
        step_rows = np.flatnonzero(name_mask(ev["name"], lambda n: n.startswith("ProfilerStep#")) & analysis.cls.complete)
        step_rows = step_rows[np.isin(ev["ts"].to_numpy()[step_rows], win.start)]
        if len(step_rows):
            return int(np.bincount(tid[step_rows]).argmax())
    py = tid[analysis.cls.python]
    return int(np.bincount(py[py >= 0]).argmax()) if (py >= 0).any() else -2


def _frames(analysis: TraceAnalysis, is_user: UserPredicate = looks_like_user_file) -> pd.DataFrame:
    """Python frames with their nearest parent that is not folded: columns ``row``, ``name``, ``ts``, ``end``, ``parent``.

    Built-ins and advisor's own instrumentation fold into their caller (``folded``): their time
    is the frame that called them.
    """
    ev, cls = analysis.trace.events, analysis.cls
    rows = np.flatnonzero(cls.python & (ev["tid"].cat.codes.to_numpy() == _main_thread(analysis)))
    if not len(rows):
        return pd.DataFrame(columns=["row", "name", "ts", "end", "parent", "folded", "preprocess"])
    names = take(ev["name"], rows).astype(str)
    folded = np.char.startswith(names.astype(str), "<built-in") | name_mask(ev["name"], is_instrumentation)[rows]
    py_id = ev["py_id"].to_numpy()[rows]
    parent = ev["py_parent"].to_numpy()[rows]
    ids = pd.Series(np.arange(len(rows)), index=py_id)
    ids = ids[~ids.index.duplicated()]
    pos = ids.reindex(parent).to_numpy()
    parent_pos = np.where(np.isnan(pos), -1, pos).astype(np.int64)
    # skip folded parents (a few hops: built-ins rarely nest; a hook's wrapper, find and _is_user do)
    for _ in range(6):
        hop = (parent_pos >= 0) & folded[np.clip(parent_pos, 0, None)]
        if not hop.any():
            break
        parent_pos = np.where(hop, parent_pos[np.clip(parent_pos, 0, None)], parent_pos)
    own = name_mask(ev["name"], lambda name: is_preprocessing(name, is_user))[rows]
    # preprocessing if the frame or any ancestor matches (pointer jumping: log(depth) rounds)
    pre, anc = own.copy(), parent_pos.copy()
    for _ in range(12):
        valid = anc >= 0
        if not valid.any():
            break
        pre = pre | np.where(valid, pre[np.clip(anc, 0, None)], False)
        anc = np.where(valid, anc[np.clip(anc, 0, None)], -1)
    return pd.DataFrame(
        {
            "row": rows,
            "name": names,
            "ts": ev["ts"].to_numpy()[rows],
            "end": ev["end"].to_numpy()[rows],
            "parent": parent_pos,
            "folded": folded,
            "preprocess": pre,
            "own_preprocess": own,
        }
    )


def _self_time(frames: pd.DataFrame, spans: Spans) -> np.ndarray:
    """Each frame's share of ``spans`` not inside a child frame (folded frames count as their caller)."""
    inclusive = spans.measure(frames["ts"].to_numpy(dtype=np.float64), frames["end"].to_numpy(dtype=np.float64))
    real = ~frames["folded"].to_numpy(dtype=bool)
    parent = frames["parent"].to_numpy(dtype=np.int64)
    child = real & (parent >= 0)
    children = np.bincount(parent[child], weights=inclusive[child], minlength=len(frames))
    return np.where(real, np.clip(inclusive - children, 0.0, None), 0.0)


def attribute_idle(
    analysis: TraceAnalysis, with_functions: bool = True, is_user: UserPredicate = looks_like_user_file
) -> IdleResult:
    """Attribute every GPU-idle instant of each step to a class and a Python function.

    ``with_functions=False`` skips naming the functions (other ranks need only the per-step shares);
    ``is_user`` is the run's user-code policy (:func:`advisor.metrics.userframes.user_predicate`).
    """
    ev, cls, win = analysis.trace.events, analysis.cls, analysis.windows
    n = len(win)
    if not cls.has_gpu:
        nan = np.full(n, np.nan)
        cols = ["idle_frac", *(f"idle_{c}_frac" for c in IDLE_CLASSES), "idle_preprocess_frac",
                "idle_gap_count", "idle_gap_median_us", "idle_long_gap_frac"]
        return IdleResult(pd.DataFrame({c: nan.copy() for c in cols}), _no_functions(), ())
    step_us = np.where(win.duration > 0, win.duration, 1.0)
    ts, end = ev["ts"].to_numpy(), ev["end"].to_numpy()
    gaps, gap_win = _gaps(analysis)
    frames = _frames(analysis, is_user)

    sync = Spans.of(ts[cls.sync_call | cls.item], end[cls.sync_call | cls.item])
    loader = Spans.of(ts[cls.dataloader], end[cls.dataloader])
    pre_rows = frames[frames["own_preprocess"]] if len(frames) else frames
    preprocess = Spans.of(pre_rows["ts"].to_numpy(), pre_rows["end"].to_numpy()) if len(pre_rows) else _EMPTY
    top = top_level_ops(ev, cls)
    cpu_rows = np.r_[top, np.flatnonzero(cls.runtime & ~cls.sync_call)]
    cpu_start = np.r_[ts[cpu_rows], frames["ts"].to_numpy(dtype=np.float64)]
    cpu_end = np.r_[end[cpu_rows], frames["end"].to_numpy(dtype=np.float64)]

    long_gaps = Spans(gaps.start[gaps.length >= LONG_GAP_US], gaps.end[gaps.length >= LONG_GAP_US])
    parts: dict[str, Spans] = {}
    parts["sync"] = gaps & sync
    rest = gaps - sync
    parts["data_loading"] = rest & Spans.of(np.r_[loader.start, preprocess.start], np.r_[loader.end, preprocess.end])
    rest = rest - parts["data_loading"]
    parts["launch"] = rest - long_gaps
    rest = rest & long_gaps
    # the CPU's busy time matters only inside these gaps: the union of the few intervals that
    # reach into one is the same there as the union of all (a sort of 10^5 intervals saved)
    near = rest.overlapping(cpu_start, cpu_end)
    on_cpu = Spans.of(cpu_start[near], cpu_end[near])
    parts["host"] = rest & on_cpu
    parts["unattributed"] = rest - on_cpu
    preprocess_only = parts["data_loading"] - loader

    def per_step(spans: Spans) -> np.ndarray:
        w = np.searchsorted(win.start, spans.start, side="right") - 1
        ok = w >= 0
        return np.bincount(w[ok], weights=spans.length[ok], minlength=n).astype(np.float64)

    cols: dict[str, Any] = {}
    idle = per_step(gaps)
    cols["idle_frac"] = idle / step_us
    for name in IDLE_CLASSES:
        cols[f"idle_{name}_frac"] = per_step(parts[name]) / step_us
    cols["idle_preprocess_frac"] = per_step(preprocess_only) / step_us
    ok = gap_win >= 0
    cols["idle_gap_count"] = np.bincount(gap_win[ok], minlength=n).astype(np.float64)
    med = pd.Series(gaps.length[ok]).groupby(gap_win[ok]).median()
    cols["idle_gap_median_us"] = np.full(n, np.nan)
    cols["idle_gap_median_us"][med.index.to_numpy()] = med.to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        cols["idle_long_gap_frac"] = np.where(idle > 0, per_step(long_gaps) / np.where(idle > 0, idle, 1.0), np.nan)
    steps = pd.DataFrame(cols)
    # names are read only for the few operators holding host time outside every frame
    ops = pd.DataFrame({"row": top, "ts": ts[top], "end": end[top]})
    functions = _functions(frames, parts, gaps, max(n, 1), ops, ev["name"]) if with_functions else _no_functions()
    return IdleResult(steps, functions, _locations(functions))


def _no_functions() -> pd.DataFrame:
    return pd.DataFrame(columns=["function", "idle_class", "idle_ms", "longest_gap_ms"])


LOADER_FUNCTION = "DataLoader.__next__ (outside Python stacks)"
"""Function name given to data-loading idle time that no preprocessing frame covers."""


def _functions(
    frames: pd.DataFrame, parts: dict[str, Spans], gaps: Spans, n_steps: int, ops: pd.DataFrame, names: pd.Series,
) -> pd.DataFrame:
    """Per (function, class): self idle time per step, and the longest gap it sits in.

    Host-bound time outside every Python frame (traces without stacks) goes to the top-level
    operator running then, named ``aten::empty (operator)``.
    """
    out = []
    longest = gaps.length
    in_frames = Spans.of(frames["ts"].to_numpy(dtype=np.float64), frames["end"].to_numpy(dtype=np.float64))
    host_outside = parts["host"] - in_frames
    if len(host_outside.start) and len(ops):
        own = host_outside.measure(ops["ts"].to_numpy(), ops["end"].to_numpy())
        hit = own > 0
        if hit.any():
            fs, fe = ops["ts"].to_numpy()[hit], ops["end"].to_numpy()[hit]
            gap = _range_max(longest, np.searchsorted(gaps.end, fs, side="right"), np.searchsorted(gaps.start, fe, side="left") - 1)
            hit_names = take(names, ops["row"].to_numpy()[hit]).astype(str)
            out.append(pd.DataFrame({"function": [f"{n} (operator)" for n in hit_names],
                                     "idle_class": "host", "self": own[hit], "gap": gap}))
    pre = frames[frames["preprocess"].to_numpy(dtype=bool)]
    in_pre = Spans.of(pre["ts"].to_numpy(), pre["end"].to_numpy()) if len(pre) else _EMPTY
    loader_only = float((parts["data_loading"] - in_pre).length.sum())
    for name in ("data_loading", "host", "launch"):
        # data loading outside any preprocessing frame is the DataLoader's own time (below)
        spans = parts[name] & in_pre if name == "data_loading" else parts[name]
        own = _self_time(frames, spans)
        hit = own > 0
        if not hit.any():
            continue
        # the longest gap each frame overlaps (gaps are sorted and disjoint)
        fs, fe = frames["ts"].to_numpy(dtype=np.float64)[hit], frames["end"].to_numpy(dtype=np.float64)[hit]
        first = np.searchsorted(gaps.end, fs, side="right")
        last = np.searchsorted(gaps.start, fe, side="left") - 1
        gap_max = _range_max(longest, first, last)
        out.append(
            pd.DataFrame(
                {"function": frames["name"].to_numpy()[hit], "idle_class": name, "self": own[hit], "gap": gap_max}
            )
        )
    if loader_only > 0:
        out.append(pd.DataFrame({"function": [LOADER_FUNCTION], "idle_class": "data_loading",
                                 "self": [loader_only], "gap": [float(longest.max(initial=0.0))]}))
    if not out:
        return _no_functions()
    rows = pd.concat(out, ignore_index=True)
    agg = rows.groupby(["function", "idle_class"], sort=False).agg(idle_us=("self", "sum"), gap_us=("gap", "max")).reset_index()
    agg["idle_ms"] = agg["idle_us"] / 1e3 / n_steps
    agg["longest_gap_ms"] = agg["gap_us"] / 1e3
    agg = agg.sort_values(["idle_ms", "function"], ascending=[False, True], kind="stable")
    return agg[["function", "idle_class", "idle_ms", "longest_gap_ms"]].reset_index(drop=True)


def _range_max(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``max(values[lo:hi + 1])`` for each pair (0 where the range is empty), by a sparse table."""
    out = np.zeros(len(lo))
    ok = (hi >= lo) & (lo < len(values))
    if not ok.any() or not len(values):
        return out
    table = [values]
    while (1 << len(table)) <= len(values):
        prev, half = table[-1], 1 << (len(table) - 1)
        table.append(np.maximum(prev[:-half], prev[half:]))
    a, b = lo[ok], np.minimum(hi[ok], len(values) - 1)
    k = np.floor(np.log2(b - a + 1)).astype(np.int64)
    res = np.empty(len(a))
    for level in np.unique(k):
        sel = k == level
        t = table[level]
        res[sel] = np.maximum(t[a[sel]], t[b[sel] - (1 << level) + 1])
    out[ok] = res
    return out


def _locations(functions: pd.DataFrame) -> tuple[SourceLocation, ...]:
    kinds = {"data_loading": "preprocess", "host": "host"}
    out = []
    for row in functions.itertuples(index=False):
        kind = kinds.get(str(row.idle_class))
        parsed = parse_frame(str(row.function))
        if kind is None or parsed is None:
            continue
        file, line, func = parsed
        out.append(SourceLocation(kind, file, line, func, count=1.0, time_ms=float(row.idle_ms), source="trace"))
    return tuple(out)
