"""Load torch.profiler / Kineto Chrome-trace JSON into one columnar table per rank.

A trace file can be hundreds of MB to GBs. Reading it with ``json.load`` builds a Python dict
per event and spends most of its time in the garbage collector, so this module:

* memory-maps plain files copy-on-write (no private copy of the file) and finds the
  ``traceEvents`` array without parsing the events (:func:`_locate_events`; a full parse of
  the head is the fallback);
* cuts the array at line breaks into batches of about ``BATCH_BYTES`` and decodes each batch
  in place (two separator bytes are swapped for ``[``/``]`` during the decode and restored)
  into typed msgspec ``Struct``s that keep only the fields the analysis uses (unknown keys are
  skipped without building objects); a batch's objects stay in the CPU caches while they are
  turned into numpy columns, and only one batch of Python objects is alive at a time, which
  keeps the peak memory near the file's size plus the final table;
* turns the garbage collector off while decoding (millions of small objects, no cycles);
* interns each event's ``(name, cat, ph, pid, tid)`` tuple in one C-level pass and splits the
  few hundred distinct tuples into categoricals through lookup tables; reads args only on the
  rows of the event kinds that carry them, kept sparse until the table is built.

A value of an unexpected type (a string id, a null name) sends its batch down a slower, untyped
path instead of failing; a file laid out differently (no line breaks, a cut inside an event)
goes down a safe path that decodes one ``Raw`` per event. Nothing here imports torch or
unpickles anything. Old Kineto category names (``Operator``, ``Runtime``, ``Kernel``,
``Memcpy``, ``Memset``) become the current ones.
"""

from __future__ import annotations

import gc
import itertools
import json
import mmap
import operator
import os
import re
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

_NAN = float("nan")


class _Args(msgspec.Struct, frozen=True, gc=False):
    """The ``args`` fields the analysis reads (strictly typed: the fast path).

    Everything else in ``args`` is skipped by the decoder without building objects. JSON
    fragments that only a few ops carry (shapes, dtypes) stay ``Raw`` (a view into the file's
    bytes) and are interned later, once per distinct value.
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
    # a str, not Raw: interned by value anyway, and this spares a bytes copy per operator
    call_stack: str | None = msgspec.field(default=None, name="Call stack")
    total_allocated: int = msgspec.field(default=MISSING, name="Total Allocated")
    mem_bytes: int = msgspec.field(default=MISSING, name="Bytes")
    device_type: int = msgspec.field(default=MISSING, name="Device Type")
    device_id: int = msgspec.field(default=MISSING, name="Device Id")
    py_id: int = msgspec.field(default=MISSING, name="Python id")
    py_parent: int | None = msgspec.field(default=MISSING, name="Python parent id")
    seq_nr: int = msgspec.field(default=MISSING, name="Sequence number")
    flops: int | float = _NAN


_NO_ARGS = _Args()


class _Event(msgspec.Struct, gc=False):
    """One Chrome-trace event, reduced to the fields the analysis reads (fast path).

    The fields are in the order Kineto writes them: msgspec looks a key up starting from the
    field after the last one matched.
    """

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = MISSING
    tid: int | str = MISSING
    ts: float = _NAN
    dur: float = 0.0
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
    seq_nr: Any = msgspec.field(default=MISSING, name="Sequence number")
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
BATCH_BYTES = 1 << 20
"""Bytes of events per batch on the fast path (a few thousand events: the objects of one batch
stay in the CPU caches while their fields are read column by column)."""
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
            ``device_id``, ``py_id``, ``py_parent``, ``seq_nr`` (an operator's autograd sequence
            number: it recorded an autograd node) (``MISSING`` = -1 when absent), ``flops``
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

    Plain files are memory-mapped copy-on-write: the decoder reads the page cache directly
    instead of a private copy of the whole file, and the batches are framed in place by
    overwriting two separator bytes each (only those pages get copied; the file is never
    written). Gzip files are decompressed into memory.
    """
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
            if magic != b"\x1f\x8b":
                size = os.fstat(fh.fileno()).st_size
                if size == 0:
                    raise TraceError(f"trace {path} is empty; re-record it with torch.profiler")
                # NOTE: no MAP_POPULATE here: on a private writable mapping it would copy
                # every page up front; read faults map the cached pages without copying.
                data: Any
                try:
                    data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
                except (OSError, ValueError):  # a file system that cannot map files
                    data = fh.read()
                if data[: min(size, 4096)].isspace() and data[:].isspace():
                    raise TraceError(f"trace {path} is empty; re-record it with torch.profiler")
                return data
            fh.seek(0)
            raw = fh.read()
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror or exc}") from exc
    raw = _gunzip(path, raw)
    if not raw or raw.isspace():
        raise TraceError(f"trace {path} is empty; re-record it with torch.profiler")
    return raw


MAX_GZIP_RATIO = 100
"""A gzip trace may expand to at most this many times its size (JSON traces compress 5-20x)."""
MIN_GZIP_CAP = 256 << 20
"""...but always to this many bytes, so small compressed files of repetitive JSON still load."""
_GUNZIP_CHUNK = 16 << 20


def _gunzip(path: Path, data: bytes) -> bytearray:
    """Decompress a gzip file's bytes in chunks, stopping at a cap on the expanded size.

    A few MB of gzip can expand to many GB (a "zip bomb", or a file that is not a trace):
    decompressing it whole would exhaust memory before anything could be said. The cap is
    :data:`MAX_GZIP_RATIO` times the compressed size (at least :data:`MIN_GZIP_CAP`); a real trace
    larger than that can still be loaded after ``gunzip`` (plain files are memory-mapped).

    Raises:
        TraceError: Corrupt or truncated gzip data, or the cap was passed (says what to do).
    """
    import zlib  # noqa: PLC0415 - only gzip inputs pay for it

    cap = max(MIN_GZIP_CAP, MAX_GZIP_RATIO * len(data))
    out = bytearray()
    rest = data
    try:
        while rest:
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            chunk = inflater.decompress(rest, min(_GUNZIP_CHUNK, cap + 1 - len(out)))
            while True:
                out += chunk
                if len(out) > cap:
                    raise TraceError(
                        f"trace {path} expands to more than {cap >> 20} MiB ({MAX_GZIP_RATIO}x its compressed size); "
                        f"if it is a real trace, decompress it first (gunzip -k {path.name}) and pass the .json"
                    )
                if inflater.eof:
                    break
                if not inflater.unconsumed_tail and not chunk:
                    raise EOFError("compressed data ended before the end-of-stream marker")
                chunk = inflater.decompress(inflater.unconsumed_tail, min(_GUNZIP_CHUNK, cap + 1 - len(out)))
            rest = inflater.unused_data
            if not rest.strip(b"\x00"):
                break  # trailing padding after the last member, as gzip tolerates
    except (EOFError, zlib.error) as exc:
        raise TraceError(f"trace {path} is a truncated or corrupt gzip file ({exc}); re-copy or re-record it") from exc
    return out


def _first_line(text: str) -> str:
    return " ".join(str(text).split())[:200]


def _decode_head(path: Path, raw: Any) -> tuple[_Head, int, int]:
    """Parse the whole file (the safe way): its head, and the ``traceEvents`` array's bounds.

    Returns:
        The head, and the offsets of the array's ``[`` and ``]`` in ``raw``.
    """
    try:
        head = _HEAD.decode(raw)
    except msgspec.ValidationError as exc:
        raise TraceError(f"{path} is not a torch.profiler trace ({_first_line(str(exc))})") from exc
    except msgspec.DecodeError as exc:
        raise _InvalidJSON(f"{path} is not valid JSON ({_first_line(str(exc))}); the file may be truncated") from exc
    events = head.traceEvents
    if events is None or not bytes(memoryview(events)[:1]) == b"[":
        raise TraceError(f"{path} is JSON but not a Chrome trace (no traceEvents); pass a torch.profiler trace")
    head.traceEvents = None
    start = _address(events) - _address(raw)
    return head, start, start + len(events) - 1


_KEY = b'"traceEvents"'
_HEAD_LIMIT = 1 << 22
"""Most bytes of metadata before or after the events that :func:`_locate_events` handles."""
_CLOSE_TRIES = 64
_WS = b" \t\r\n"


def _locate_events(raw: Any) -> tuple[_Head, int, int] | None:
    """Find the ``traceEvents`` array without parsing the events (they are parsed later anyway).

    Parsing the whole file only to find where the array ends costs a tenth of the load time.
    Instead the key is searched for, and for each ``]`` near the end of the file the small
    document "head + ``"traceEvents":[]`` + tail" is parsed; the first ``]`` for which it
    parses (with the ``[]`` as the top-level ``traceEvents``) is taken. That is proved right
    only once every batch of the array's body has decoded: callers fall back to
    :func:`_decode_head` when a batch fails.

    Returns:
        The head (metadata only) and the offsets of the array's ``[`` and ``]``, or None when
        the file does not look like that (no key, huge metadata, ...): parse it whole then.
    """
    key = raw.find(_KEY, 0, _HEAD_LIMIT)
    if key < 0:
        return None
    i = key + len(_KEY)
    end = len(raw)
    while i < end and raw[i] in _WS:
        i += 1
    if i >= end or raw[i] != 0x3A:  # :
        return None
    i += 1
    while i < end and raw[i] in _WS:
        i += 1
    if i >= end or raw[i] != 0x5B:  # [
        return None
    start = i
    prefix = bytes(raw[:key]) + _KEY + b":[]"
    floor = max(start, end - _HEAD_LIMIT)
    found: tuple[_Head, int] | None = None
    pos = end
    for _ in range(_CLOSE_TRIES):
        close = raw.rfind(b"]", floor, pos)
        if close <= start:
            break
        pos = close
        doc = prefix + bytes(raw[close + 1 :])
        try:
            head = _HEAD.decode(doc)
        except (msgspec.ValidationError, msgspec.DecodeError):
            continue
        events = head.traceEvents
        # the [] must be the top-level traceEvents (not a nested key of the same name)
        if events is not None and len(events) == 2 and _address(events) - _address(doc) == len(prefix) - 2:
            head.traceEvents = None
            found = (head, close)  # keep going: the first such ] from the start is the one
    if found is None:
        return None
    return found[0], start, found[1]


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


class _KeyCodes(dict):
    """Codes of distinct ``(name, cat, ph, pid, tid)`` tuples, in order of first appearance.

    One pass over the events with a C-level ``attrgetter`` of the five fields and one dict
    lookup per event replaces five passes (each event is a separate heap object, so every pass
    is mostly cache misses); the few hundred distinct tuples are then split into the five
    categorical columns through lookup tables.
    """

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[tuple[Any, ...]] = []

    def __missing__(self, key: tuple[Any, ...]) -> int:
        code = self[key] = len(self.keys)
        self.keys.append(key)
        return code


_EVENT_KEY = operator.attrgetter("name", "cat", "ph", "pid", "tid")
_KEY_FIELDS = ("name", "cat", "ph", "pid", "tid")


def _hashable_key(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """Loose path: a value that cannot be a dict key (a list as a name) counts as absent."""
    try:
        hash(key)
    except TypeError:
        return tuple(v if isinstance(v, (str, int, float)) else None for v in key)
    return key


def _raw_key(raw: Any) -> str:
    return bytes(raw).decode("utf-8", errors="replace")


def _stack_key(raw: Any) -> str:
    # "Call stack" is a JSON string (a str on the strict path; JSON text on the loose path):
    # decode it once per distinct value
    if isinstance(raw, str):
        return raw
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


def _num(values: list[Any], default: float) -> np.ndarray:
    """Numbers -> float64; anything that is not a number (or is a bool) becomes ``default``."""
    try:
        return np.fromiter(values, dtype=np.float64, count=len(values))
    except (TypeError, ValueError):
        return np.array(
            [float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default for v in values],
            dtype=np.float64,
        )


def _floats(items: list[Any], attr: str, default: float, strict: bool) -> np.ndarray:
    """One float64 per item from its attribute ``attr`` (C-level when ``strict``)."""
    values = map(operator.attrgetter(attr), items)
    if strict:
        return np.fromiter(values, dtype=np.float64, count=len(items))
    return _num([default if v is None else v for v in values], default)


_INT64_MAX = float(2**63)


def _ints(items: list[Any], attr: str, strict: bool) -> np.ndarray:
    """One int64 per item from its attribute ``attr``; ``MISSING`` for absent or odd values.

    Strict structs hold ints only: read them at C speed straight into int64. Otherwise (or for
    an int beyond int64, or a null) go through float64 as the loose path does.
    """
    if strict:
        try:
            return np.fromiter(map(operator.attrgetter(attr), items), dtype=np.int64, count=len(items))
        except (OverflowError, TypeError, ValueError):
            pass
    values = [MISSING if v is None else v for v in map(operator.attrgetter(attr), items)]
    arr = _num(values, MISSING)
    arr[~(np.abs(arr) < _INT64_MAX)] = MISSING
    return arr.astype(np.int64)


_INT_ATTRS = ("correlation", "bytes", "stream", "device", "total_allocated", "mem_bytes",
              "device_type", "device_id", "py_id", "py_parent", "seq_nr")
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
# NOTE: the per-operator roofline (advisor.metrics.roofline) sizes these too: attention backward,
# old-trace cuDNN convolutions, elementwise/normalisation/softmax/reduction ops, and the
# collectives' message sizes (advisor.metrics.collectives).
ROOFLINE_SHAPE_OPS = frozenset(
    {
        "aten::_scaled_dot_product_flash_attention_backward", "aten::_scaled_dot_product_efficient_attention_backward",
        "aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_cudnn_attention_backward",
        "aten::cudnn_convolution", "aten::cudnn_convolution_backward",
        "aten::add", "aten::add_", "aten::sub", "aten::sub_", "aten::mul", "aten::mul_", "aten::div", "aten::div_",
        "aten::relu", "aten::relu_", "aten::clamp_min", "aten::clamp_min_", "aten::threshold_backward",
        "aten::gelu", "aten::gelu_backward", "aten::silu", "aten::silu_backward", "aten::sigmoid", "aten::tanh",
        "aten::exp", "aten::sqrt", "aten::rsqrt", "aten::pow", "aten::neg", "aten::fill_", "aten::copy_",
        "aten::where", "aten::masked_fill_", "aten::native_dropout", "aten::addcmul_", "aten::addcdiv_", "aten::lerp_",
        "aten::native_layer_norm", "aten::native_layer_norm_backward", "aten::native_batch_norm",
        "aten::native_batch_norm_backward", "aten::cudnn_batch_norm", "aten::cudnn_batch_norm_backward",
        "aten::native_group_norm", "aten::_softmax", "aten::_softmax_backward_data", "aten::_log_softmax",
        "aten::_log_softmax_backward_data", "aten::sum", "aten::mean", "aten::amax", "aten::norm",
        "nccl:all_reduce", "nccl:all_to_all", "nccl:all_gather", "nccl:reduce_scatter", "nccl:broadcast",
        "nccl:reduce", "nccl:_all_gather_base", "nccl:_reduce_scatter_base", "nccl:all_gather_into_tensor_coalesced",
        "nccl:reduce_scatter_tensor_coalesced", "nccl:send", "nccl:recv", "nccl:all_to_allv",
    }
)
SHAPE_OPS = SHAPE_OPS | ROOFLINE_SHAPE_OPS
# Categories (after renaming old names) whose events carry the args below.
_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation")
_HOST_CATS = ("cpu_op", "user_annotation")
_RAW_ATTRS = (("input_dims", "input_dims"), ("input_type", "input_type"),
              ("concrete", "concrete_inputs"), ("call_stack", "call_stack"))
# Row kinds, by the lookup field and its values: which events' args hold which fields.
_KINDS = {
    "device": ("cat", _DEVICE_CATS),
    "host": ("cat", _HOST_CATS),
    "runtime": ("cat", ("cuda_runtime", "cuda_driver")),
    "memory": ("name", ("[memory]",)),
    "python": ("cat", ("python_function",)),
    "shaped": ("name", tuple(SHAPE_OPS)),
}
# Sparse args: row kind -> the integer fields read on those rows only.
_SPARSE_INTS = (
    ("corr", ("correlation",)),
    ("device", ("bytes", "stream", "device")),
    ("memory", ("total_allocated", "mem_bytes", "device_type", "device_id")),
    ("python", ("py_id", "py_parent")),
    # an operator that recorded an autograd node (grad mode on) carries its sequence number
    ("host", ("seq_nr",)),
)


def _take(items: list[Any], idx: np.ndarray) -> Any:
    """``items`` at the positions ``idx``, gathered at C speed (a tuple or a list)."""
    if len(idx) == 1:
        return [items[int(idx[0])]]
    return operator.itemgetter(*idx.tolist())(items) if len(idx) else []


class _Columns:
    """Accumulates column chunks batch by batch, then builds the events frame.

    Dense columns (the key codes, ``ts``, ``dur``, ``ext_id``) are kept per batch; the args
    that only some kinds of event carry are kept sparse, as (rows, values) pairs, and
    scattered into full columns once at the end.
    """

    def __init__(self) -> None:
        self.fields: dict[str, _Interner] = {
            "name": _Interner(),
            "cat": _Interner(key=lambda c: CATEGORY_ALIASES.get(c, c), empty=""),
            "ph": _Interner(),
            # pid/tid are ints in new traces and sometimes strings ("stream 7") in old ones
            "pid": _Interner(key=str, empty=MISSING),
            "tid": _Interner(key=str, empty=MISSING),
        }
        self.keys = _KeyCodes()
        # per distinct key: its code in each field, and whether it is of each row kind
        self.luts: dict[str, np.ndarray] = {f: np.zeros(0, dtype=np.int32) for f in _KEY_FIELDS}
        self.all_kinds: dict[str, np.ndarray] = {}
        self.kinds: dict[str, np.ndarray] = {}  # only the kinds some key has
        self.raws = {col: _Interner(key=_stack_key if attr == "call_stack" else _raw_key) for attr, col in _RAW_ATTRS}
        self.n = 0
        self.dense: dict[str, list[np.ndarray]] = {"key": [], "ts": [], "dur": [], "ext_id": []}
        self.sparse: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}

    def _update_tables(self) -> None:
        """Extend the lookup tables to keys first seen in the last batch."""
        new = self.keys.keys[len(self.luts["name"]) :]
        codes = {}
        for i, f in enumerate(_KEY_FIELDS):
            interner = self.fields[f]
            codes[f] = np.fromiter((interner[k[i]] for k in new), dtype=np.int32, count=len(new))
            self.luts[f] = np.concatenate([self.luts[f], codes[f]])
        # the new keys' kinds (old keys keep theirs: a value first seen now is not in them)
        kinds = {}
        for kind, (f, wanted) in _KINDS.items():
            interner = self.fields[f]
            kinds[kind] = np.isin(codes[f], [interner.codes[w] for w in wanted if w in interner.codes])
        # shapes are read on operators only; unions: rows with a correlation id, rows that may
        # spell "external id" the old way
        kinds["shaped"] &= kinds["host"]
        kinds["corr"] = kinds["device"] | kinds["runtime"]
        kinds["retry"] = kinds["corr"] | kinds["host"]
        for kind, table in kinds.items():
            self.all_kinds[kind] = np.concatenate([self.all_kinds.get(kind, np.zeros(0, dtype=bool)), table])
        self.kinds = {kind: table for kind, table in self.all_kinds.items() if table.any()}

    def _sparse(self, col: str, rows: np.ndarray, values: np.ndarray) -> None:
        if len(rows):
            rows_list, values_list = self.sparse.setdefault(col, ([], []))
            rows_list.append(rows + self.n)
            values_list.append(values)

    def add_batch(self, events: list[Any]) -> None:
        """Append one decoded batch to the columns.

        Args are read only for the event kinds that carry them (ids and shapes on operators,
        stream/bytes on device events, memory fields on ``[memory]`` instants, frame ids on
        ``python_function`` events): a field read costs one C-level pass over its rows.
        """
        n = len(events)
        if not n:
            return
        strict = type(events[0]) is _Event
        if not strict:
            for event in events:
                event.args = _loose_args(event.args)
        keys = map(_EVENT_KEY, events)
        key = np.fromiter(map(self.keys.__getitem__, keys if strict else map(_hashable_key, keys)), np.int32, n)
        if len(self.keys.keys) > len(self.luts["name"]):
            self._update_tables()
        dense = self.dense
        dense["key"].append(key)
        dense["ts"].append(_floats(events, "ts", _NAN, strict))
        dense["dur"].append(_floats(events, "dur", 0.0, strict))
        ext = _ints(events, "args.ext_id", strict)
        dense["ext_id"].append(ext)
        rows = {kind: np.flatnonzero(table[key]) for kind, table in self.kinds.items()}
        empty = np.zeros(0, dtype=np.intp)
        retry = rows.get("retry", empty)
        # old traces spell it "external id" on runtime and GPU events: read that spelling only
        # where the first one is missing
        retry = retry[ext[retry] == MISSING]
        if len(retry):
            ext[retry] = _ints(_take(events, retry), "args.ext_id_old", strict)
        for kind, attrs in _SPARSE_INTS:
            where = rows.get(kind, empty)
            if len(where):
                items = _take(events, where)
                for attr in attrs:
                    # py_parent may be null (a root Python frame): not strict
                    self._sparse(attr, where, _ints(items, "args." + attr, strict and attr != "py_parent"))
        host = rows.get("host", empty)
        if not len(host):
            self.n += n
            return
        host_events = _take(events, host)
        self._sparse("flops", host, _floats(host_events, "args.flops", _NAN, strict))
        shaped = rows.get("shaped", empty)
        shaped_events = _take(events, shaped)
        for attr, col in _RAW_ATTRS:
            # shapes and dtypes only for the ops that use them; stacks for every operator
            where, items = (host, host_events) if attr == "call_stack" else (shaped, shaped_events)
            if not len(where):
                continue
            values = list(map(operator.attrgetter("args." + attr), items))
            present = np.fromiter(map(operator.is_not, values, itertools.repeat(None)), dtype=bool, count=len(values))
            idx = np.flatnonzero(present)
            if len(idx):
                chosen = values if len(idx) == len(values) else [values[i] for i in idx.tolist()]
                if not (strict and attr == "call_stack"):
                    chosen = map(bytes, chosen)  # Raw views into the batch's buffer
                self._sparse(col, where[idx], self.raws[col].encode(chosen, len(idx)))
        self.n += n

    def _scatter(self, col: str, out: np.ndarray, default: float) -> np.ndarray:
        """Fill ``out`` (a full column) with ``default``, then the values kept for ``col``."""
        out.fill(default)
        if col in self.sparse:
            rows_list, values_list = self.sparse[col]
            out[np.concatenate(rows_list)] = np.concatenate(values_list)
        return out

    def _dense(self, col: str, out: np.ndarray) -> np.ndarray:
        if self.dense[col]:
            np.concatenate(self.dense[col], out=out)
        return out

    def frame(self) -> pd.DataFrame:
        """Build the events table (see :class:`Trace` for its columns)."""
        n = self.n
        key = self._dense("key", np.empty(n, dtype=np.int32))
        cols: dict[str, Any] = {f: self.fields[f].categorical(self.luts[f][key]) for f in _KEY_FIELDS}
        # NOTE: one allocation per dtype, one row per column: fresh memory is mapped in large
        # pages instead of page by page per column (page faults are a visible cost at this size)
        floats = np.empty((4, n), dtype=np.float64)
        ints = np.empty((1 + len(_INT_ATTRS), n), dtype=np.int64)
        ts = self._dense("ts", floats[0])
        dur = self._dense("dur", floats[1])
        cols["ts"] = ts
        cols["dur"] = dur
        cols["end"] = np.add(ts, dur, out=floats[2])
        cols["ext_id"] = self._dense("ext_id", ints[0])
        for i, col in enumerate(_INT_ATTRS, 1):
            cols[col] = self._scatter(col, ints[i], MISSING)
        cols["flops"] = self._scatter("flops", floats[3], _NAN)
        for _attr, col in _RAW_ATTRS:
            cols[col] = self.raws[col].categorical(self._scatter(col, np.empty(n, dtype=np.int32), -1))
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


def _framed_in_place(raw: Any, ranges: list[tuple[int, int]]) -> Iterator[memoryview]:
    """Yield each range as a JSON array viewed in place, without copying it.

    The byte before a range and the one after it (the whitespace and ``,`` between two events,
    or the array's own brackets) are overwritten with ``[`` and ``]`` for the time of the
    decode, then restored.

    ``raw`` must be writable (a copy-on-write mapping: only the touched pages are copied).
    Each yielded view must be released before the next one is requested.
    """
    view = memoryview(raw)
    try:
        for a, b in ranges:
            before, after = view[a - 1], view[b]
            view[a - 1] = 0x5B  # [
            view[b] = 0x5D  # ]
            try:
                yield view[a - 1 : b + 1]
            finally:
                view[a - 1] = before
                view[b] = after
    finally:
        view.release()


_MAX_LINE = 1 << 25
"""Longest run of bytes without a usable cut that the fast path decodes as one batch."""


def _line_ranges(raw: Any, start: int, stop: int) -> list[tuple[int, int]] | None:
    """Split the array body ``raw[start:stop]`` into runs of whole events at newlines.

    Kineto writes one event per line (or a few lines), so an element boundary is a ``,`` then
    a newline then ``{``. Raw newlines cannot occur inside JSON strings, and a split inside a
    nested value would leave a batch with unbalanced brackets, which then fails to decode:
    callers fall back to the safe path. Returns None when the file has no usable line breaks.
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
    if any(b - a > max(4 * BATCH_BYTES, _MAX_LINE) for a, b in ranges):
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


def _decode_chunks(path: Path, chunks: Iterator[memoryview], fast: bool) -> pd.DataFrame:
    """Decode batches into typed structs and straight into columns."""
    columns = _Columns()
    try:
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
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()  # restores the bytes an in-place framing overwrote
    return columns.frame()


def _fast_frame(path: Path, raw: Any, start: int, stop: int) -> pd.DataFrame | None:
    """Build the events table from batches cut at line breaks; None when a batch fails.

    Args:
        path: For messages.
        raw: The file's bytes.
        start: Offset of the ``traceEvents`` array's ``[``.
        stop: Offset of its ``]``.
    """
    ranges = _line_ranges(raw, start + 1, stop)
    if ranges is None:
        return None
    if memoryview(raw).readonly:
        framer = _Framer(raw)
        chunks: Iterator[memoryview] = (framer.frame(a, b) for a, b in ranges)
    else:
        chunks = _framed_in_place(raw, ranges)
    try:
        return _decode_chunks(path, chunks, fast=True)
    except _BadSplit:
        return None


def _safe_frame(path: Path, raw: Any, start: int, stop: int) -> pd.DataFrame:
    """Build the events table from one ``Raw`` per event, batched by count (any layout)."""
    raw_events = _RAW_LIST.decode(memoryview(raw)[start : stop + 1])
    if not raw_events:
        return _Columns().frame()
    return _decode_chunks(path, _batches(raw, raw_events), fast=False)


def _read_trace(path: Path, raw: Any) -> tuple[_Head, pd.DataFrame]:
    """Decode a file's bytes into its head and its events table.

    Fast path: the array located without a full parse (:func:`_locate_events`), decoded in
    batches cut at line breaks. If anything does not fit (a cut inside an event, a wrong
    guess of the array's end), the whole file is parsed first and the batches are cut again,
    or taken one ``Raw`` per event (safe path).
    """
    located = _locate_events(raw)
    if located is not None:
        head, start, stop = located
        frame = _fast_frame(path, raw, start, stop)
        if frame is not None:
            return head, frame
    head, start2, stop2 = _decode_head(path, raw)
    frame = None
    if located is None or (start2, stop2) != (start, stop):
        frame = _fast_frame(path, raw, start2, stop2)
    if frame is None:
        frame = _safe_frame(path, raw, start2, stop2)
    return head, frame


class _InvalidJSON(TraceError):
    """The file does not parse as JSON (maybe only because of a badly written event name)."""


def _decode_guarded(path: Path, raw: Any) -> tuple[_Head, pd.DataFrame]:
    """:func:`_read_trace`, with the decoder's non-JSON failures turned into trace errors."""
    try:
        return _read_trace(path, raw)
    except UnicodeDecodeError as exc:  # msgspec's answer to bytes that are not UTF-8
        raise _InvalidJSON(f"{path} is not valid JSON (bytes that are not UTF-8); the file may be damaged") from exc
    except RecursionError:
        raise TraceError(f"{path} is nested too deeply to be a torch.profiler trace") from None


_NAME_LINE = re.compile(rb'^(?P<lead>[ \t]*"name": ")(?P<value>.*)(?P<end>"[ \t]*,?[ \t\r]*)$')
_NAME_START = re.compile(rb'^[ \t]*"name": "')
_MAX_NAME_LINES = 20


def _repair_names(raw: Any) -> tuple[bytes, int]:
    """Re-escape event names that torch wrote unescaped; return the repaired bytes and how many.

    torch writes a ``python_function`` event's name (a file name and function) into the trace
    without escaping it: a ``"`` in a script's file name, a control character, or torch's own
    ``torch/profiler/_cupti_monitor.py(0): ""`` breaks the whole file's JSON. Kineto writes each
    ``"name": "..."`` on a line of its own, so such a line is recognised and its value (from the
    first quote to the last one on the line, joined with following lines when the name held a
    line break) is re-encoded as a JSON string. A value that already parses is left as it is.
    """
    lines = bytes(raw).split(b"\n")
    out: list[bytes] = []
    repaired = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not _NAME_START.match(line):
            out.append(line)
            continue
        joined, m = line, _NAME_LINE.match(line)
        extra = 0
        while m is None and extra < _MAX_NAME_LINES and i + extra < len(lines):
            joined += b"\n" + lines[i + extra]
            extra += 1
            m = _NAME_LINE.match(joined.replace(b"\n", b"\x00"))
        if m is None:
            out.append(line)
            continue
        value = joined[m.start("value") : m.end("value")]
        try:
            json.loads(b'"' + value + b'"')
            fixed = None
        except ValueError:
            fixed = json.dumps(value.decode("utf-8", "replace"), ensure_ascii=False).encode("utf-8")[1:-1]
        if fixed is None:
            out.append(line)
            continue
        i += extra
        repaired += 1
        out.append(joined[: m.start("value")] + fixed + joined[m.end("value") :].replace(b"\n", b""))
    return b"\n".join(out), repaired


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
    raw = _read_bytes(path)
    repaired = 0
    with _gc_paused():
        try:
            head, frame = _decode_guarded(path, raw)
        except _InvalidJSON as exc:
            fixed, repaired = _repair_names(raw)
            if not repaired:
                raise TraceError(str(exc)) from exc
            del raw
            raw = fixed
            try:
                head, frame = _decode_guarded(path, raw)
            except _InvalidJSON as again:
                raise TraceError(f"{again} (after re-escaping {repaired} event names)") from again
    del raw
    metadata: dict[str, Any] = {}
    if repaired:
        metadata[REPAIRED_KEY] = repaired
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
    rank = index
    info = metadata.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    if isinstance(info.get("rank"), int):
        rank = int(info["rank"])
    return Trace(path=path, rank=rank, events=frame, metadata=metadata)


REPAIRED_KEY = "advisor_repaired_names"
"""``Trace.metadata`` key: how many event names were re-escaped because torch wrote them unescaped."""


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
