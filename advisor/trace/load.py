"""Load torch.profiler / Kineto Chrome-trace JSON into one columnar table per rank.

A trace file can be hundreds of MB to GBs. Reading it with ``json.load`` builds a Python dict
per event and spends most of its time in the garbage collector, so this module:

* decodes the top level with msgspec, keeping each event as ``Raw`` (a zero-copy view of its
  bytes), so nothing per event is built yet;
* decodes the events in batches of ``BATCH_EVENTS`` into typed msgspec ``Struct``s that keep
  only the fields the analysis uses (unknown keys are skipped without building objects), and
  turns each batch straight into numpy columns; only one batch of Python objects is alive
  at a time, which keeps the peak memory near the file's size plus the final table;
* turns the garbage collector off while decoding (millions of small objects, no cycles);
* interns names, categories, pids/tids and the JSON args kept (shapes, dtypes, stacks) as
  categoricals, through dicts that assign codes at C speed.

A value of an unexpected type (a string id, a null name) sends its batch down a slower, untyped
path instead of failing. Nothing here imports torch or unpickles anything. Old Kineto category
names (``Operator``, ``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``) become the current ones.
"""

from __future__ import annotations

import gc
import gzip
import itertools
import mmap
import operator
import os
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


_NAN = float("nan")


class _Args(msgspec.Struct, frozen=True, gc=False):
    """The ``args`` fields the analysis reads (strictly typed: the fast path).

    Everything else in ``args`` is skipped by the decoder without building objects. JSON
    fragments that only a few ops carry (shapes, dtypes, stacks) stay ``Raw`` (a view into the
    file's bytes) and are interned later, once per distinct value.
    """

    ext_id: int = msgspec.field(default=MISSING, name="External id")
    ext_id_old: int = msgspec.field(default=MISSING, name="external id")
    correlation: int = MISSING
    bytes: int = MISSING
    stream: int = MISSING
    device: int = MISSING
    input_dims: msgspec.Raw = msgspec.field(default=None, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=None, name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=None, name="Concrete Inputs")
    call_stack: msgspec.Raw = msgspec.field(default=None, name="Call stack")
    total_allocated: int = msgspec.field(default=MISSING, name="Total Allocated")
    mem_bytes: int = msgspec.field(default=MISSING, name="Bytes")
    device_type: int = msgspec.field(default=MISSING, name="Device Type")
    device_id: int = msgspec.field(default=MISSING, name="Device Id")
    py_id: int = msgspec.field(default=MISSING, name="Python id")
    py_parent: int | None = msgspec.field(default=MISSING, name="Python parent id")
    flops: int | float = _NAN


_NO_ARGS = _Args()


class _Event(msgspec.Struct, gc=False):
    """One Chrome-trace event, reduced to the fields the analysis reads (fast path)."""

    name: str = ""
    cat: str = ""
    ph: str = ""
    ts: float = _NAN
    dur: float = 0.0
    pid: int | str = MISSING
    tid: int | str = MISSING
    args: _Args = _NO_ARGS


class _LooseArgs(msgspec.Struct, frozen=True, gc=False):
    """Same fields as :class:`_Args`, untyped: for traces whose args break the fast path."""

    ext_id: Any = msgspec.field(default=MISSING, name="External id")
    ext_id_old: Any = msgspec.field(default=MISSING, name="external id")
    correlation: Any = MISSING
    bytes: Any = MISSING
    stream: Any = MISSING
    device: Any = MISSING
    input_dims: msgspec.Raw = msgspec.field(default=None, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=None, name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=None, name="Concrete Inputs")
    call_stack: msgspec.Raw = msgspec.field(default=None, name="Call stack")
    total_allocated: Any = msgspec.field(default=MISSING, name="Total Allocated")
    mem_bytes: Any = msgspec.field(default=MISSING, name="Bytes")
    device_type: Any = msgspec.field(default=MISSING, name="Device Type")
    device_id: Any = msgspec.field(default=MISSING, name="Device Id")
    py_id: Any = msgspec.field(default=MISSING, name="Python id")
    py_parent: Any = msgspec.field(default=MISSING, name="Python parent id")
    flops: Any = _NAN


_NO_LOOSE_ARGS = _LooseArgs()


class _LooseEvent(msgspec.Struct, gc=False):
    """An event with untyped fields (slow path)."""

    name: Any = ""
    cat: Any = ""
    ph: Any = ""
    ts: Any = _NAN
    dur: Any = 0.0
    pid: Any = MISSING
    tid: Any = MISSING
    args: Any = _NO_LOOSE_ARGS


class _Head(msgspec.Struct, gc=False):
    """The top level of a trace file: events kept as raw JSON, plus the metadata we keep."""

    traceEvents: msgspec.Raw = None  # noqa: N815 - the file's own key; the whole array, unparsed
    deviceProperties: Any = None  # noqa: N815
    distributedInfo: Any = None  # noqa: N815
    baseTimeNanoseconds: Any = None  # noqa: N815
    schemaVersion: Any = None  # noqa: N815
    with_stack: Any = None
    record_shapes: Any = None
    profile_memory: Any = None
    with_flops: Any = None


_HEAD = msgspec.json.Decoder(_Head)
_BATCH = msgspec.json.Decoder(list[_Event])
_LOOSE_BATCH = msgspec.json.Decoder(list[_LooseEvent])
_LOOSE_ARGS = msgspec.json.Decoder(_LooseArgs)
BATCH_EVENTS = 65536
"""Events decoded into Python objects at a time: bounds the memory of the object stage."""
BATCH_BYTES = 1 << 24
"""Bytes of events per batch on the fast path (about 30-60 thousand events)."""
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])


class _BadSplit(Exception):
    """A newline split did not fall between two events: use the safe path."""


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
            (float, NaN when absent) and the categoricals ``input_dims``, ``input_type``,
            ``concrete_inputs`` (JSON text; kept for the matmul/conv ops of ``SHAPE_OPS``) and
            ``call_stack`` (str; every operator), NaN when absent.
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
    """Find the trace files under ``path``: the file itself, or ``*.json[.gz]`` found recursively.

    In a folder, files named like torch.profiler's ``*.pt.trace.json[.gz]`` win when there are
    any; otherwise every ``*.json``/``*.json.gz`` file is taken as a trace.

    Raises:
        TraceError: The path does not exist, or a directory holds no trace file.
    """
    path = Path(path)
    if not path.exists():
        raise TraceError(f"trace path {path} does not exist; pass a .json/.json.gz trace or a folder of them")
    if path.is_file():
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and _is_trace_name(p))
    # NOTE: torch.profiler names its files *.pt.trace.json[.gz]; when a folder has any, other
    # JSON files next to them (capture.json, reports, goldens) are not traces.
    named = [p for p in files if ".pt.trace.json" in p.name]
    files = named or [p for p in files if p.name != "capture.json"]
    if not files:
        raise TraceError(f"no *.json or *.json.gz trace files found under {path}; point at a torch.profiler trace or its folder")
    return files


def _read_bytes(path: Path) -> Any:
    """Read the file's (decompressed) bytes; TraceError for empty or truncated files.

    Plain files are memory-mapped (read-only): the decoder reads the page cache directly
    instead of a private copy of the whole file. Gzip files are decompressed into memory.
    """
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
            if magic != b"\x1f\x8b":
                size = os.fstat(fh.fileno()).st_size
                if size == 0:
                    raise TraceError(f"trace {path} is empty; re-record it with torch.profiler")
                data: Any
                if hasattr(mmap, "MAP_SHARED"):
                    # MAP_POPULATE (Linux) maps the cached pages in one go, not one fault each
                    flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
                    data = mmap.mmap(fh.fileno(), 0, flags=flags, prot=mmap.PROT_READ)
                else:  # pragma: no cover - Windows
                    data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
                if data[: min(size, 4096)].isspace() and data[:].isspace():
                    raise TraceError(f"trace {path} is empty; re-record it with torch.profiler")
                return data
            fh.seek(0)
            raw = fh.read()
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror or exc}") from exc
    try:
        raw = gzip.decompress(raw)
    except (EOFError, OSError, zlib.error) as exc:
        raise TraceError(f"trace {path} is a truncated or corrupt gzip file ({exc}); re-copy or re-record it") from exc
    if not raw or raw.isspace():
        raise TraceError(f"trace {path} is empty; re-record it with torch.profiler")
    return raw


def _first_line(text: str) -> str:
    return " ".join(str(text).split())[:200]


def _decode_head(path: Path) -> tuple[_Head, Any]:
    raw = _read_bytes(path)
    try:
        with _gc_paused():
            head = _HEAD.decode(raw)
    except msgspec.ValidationError as exc:
        raise TraceError(f"{path} is not a torch.profiler trace ({_first_line(str(exc))})") from exc
    except msgspec.DecodeError as exc:
        raise TraceError(f"{path} is not valid JSON ({_first_line(str(exc))}); the file may be truncated") from exc
    events = head.traceEvents
    if events is None or not bytes(memoryview(events)[:1]) == b"[":
        raise TraceError(f"{path} is JSON but not a Chrome trace (no traceEvents); pass a torch.profiler trace")
    return head, raw


class _Interner(dict):
    """Global codes for a categorical column built batch by batch.

    A dict from raw value to code whose ``__missing__`` assigns the next code (merging values
    whose ``key`` is equal, e.g. pid ``25738`` and ``"25738"``): encoding a batch is one
    C-level ``map`` of ``__getitem__``, with Python code only for values seen the first time.
    """

    def __init__(self, key: Any = None, empty: Any = None) -> None:
        super().__init__()
        self.codes: dict[Any, int] = {}  # normalised key -> code
        self.values: list[Any] = []
        self.key = key
        self.empty = empty

    def __missing__(self, value: Any) -> int:
        if value is None or (self.empty is not None and type(value) is type(self.empty) and value == self.empty):
            code = -1
        else:
            k = self.key(value) if self.key else value
            code = self.codes.get(k, -2)
            if code == -2:
                code = self.codes[k] = len(self.values)
                self.values.append(k)
        self[value] = code
        return code

    def encode(self, values: Any, n: int) -> np.ndarray:
        """Codes (int32; -1 for None or for the field's "absent" default) of ``n`` values."""
        return np.fromiter(map(self.__getitem__, values), dtype=np.int32, count=n)

    def categorical(self, codes: np.ndarray) -> pd.Categorical:
        cats = pd.Index(self.values, dtype=object) if self.values else pd.Index([], dtype=object)
        return pd.Categorical.from_codes(codes, categories=cats)


def _raw_key(raw: Any) -> str:
    return bytes(raw).decode("utf-8", errors="replace")


def _stack_key(raw: Any) -> str:
    # "Call stack" is a JSON string: decode it once per distinct value
    try:
        value = msgspec.json.decode(bytes(raw))
    except msgspec.DecodeError:
        value = None
    return value if isinstance(value, str) else bytes(raw).decode("utf-8", errors="replace")


def _loose_args(value: Any) -> Any:
    """Args of the loose path (decoded as plain JSON) -> a :class:`_LooseArgs`."""
    if isinstance(value, dict):
        try:
            return _LOOSE_ARGS.decode(msgspec.json.encode(value))
        except (msgspec.DecodeError, msgspec.EncodeError):
            return _NO_LOOSE_ARGS
    return value if isinstance(value, _LooseArgs) else _NO_LOOSE_ARGS


def _num(values: Any, n: int, default: float) -> np.ndarray:
    """``n`` numbers -> float64, at C speed when they are all numbers (the strict path).

    ``values`` is an iterator (strict path: consumed once by ``fromiter``) or a list (loose
    path); anything that is not a number becomes ``default`` on the slow path.
    """
    if not isinstance(values, list):
        return np.fromiter(values, dtype=np.float64, count=n)
    try:
        return np.fromiter(values, dtype=np.float64, count=n)
    except (TypeError, ValueError):
        return np.array(
            [float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default for v in values],
            dtype=np.float64,
        )


_INT_ATTRS = ("correlation", "bytes", "stream", "device", "total_allocated", "mem_bytes",
              "device_type", "device_id", "py_id", "py_parent")
# Operators whose "Input Dims" / "Input type" / "Concrete Inputs" are kept: the matmul and
# convolution family the FLOP count and the dtype mix use (a few per step, out of thousands
# of ops; decoding every op's shapes would cost a fifth of the load time on big traces).
SHAPE_OPS = frozenset(
    {
        "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
        "aten::einsum", "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution",
        "aten::_convolution", "aten::convolution_backward", "aten::conv_transpose2d",
        "aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention",
    }
)
# Categories (after renaming old names) whose events carry the args below.
_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation")
_HOST_CATS = ("cpu_op", "user_annotation")
_RAW_ATTRS = (("input_dims", "input_dims"), ("input_type", "input_type"),
              ("concrete", "concrete_inputs"), ("call_stack", "call_stack"))


class _Columns:
    """Accumulates column chunks batch by batch, then builds the events frame."""

    def __init__(self) -> None:
        self.names = _Interner()
        self.cats = _Interner(key=lambda c: CATEGORY_ALIASES.get(c, c), empty="")
        self.phs = _Interner()
        # pid/tid are ints in new traces and sometimes strings ("stream 7") in old ones
        self.pids = _Interner(key=str, empty=MISSING)
        self.tids = _Interner(key=str, empty=MISSING)
        self.raws = {col: _Interner(key=_stack_key if attr == "call_stack" else _raw_key) for attr, col in _RAW_ATTRS}
        self.chunks: dict[str, list[np.ndarray]] = {}

    def _add(self, col: str, arr: np.ndarray) -> None:
        self.chunks.setdefault(col, []).append(arr)

    def _rows(self, codes: np.ndarray, interner: _Interner, wanted: tuple[str, ...]) -> np.ndarray:
        ids = [interner.codes[w] for w in wanted if w in interner.codes]
        return np.flatnonzero(np.isin(codes, ids)) if ids else np.zeros(0, dtype=np.int64)

    def add_batch(self, events: list[Any]) -> None:
        """Append one decoded batch to the columns.

        Args are read only for the event kinds that carry them (ids and shapes on operators,
        stream/bytes on device events, memory fields on ``[memory]`` instants, frame ids on
        ``python_function`` events): a field read costs one C-level pass over its rows.
        """
        get = operator.attrgetter
        n = len(events)
        name_codes = self.names.encode(map(get("name"), events), n)
        cat_codes = self.cats.encode(map(get("cat"), events), n)
        self._add("name", name_codes)
        self._add("cat", cat_codes)
        self._add("ph", self.phs.encode(map(get("ph"), events), n))
        self._add("pid", self.pids.encode(map(get("pid"), events), n))
        self._add("tid", self.tids.encode(map(get("tid"), events), n))
        loose = bool(events) and isinstance(events[0], _LooseEvent)

        def column(items: list[Any], attr: str, default: float) -> np.ndarray:
            values = map(get(attr), items)
            if not loose and attr != "py_parent":
                return _num(values, len(items), default)
            # loose path, or the one field that may be null (a root Python frame)
            listed = [default if v is None else v for v in values]
            return _num(listed, len(items), default)

        picked: dict[int, list[Any]] = {}

        def pick(rows: np.ndarray) -> list[Any]:
            # the args of some rows, gathered once per row set (C-level itemgetter)
            key = id(rows)
            if key not in picked:
                if len(rows) == 0:
                    picked[key] = []
                elif len(rows) == 1:
                    picked[key] = [args[int(rows[0])]]
                else:
                    picked[key] = list(operator.itemgetter(*rows.tolist())(args))
            return picked[key]

        def subset(rows: np.ndarray, attr: str, default: float) -> np.ndarray:
            out = np.full(n, default, dtype=np.float64)
            if len(rows):
                out[rows] = column(pick(rows), attr, default)
            return out

        self._add("ts", column(events, "ts", _NAN))
        self._add("dur", column(events, "dur", 0.0))
        args = list(map(get("args"), events))
        if loose:
            args = [_loose_args(a) for a in args]
        device_rows = self._rows(cat_codes, self.cats, _DEVICE_CATS)
        host_rows = self._rows(cat_codes, self.cats, _HOST_CATS)
        memory_rows = self._rows(name_codes, self.names, ("[memory]",))
        python_rows = self._rows(cat_codes, self.cats, ("python_function",))
        corr_rows = np.union1d(device_rows, self._rows(cat_codes, self.cats, ("cuda_runtime", "cuda_driver")))
        ext = column(args, "ext_id", MISSING)
        # old traces spell it "external id" on runtime and GPU events: read that spelling only
        # where the first one is missing
        retry = np.union1d(corr_rows, host_rows)
        retry = retry[ext[retry] == MISSING]
        if len(retry):
            ext[retry] = column(pick(retry), "ext_id_old", MISSING)
        self._add("ext_id", ext)
        self._add("correlation", subset(corr_rows, "correlation", MISSING))
        for attr in ("bytes", "stream", "device"):
            self._add(attr, subset(device_rows, attr, MISSING))
        for attr in ("total_allocated", "mem_bytes", "device_type", "device_id"):
            self._add(attr, subset(memory_rows, attr, MISSING))
        for attr in ("py_id", "py_parent"):
            self._add(attr, subset(python_rows, attr, MISSING))
        self._add("flops", subset(host_rows, "flops", _NAN))
        host_args = pick(host_rows)
        shape_ids = [self.names.codes[k] for k in SHAPE_OPS if k in self.names.codes]
        shaped = host_rows[np.isin(name_codes[host_rows], shape_ids)] if shape_ids else host_rows[:0]
        shaped_args = pick(shaped)
        for attr, col in _RAW_ATTRS:
            # shapes and dtypes only for the ops that use them; stacks for every operator
            rows_for, args_for = (host_rows, host_args) if attr == "call_stack" else (shaped, shaped_args)
            values = list(map(get(attr), args_for))
            codes = np.full(n, -1, dtype=np.int32)
            if values:
                present = np.fromiter(map(operator.is_not, values, itertools.repeat(None)), dtype=bool, count=len(values))
                idx = np.flatnonzero(present)
                if len(idx):
                    chosen = values if len(idx) == len(values) else [values[i] for i in idx.tolist()]
                    codes[rows_for[idx]] = self.raws[col].encode(map(bytes, chosen), len(idx))
            self._add(col, codes)

    def frame(self) -> pd.DataFrame:
        def cat(col: str) -> np.ndarray:
            return np.concatenate(self.chunks[col]) if col in self.chunks else np.zeros(0, dtype=np.int32)

        def num(col: str) -> np.ndarray:
            return np.concatenate(self.chunks[col]) if col in self.chunks else np.zeros(0)

        cols: dict[str, Any] = {
            "name": self.names.categorical(cat("name")),
            "cat": self.cats.categorical(cat("cat")),
            "ph": self.phs.categorical(cat("ph")),
            "pid": self.pids.categorical(cat("pid")),
            "tid": self.tids.categorical(cat("tid")),
        }
        ts = num("ts")
        dur = num("dur")
        cols["ts"] = ts
        cols["dur"] = dur
        cols["end"] = ts + dur
        for col in ("ext_id", *_INT_ATTRS):
            arr = num(col)
            arr[~np.isfinite(arr)] = MISSING
            cols[col] = arr.astype(np.int64)
        cols["flops"] = num("flops")
        for _attr, col in _RAW_ATTRS:
            cols[col] = self.raws[col].categorical(cat(col))
        return pd.DataFrame(cols, copy=False)


def _address(buffer: Any) -> int:
    """Memory address of a buffer's first byte (to locate Raw views inside the file buffer)."""
    return int(np.frombuffer(buffer, dtype=np.uint8, count=1).__array_interface__["data"][0])


class _Framer:
    """Copies byte ranges of the file buffer, wrapped in ``[`` ``]``, into one reused buffer."""

    def __init__(self, raw: Any) -> None:
        self.source = memoryview(raw)
        self.buf = bytearray()

    def frame(self, start: int, stop: int) -> memoryview:
        size = stop - start + 2
        if len(self.buf) < size:
            self.buf = bytearray(size)  # NOTE: a fresh buffer; earlier views were released
        view = memoryview(self.buf)
        view[0] = 0x5B  # [
        view[1 : size - 1] = self.source[start:stop]
        view[size - 1] = 0x5D  # ]
        out = view[:size]
        view.release()
        return out


def _line_ranges(raw: Any, start: int, stop: int) -> list[tuple[int, int]] | None:
    """Split the array body ``raw[start:stop]`` into runs of whole events at newlines.

    Kineto writes one event per line, so an element boundary is a ``,`` then a newline then
    ``{``. Raw newlines cannot occur inside JSON strings, and a split inside a nested value
    would leave a batch with unbalanced brackets, which then fails to decode: callers fall back
    to the safe path. Returns None when the file has no usable line breaks.
    """
    ranges: list[tuple[int, int]] = []
    a = start
    while stop - a > BATCH_BYTES:
        pos = a + BATCH_BYTES
        cut = None
        for _ in range(1000):
            nl = raw.find(b"\n", pos, stop)
            if nl < 0:
                break
            j = nl - 1
            while j > a and raw[j] in (0x20, 0x09, 0x0D):
                j -= 1
            k = nl + 1
            while k < stop and raw[k] in (0x20, 0x09, 0x0D, 0x0A):
                k += 1
            if raw[j] == 0x2C and k < stop and raw[k] == 0x7B:
                cut = (j, k)
                break
            pos = nl + 1
        if cut is None:
            break
        ranges.append((a, cut[0]))
        a = cut[1]
    ranges.append((a, stop))
    if any(b - a > 4 * BATCH_BYTES for a, b in ranges):
        return None  # one line holds too much: the safe path bounds memory better
    return ranges


def _batches(raw: Any, raw_events: list[msgspec.Raw]) -> Iterator[memoryview]:
    """JSON arrays of ``BATCH_EVENTS`` events each (safe path), as views of one reused buffer.

    ``Raw`` values are zero-copy views into the input buffer and the events lie in it in
    order, so a batch is one slice from its first event's start to its last event's end
    (checked; otherwise the events are joined one by one). Each yielded view must be
    released before the next one is requested.
    """
    source = memoryview(raw)
    base = _address(raw)
    framer = _Framer(raw)
    for i in range(0, len(raw_events), BATCH_EVENTS):
        part = raw_events[i : i + BATCH_EVENTS]
        first, last = part[0], part[-1]
        start = _address(first) - base
        stop = _address(last) - base + len(last)
        if (
            0 <= start < stop <= len(source)
            and source[start : start + len(first)] == memoryview(first)
            and source[stop - len(last) : stop] == memoryview(last)
        ):
            yield framer.frame(start, stop)
        else:  # pragma: no cover - msgspec always views its input; kept as a safe fallback
            yield memoryview(b"[" + b",".join(part) + b"]")


def _decode_chunks(path: Path, chunks: Any, fast: bool) -> pd.DataFrame:
    """Decode batches into typed structs and straight into columns."""
    columns = _Columns()
    for chunk in chunks:
        try:
            batch: list[Any] = _BATCH.decode(chunk)
        except msgspec.ValidationError:
            # NOTE: an odd value somewhere (a string id, a null name): decode it loosely.
            try:
                batch = _LOOSE_BATCH.decode(chunk)
            except msgspec.ValidationError as exc:
                if fast:
                    raise _BadSplit from exc
                raise TraceError(f"{path} has malformed events ({_first_line(str(exc))})") from exc
            except msgspec.DecodeError as exc:
                raise _BadSplit from exc
        except msgspec.DecodeError as exc:
            # the whole file parsed already, so only a bad split can fail here
            raise _BadSplit from exc
        columns.add_batch(batch)
        del batch  # drops the Raw views into the chunk before the buffer is reused
        chunk.release()
    return columns.frame()


def _events_frame(path: Path, raw: Any, events: msgspec.Raw) -> pd.DataFrame:
    """Decode the ``traceEvents`` array (a Raw view into ``raw``) into the events table.

    Fast path: batches cut at line breaks between events. Safe path (files without line
    breaks, or a cut that does not decode): one ``Raw`` per event first, then batches of
    ``BATCH_EVENTS`` events.
    """
    base = _address(raw)
    start = _address(events) - base
    stop = start + len(events)
    body = (start + 1, stop - 1)
    ranges = _line_ranges(raw, *body)
    if ranges is not None:
        framer = _Framer(raw)
        try:
            return _decode_chunks(path, (framer.frame(a, b) for a, b in ranges), fast=True)
        except _BadSplit:
            pass
    raw_events = _RAW_LIST.decode(events)
    if not raw_events:
        return _Columns().frame()
    return _decode_chunks(path, _batches(raw, raw_events), fast=False)


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
    head, raw = _decode_head(path)
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
        value = getattr(head, key)
        if value is not None:
            metadata[key] = value
    events = head.traceEvents
    head.traceEvents = None
    with _gc_paused():
        frame = _events_frame(path, raw, events)
    del events, raw
    rank = index
    info = metadata.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
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
