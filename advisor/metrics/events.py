"""Classify a trace's events (kernels, copies, syncs, DataLoader ranges, ...) and find its steps.

All classification is by name and category, decided once per *distinct* name (names are
categoricals) and broadcast to rows through the category codes, so a million events cost a
few numpy operations.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from advisor.errors import TraceError
from advisor.metrics.intervals import Windows
from advisor.trace.load import Trace

STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")

# CUDA/HIP calls that block the CPU until the device (or a stream/event) catches up.
SYNC_CALLS = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaStreamQuery",  # polling; not blocking, excluded below
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
        "hipDeviceSynchronize",
        "hipStreamSynchronize",
        "hipEventSynchronize",
    }
) - {"cudaStreamQuery"}
ITEM_OPS = frozenset({"aten::item", "aten::_local_scalar_dense"})
LAUNCH_RE = re.compile(r"Launch(Kernel|CooperativeKernel)|GraphLaunch|^cuLaunch|^hipLaunch|hipExtLaunch")
COMM_OP_PREFIXES = ("nccl:", "gloo:", "c10d::", "record_param_comms", "ProcessGroup")
DATALOADER_PREFIX = "enumerate(DataLoader)#"
OPTIMIZER_PREFIX = "Optimizer.step#"
# Annotations that are ranges, not operators: never count them as CPU ops.
ANNOTATION_PREFIXES = ("ProfilerStep#", DATALOADER_PREFIX, "Optimizer.", "## ")

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
CPU_RANGE_CATS = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver")


def name_mask(names: pd.Series, predicate: Callable[[str], bool], codes: np.ndarray | None = None) -> np.ndarray:
    """Boolean row mask from a predicate evaluated once per distinct (categorical) name.

    ``codes``: ``names``' category codes as ``np.intp``, when the caller builds several masks of
    one column (numpy indexes with them without converting them each time).
    """
    cats = names.cat.categories
    # one slot more than there are categories, False: a missing name (code -1) indexes it
    per_cat = np.zeros(len(cats) + 1, dtype=bool)
    per_cat[:-1] = np.fromiter((bool(predicate(str(c))) for c in cats), dtype=bool, count=len(cats))
    return np.take(per_cat, names.cat.codes.to_numpy() if codes is None else codes)


def take(series: pd.Series, rows: np.ndarray) -> np.ndarray:
    """Take a categorical column's values at ``rows`` (object array, None where missing).

    The whole column is never materialised.
    """
    cats = np.asarray(series.cat.categories, dtype=object)
    codes = series.cat.codes.to_numpy()[rows]
    out = np.full(len(codes), None, dtype=object)
    ok = codes >= 0
    if len(cats) and ok.any():
        out[ok] = cats[codes[ok]]
    return out


def distinct(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values of an integer array and, per element, the position of its value among them.

    Codes spanning a range no wider than the array (category codes, compacted keys) are
    counted in one pass over a table of that range; others are sorted (``np.unique``).
    """
    if len(codes) and (codes.dtype.kind == "i" or (codes.dtype.kind == "u" and codes.dtype.itemsize < 8)):
        low, high = int(codes.min()), int(codes.max())
        if high - low <= len(codes):
            shifted = codes.astype(np.intp) - low  # in the narrow dtype, int8 127 - (-1) would wrap
            seen = np.zeros(high - low + 1, dtype=bool)
            seen[shifted] = True
            position = np.cumsum(seen, dtype=np.intp) - 1
            return np.flatnonzero(seen).astype(codes.dtype) + low, position[shifted]
    uniq, inverse = np.unique(codes, return_inverse=True)
    return uniq, inverse.reshape(-1)


def joint_codes(*codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group rows by several integer code columns at once.

    Returns the position of each row's first occurrence of its combination (a representative
    row per group) and each row's group number, so a function of the combination is evaluated
    once per group and broadcast back with ``values[group]``.
    """
    key = np.zeros(len(codes[0]), dtype=np.int64)
    for c in codes:
        _, key = distinct(key * (int(c.max(initial=0)) + 2) + (c.astype(np.int64) + 1))
    _, first, group = np.unique(key, return_index=True, return_inverse=True)
    return first, group.reshape(-1)


def _per_distinct(series: pd.Series, rows: np.ndarray, fn: Callable[[str | None], object]) -> tuple[list[object], np.ndarray]:
    """``fn`` of each distinct value of ``series`` at ``rows``, and each row's position among them."""
    uniq, inverse = distinct(series.cat.codes.to_numpy()[rows])
    cats = np.asarray(series.cat.categories, dtype=object)
    return [fn(cats[c] if c >= 0 else None) for c in uniq.tolist()], inverse


def map_rows(series: pd.Series, rows: np.ndarray, fn: Callable[[str | None], object]) -> list[object]:
    """``[fn(value) for value in take(series, rows)]``, calling ``fn`` once per distinct value."""
    return broadcast(*_per_distinct(series, rows, fn))


def map_categorical(series: pd.Series, rows: np.ndarray, fn: Callable[[str | None], str | None]) -> pd.Categorical:
    """:func:`map_rows` for a function returning strings, as a categorical (None: missing).

    No Python object per row: a column of 10^5 strings costs pandas a conversion per element
    when a frame is built from it and a hash per element when it is grouped by.
    """
    values, inverse = _per_distinct(series, rows, fn)
    # distinct categories can map to one value: the result's categories are its distinct values
    position: dict[object, int] = {}
    remap = np.array([-1 if v is None else position.setdefault(v, len(position)) for v in values], dtype=np.int64)
    return pd.Categorical.from_codes(remap[inverse] if len(remap) else inverse, categories=list(position))


def plain_strings(frame: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """``frame`` with its categorical ``columns`` as plain strings (what sorting and records expect)."""
    return frame.assign(**{c: frame[c].astype("str") for c in columns if isinstance(frame[c].dtype, pd.CategoricalDtype)})


def broadcast(values: list[object], index: np.ndarray) -> list[object]:
    """``[values[i] for i in index]`` (the same objects, whatever their type)."""
    arr = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):  # item by item: numpy would unpack tuple values
        arr[i] = v
    return arr[index].tolist()


def outermost(events: pd.DataFrame, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return the ``rows`` not nested inside another of ``rows`` on their thread, and their thread codes.

    Both arrays are in (thread, start) order. When two rows start together the longer one is the
    parent (it comes first, and the shorter one is nested in it).
    """
    tid = events["tid"].cat.codes.to_numpy()[rows]
    ts = events["ts"].to_numpy()[rows]
    end = events["end"].to_numpy()[rows]
    order = np.lexsort((-end, ts, tid))
    tid_s, ts_s, end_s = tid[order], ts[order], end[order]
    run = pd.Series(end_s).groupby(tid_s).cummax().to_numpy()
    new_thread = np.r_[True, tid_s[1:] != tid_s[:-1]]
    top = new_thread | (ts_s >= np.r_[-np.inf, run[:-1]])
    return rows[order[top]], tid_s[top]


def cat_mask(cats: pd.Series, wanted: tuple[str, ...]) -> np.ndarray:
    """Rows whose (normalised) category is one of ``wanted``."""
    return name_mask(cats, lambda c: c in wanted)


@dataclass(frozen=True)
class Classified:
    """Row masks over one trace's events (all numpy bool arrays of the same length)."""

    complete: np.ndarray  # ph == "X" with a duration
    gpu: np.ndarray  # kernel / memcpy / memset on the device
    kernel: np.ndarray
    comm_kernel: np.ndarray
    memcpy: np.ndarray
    memset: np.ndarray
    h2d: np.ndarray
    d2h: np.ndarray
    pageable: np.ndarray
    pinned: np.ndarray
    runtime: np.ndarray  # cuda_runtime / cuda_driver calls
    launch: np.ndarray
    sync_call: np.ndarray
    item: np.ndarray  # aten::item / _local_scalar_dense
    cpu_op: np.ndarray  # real operators (annotations excluded)
    comm_op: np.ndarray  # CPU-side collectives (nccl:/gloo:/c10d)
    dataloader: np.ndarray
    optimizer: np.ndarray
    memory: np.ndarray  # [memory] instants
    python: np.ndarray  # python_function events
    top_ops: np.ndarray  # rows of the cpu_op events not nested in another on their thread, sorted (read-only)

    @property
    def has_gpu(self) -> bool:
        """True when the trace holds any device activity."""
        return bool(self.gpu.any())


def classify(events: pd.DataFrame) -> Classified:
    """Compute the row masks the analysis uses."""
    names, cats = events["name"], events["cat"]
    # each column's codes converted once for the masks below
    name_codes = names.cat.codes.to_numpy().astype(np.intp)
    cat_codes = cats.cat.codes.to_numpy().astype(np.intp)

    def by_name(predicate: Callable[[str], bool]) -> np.ndarray:
        return name_mask(names, predicate, name_codes)

    def by_cat(*wanted: str) -> np.ndarray:
        return name_mask(cats, lambda c: c in wanted, cat_codes)

    complete = (events["ph"] == "X").to_numpy()
    kernel = by_cat("kernel") & complete
    memcpy = by_cat("gpu_memcpy") & complete
    memset = by_cat("gpu_memset") & complete
    comm_kernel = kernel & by_name(lambda n: "nccl" in n.lower() or "rccl" in n.lower())
    h2d = memcpy & by_name(lambda n: "HtoD" in n)
    d2h = memcpy & by_name(lambda n: "DtoH" in n)
    runtime = by_cat("cuda_runtime", "cuda_driver") & complete
    cpu_like = by_cat("cpu_op", "user_annotation") & complete
    is_annotation = by_name(lambda n: n.startswith(ANNOTATION_PREFIXES))
    comm_op = cpu_like & by_name(lambda n: n.startswith(COMM_OP_PREFIXES))
    cpu_op = by_cat("cpu_op") & complete & ~is_annotation
    return Classified(
        complete=complete,
        gpu=kernel | memcpy | memset,
        kernel=kernel,
        comm_kernel=comm_kernel,
        memcpy=memcpy,
        memset=memset,
        h2d=h2d,
        d2h=d2h,
        pageable=memcpy & by_name(lambda n: "Pageable" in n),
        pinned=memcpy & by_name(lambda n: "Pinned" in n),
        runtime=runtime,
        launch=runtime & by_name(lambda n: bool(LAUNCH_RE.search(n))),
        sync_call=runtime & by_name(lambda n: n in SYNC_CALLS),
        item=cpu_op & by_name(lambda n: n in ITEM_OPS),
        cpu_op=cpu_op,
        comm_op=comm_op,
        dataloader=cpu_like & by_name(lambda n: n.startswith(DATALOADER_PREFIX) and "__next__" in n),
        optimizer=cpu_like & by_name(lambda n: n.startswith(OPTIMIZER_PREFIX)),
        memory=by_name(lambda n: n == "[memory]"),
        python=by_cat("python_function") & complete,
        top_ops=_top_level(events, cpu_op),
    )


def _top_level(events: pd.DataFrame, cpu_op: np.ndarray) -> np.ndarray:
    # computed once here: most metric families start from the top-level operators
    rows = np.flatnonzero(cpu_op)
    top = np.sort(outermost(events, rows)[0]) if len(rows) else rows
    top.setflags(write=False)  # shared by every caller
    return top


def find_windows(trace: Trace) -> tuple[Windows, bool]:
    """Find the trace's ProfilerStep windows, or one window over the whole trace.

    Returns:
        The windows and True when they are real ``ProfilerStep#N`` spans (False when the trace
        has none and the whole trace is one window, numbered -1).
    """
    ev = trace.events
    cats = ev["cat"]
    is_step = (
        name_mask(ev["name"], lambda n: STEP_RE.match(n) is not None)
        & (ev["ph"] == "X").to_numpy()
        & ~cat_mask(cats, ("gpu_user_annotation",))
    )
    if is_step.any():
        steps = ev.loc[is_step, ["name", "ts", "end"]].sort_values("ts")
        digits = steps["name"].astype(str).str.slice(len("ProfilerStep#"))
        if (digits.str.len() > 18).any():  # NOTE: past int64 (OverflowError); no profiler counts that far
            raise TraceError(
                f"{trace.path} has a step numbered ProfilerStep#{digits[digits.str.len() > 18].iloc[0][:40]}, "
                "past any count a profiler reaches; the trace is corrupt: re-record it"
            )
        numbers = digits.astype(np.int64).to_numpy()
        # Several threads may record the same step: keep the first span of each number.
        _, first = np.unique(numbers, return_index=True)
        keep = np.sort(first)
        start = steps["ts"].to_numpy()[keep]
        end = steps["end"].to_numpy()[keep]
        # NOTE: windows must be disjoint; a step that overruns the next one's start is cut there.
        end = np.minimum(end, np.r_[start[1:], np.inf])
        if (empty := ~(end > start)).any():
            # NOTE: steps of no length (dur 0, or starting together) made "Step time 0.0 ms"
            # with exit 0; a profiled step always takes time (issue #30 campaign)
            raise TraceError(
                f"{trace.path} has a step of no length (ProfilerStep#{numbers[keep][empty][0]}, or steps that "
                "start at the same time): it was not written by a profiler as it is; re-record it"
            )
        return Windows(numbers[keep], start, end), True
    real = (ev["ph"] == "X").to_numpy() & ~cat_mask(cats, ("Trace",)) & ev["ts"].notna().to_numpy()
    if not real.any():
        real = ev["ts"].notna().to_numpy()
    if not real.any():
        return Windows(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0)), False
    start = float(ev.loc[real, "ts"].min())
    end = float(ev.loc[real, "end"].max())
    if end <= start:
        end = start + 1.0
    return Windows(np.array([-1]), np.array([start]), np.array([end])), False


def launch_ts(events: pd.DataFrame, cls: Classified) -> np.ndarray:
    """For each event, the ts of the runtime call that launched it (own ts when unknown).

    GPU work runs after its launch; attributing it to the step that *launched* it (through
    the CUDA correlation id) keeps per-step counts right even when the device lags.
    """
    ts = events["ts"].to_numpy()
    corr = events["correlation"].to_numpy()
    rt = cls.runtime & (corr >= 0)
    if not rt.any():
        return ts
    rt_corr = corr[rt]
    rt_ts = ts[rt]
    uniq, first = np.unique(rt_corr, return_index=True)
    rows = np.flatnonzero(corr >= 0)  # only events with a correlation id can have a launch
    pos = np.clip(np.searchsorted(uniq, corr[rows]), 0, len(uniq) - 1)
    found = uniq[pos] == corr[rows]
    out = ts.copy()
    out[rows[found]] = rt_ts[first][pos[found]]
    return out
