"""Load torch.profiler / Kineto Chrome-trace JSON into one columnar table per rank.

A trace file can be hundreds of MB to GBs. Reading it with ``json.load`` builds a Python dict
per event and spends most of its time in the garbage collector, so this module:

* decodes with msgspec into typed ``Struct``s that keep only the fields the analysis uses
  (unknown keys are skipped by the decoder without building Python objects);
* turns the garbage collector off while decoding (millions of small objects, no cycles);
* converts the structs column by column into a :class:`pandas.DataFrame` with interned
  (categorical) names, then drops the structs.

Nothing here imports torch or unpickles anything. Old Kineto category names (``Operator``,
``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``) are rewritten to the current ones.
"""

from __future__ import annotations

import gc
import gzip
import re
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from advisor.errors import TraceError

# Old Kineto category names -> the current ones (Kineto renamed them around torch 1.10).
CATEGORY_ALIASES: dict[str, str] = {
    "Operator": "cpu_op",
    "Runtime": "cuda_runtime",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
}

MISSING = -1
"""Value of integer columns (ids, bytes, stream, ...) where the event has no such field."""

_INT_COLUMNS = (
    "ext_id",
    "correlation",
    "bytes",
    "stream",
    "device",
    "total_allocated",
    "mem_bytes",
    "device_type",
    "device_id",
    "py_id",
    "py_parent",
)


class _Args(msgspec.Struct, gc=False):
    """The ``args`` fields the analysis reads; everything else is skipped while decoding."""

    ext_id: Any = msgspec.field(default=None, name="External id")
    ext_id_old: Any = msgspec.field(default=None, name="external id")
    correlation: Any = None
    bytes: Any = None
    stream: Any = None
    device: Any = None
    input_dims: msgspec.Raw = msgspec.field(default=None, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=None, name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=None, name="Concrete Inputs")
    call_stack: str | None = msgspec.field(default=None, name="Call stack")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    mem_bytes: Any = msgspec.field(default=None, name="Bytes")
    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    py_id: Any = msgspec.field(default=None, name="Python id")
    py_parent: Any = msgspec.field(default=None, name="Python parent id")
    flops: Any = None


class _Event(msgspec.Struct, gc=False):
    """One Chrome-trace event, reduced to the fields the analysis reads."""

    name: str = ""
    cat: str | None = None
    ph: str = ""
    ts: float | None = None
    dur: float | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    args: _Args | None = None


class _TraceFile(msgspec.Struct, gc=False):
    """The top level of a trace file: events plus the metadata blocks we keep."""

    traceEvents: list[_Event] | None = None  # noqa: N815 - the file's own key
    deviceProperties: list[dict[str, Any]] | None = None  # noqa: N815
    distributedInfo: dict[str, Any] | None = None  # noqa: N815
    baseTimeNanoseconds: int | None = None  # noqa: N815
    schemaVersion: int | None = None  # noqa: N815
    with_stack: int | bool | None = None
    record_shapes: int | bool | None = None
    profile_memory: int | bool | None = None
    with_flops: int | bool | None = None


_DECODER = msgspec.json.Decoder(_TraceFile)


@dataclass(frozen=True)
class Trace:
    """One rank's trace as a table.

    Attributes:
        path: The file it came from.
        rank: ``distributedInfo.rank`` when present, else the file's position in its folder.
        events: One row per event. Columns: ``name``, ``cat``, ``ph``, ``pid``, ``tid``
            (categoricals; pid/tid as strings), ``ts``, ``dur``, ``end`` (float us; ``dur``
            is 0 for instants), the integer args ``ext_id``, ``correlation``, ``bytes``,
            ``stream``, ``device``, ``total_allocated``, ``mem_bytes``, ``device_type``,
            ``device_id``, ``py_id``, ``py_parent`` (``MISSING`` = -1 when absent), ``flops``
            (float, NaN when absent) and the object columns ``input_dims``, ``input_type``,
            ``concrete_inputs`` (JSON text), ``call_stack`` (str) -- None when absent.
        metadata: ``deviceProperties``, ``distributedInfo``, ``baseTimeNanoseconds``,
            ``schemaVersion`` and the profiler flags (``with_stack``, ...), where present.
    """

    path: Path
    rank: int
    events: pd.DataFrame = field(repr=False)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def device_properties(self) -> list[dict[str, Any]]:
        """The trace's ``deviceProperties`` list (empty for CPU-only traces)."""
        return list(self.metadata.get("deviceProperties") or [])


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Disable the cyclic garbage collector for a block (restores its previous state)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


_TRACE_SUFFIXES = (".json", ".json.gz")


def _is_trace_name(path: Path) -> bool:
    return path.name.endswith(_TRACE_SUFFIXES)


def find_trace_files(path: Path) -> list[Path]:
    """The trace files under ``path``: the file itself, or ``*.json[.gz]`` found recursively.

    Raises:
        TraceError: The path does not exist, or a directory holds no trace file.
    """
    path = Path(path)
    if not path.exists():
        raise TraceError(f"trace path {path} does not exist; pass a .json/.json.gz trace or a folder of them")
    if path.is_file():
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and _is_trace_name(p))
    # NOTE: an advisor run directory holds capture.json next to traces/; it is not a trace.
    files = [p for p in files if p.name != "capture.json"]
    if not files:
        raise TraceError(f"no *.json or *.json.gz trace files found under {path}; point at a torch.profiler trace or its folder")
    return files


def _read_bytes(path: Path) -> bytes:
    """The file's decompressed bytes; TraceError for empty or truncated files."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror or exc}") from exc
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as exc:
            raise TraceError(f"trace {path} is a truncated or corrupt gzip file ({exc}); re-copy or re-record it") from exc
    if not raw.strip():
        raise TraceError(f"trace {path} is empty; re-record it with torch.profiler")
    return raw


def _first_line(text: str) -> str:
    return " ".join(str(text).split())[:200]


def _decode(path: Path) -> _TraceFile:
    raw = _read_bytes(path)
    try:
        with _gc_paused():
            doc = _DECODER.decode(raw)
    except msgspec.ValidationError as exc:
        raise TraceError(f"{path} is not a torch.profiler trace ({_first_line(str(exc))})") from exc
    except msgspec.DecodeError as exc:
        raise TraceError(f"{path} is not valid JSON ({_first_line(str(exc))}); the file may be truncated") from exc
    if doc.traceEvents is None:
        raise TraceError(f"{path} is JSON but not a Chrome trace (no traceEvents); pass a torch.profiler trace")
    return doc


def _raw_text(values: list[msgspec.Raw | None]) -> np.ndarray:
    """Raw JSON fragments -> object array of str (None kept), so the file buffer can be freed."""
    out = np.empty(len(values), dtype=object)
    cache: dict[bytes, str] = {}
    for i, raw in enumerate(values):
        if raw is not None:
            b = bytes(raw)
            s = cache.get(b)
            if s is None:
                s = cache[b] = b.decode("utf-8")
            out[i] = s
    return out


def _number(value: Any, default: float) -> float:
    """A JSON scalar as float; ``default`` for None, strings and other odd values."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return default


def _float_col(values: list[Any], default: float) -> np.ndarray:
    """Optional numbers -> float64 (``default`` where missing or not a number)."""
    try:
        return np.array([default if v is None else v for v in values], dtype=np.float64)
    except (TypeError, ValueError):
        # NOTE: rare hand-edited or foreign traces put strings in numeric args: coerce slowly.
        return np.array([_number(v, default) for v in values], dtype=np.float64)


def _int_col(values: list[Any]) -> np.ndarray:
    """Optional ints -> int64 with MISSING for None or non-numbers."""
    arr = _float_col(values, float(MISSING))
    arr[~np.isfinite(arr)] = MISSING
    return arr.astype(np.int64)


def _categorical(values: list[Any]) -> pd.Categorical:
    return pd.Categorical(values)


def _events_frame(events: list[_Event]) -> pd.DataFrame:
    """Structs -> columns. One pass per column keeps peak memory to one column at a time."""
    n = len(events)
    cols: dict[str, Any] = {}
    cols["name"] = _categorical([e.name for e in events])
    cat = pd.Categorical([e.cat for e in events])
    # NOTE: rename categories (not values): cheap, and merges old and new names if both occur.
    cats = [CATEGORY_ALIASES.get(c, c) for c in cat.categories]
    if len(set(cats)) != len(cats):
        cat = pd.Categorical(np.asarray(cat, dtype=object))
        cat = pd.Categorical([CATEGORY_ALIASES.get(c, c) if c is not None else None for c in cat])
    else:
        cat = cat.rename_categories(cats)
    cols["cat"] = cat
    cols["ph"] = _categorical([e.ph for e in events])
    # pid/tid are ints in new traces and sometimes strings ("stream 7", "25738") in old ones.
    cols["pid"] = pd.Categorical([None if e.pid is None else str(e.pid) for e in events])
    cols["tid"] = pd.Categorical([None if e.tid is None else str(e.tid) for e in events])
    ts = np.array([np.nan if e.ts is None else e.ts for e in events], dtype=np.float64)
    dur = np.array([0.0 if e.dur is None else e.dur for e in events], dtype=np.float64)
    cols["ts"] = ts
    cols["dur"] = dur
    cols["end"] = ts + dur
    args = [e.args for e in events]
    del events
    empty = _Args()
    args = [a if a is not None else empty for a in args]
    ext = _int_col([a.ext_id if a.ext_id is not None else a.ext_id_old for a in args])
    cols["ext_id"] = ext
    for name in _INT_COLUMNS[1:]:
        cols[name] = _int_col([getattr(a, name) for a in args])
    cols["flops"] = _float_col([a.flops for a in args], np.nan)
    cols["input_dims"] = _raw_text([a.input_dims for a in args])
    cols["input_type"] = _raw_text([a.input_type for a in args])
    cols["concrete_inputs"] = _raw_text([a.concrete for a in args])
    stacks = np.empty(n, dtype=object)
    stacks[:] = [a.call_stack for a in args]
    cols["call_stack"] = stacks
    return pd.DataFrame(cols, copy=False)


def load_trace(path: Path, index: int = 0) -> Trace:
    """Load one trace file.

    Args:
        path: A ``.json`` or ``.json.gz`` Chrome trace written by torch.profiler / Kineto.
        index: Rank to use when the trace has no ``distributedInfo.rank``.

    Raises:
        TraceError: The file is missing, empty, truncated, not JSON or not a trace.
    """
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"trace file {path} does not exist; pass a .json/.json.gz trace")
    doc = _decode(path)
    metadata: dict[str, Any] = {}
    for key in (
        "deviceProperties",
        "distributedInfo",
        "baseTimeNanoseconds",
        "schemaVersion",
        "with_stack",
        "record_shapes",
        "profile_memory",
        "with_flops",
    ):
        value = getattr(doc, key)
        if value is not None:
            metadata[key] = value
    events_list = doc.traceEvents or []
    doc.traceEvents = None
    with _gc_paused():
        frame = _events_frame(events_list)
        del events_list
    rank = index
    info = metadata.get("distributedInfo") or {}
    if isinstance(info.get("rank"), int):
        rank = int(info["rank"])
    return Trace(path=path, rank=rank, events=frame, metadata=metadata)




def load_traces(path: str | Path) -> tuple[Trace, ...]:
    """Load a trace file, or every trace file of a folder (one per rank), sorted by rank.

    Args:
        path: A ``.json``/``.json.gz`` file, or a folder (TensorBoard layout) searched
            recursively for such files.

    Returns:
        One :class:`Trace` per file, ordered by rank.

    Raises:
        TraceError: With a one-line message for a missing path, an empty folder, or a file
            that is empty, truncated, not JSON or not a trace.
    """
    files = find_trace_files(Path(path))
    traces = [load_trace(p, index=i) for i, p in enumerate(files)]
    ranks = [t.rank for t in traces]
    if len(set(ranks)) != len(ranks):
        # NOTE: several files claim the same rank (e.g. repeated captures of one process):
        # keep file order as the rank so each file stays distinguishable.
        traces = [Trace(path=t.path, rank=i, events=t.events, metadata=t.metadata) for i, t in enumerate(traces)]
    return tuple(sorted(traces, key=lambda t: t.rank))
