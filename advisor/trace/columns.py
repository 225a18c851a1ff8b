"""Frame building: typed event structs, and the columns they are turned into batch by batch.

Each event's ``(name, cat, ph, pid, tid)`` tuple is interned in one C-level pass and the few
hundred distinct tuples are split into categoricals through lookup tables; args are read only on
the rows of the event kinds that carry them, kept sparse until the table is built.
"""

from __future__ import annotations

import itertools
import math
import operator
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from advisor.trace.model import CATEGORY_ALIASES, MISSING
from advisor.trace.shapes import SHAPE_OPS

if TYPE_CHECKING:
    import pandas as pd

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
    mem_addr: int = msgspec.field(default=MISSING, name="Addr")
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
    mem_addr: Any = msgspec.field(default=MISSING, name="Addr")
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


_LOOSE_ARGS = msgspec.json.Decoder(_LooseArgs)


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
        import pandas as pd  # noqa: PLC0415 - decode workers never build a table: they start before pandas loads

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
    except (TypeError, ValueError, OverflowError):
        # NOTE: an integer past float64 (ts 10**400) raised OverflowError, an internal error;
        # as infinity the trace's value check refuses it as bad input (issue #30 campaign)
        return np.array([_float_or(v, default) for v in values], dtype=np.float64)


def _float_or(value: Any, default: float) -> float:
    """``value`` as a float (an int past float64 as +-inf), ``default`` when it is no number or a bool."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return default
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


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


_INT_ATTRS = ("correlation", "bytes", "stream", "device", "total_allocated", "mem_bytes", "mem_addr",
              "device_type", "device_id", "py_id", "py_parent", "seq_nr")
# Categories (after renaming old names) whose events carry the args below.
_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation")
_HOST_CATS = ("cpu_op", "user_annotation")
FLOW_PHASES = ("s", "t", "f")
"""Chrome-trace phases of flow events (start, step, finish), dropped at decode."""
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
    # flow arrows (CPU launch -> GPU kernel): no metric reads them (the correlation id links the
    # two), and they are about a quarter of a GPU trace's events: their rows are not kept
    "flow": ("ph", FLOW_PHASES),
}
# Sparse args: row kind -> the integer fields read on those rows only.
_SPARSE_INTS = (
    ("corr", ("correlation",)),
    ("device", ("bytes", "stream", "device")),
    ("memory", ("total_allocated", "mem_bytes", "mem_addr", "device_type", "device_id")),
    ("python", ("py_id", "py_parent")),
    # an operator that recorded an autograd node (grad mode on) carries its sequence number
    ("host", ("seq_nr",)),
)


def _take(items: list[Any], idx: np.ndarray) -> Any:
    """``items`` at the positions ``idx``, gathered at C speed (a tuple or a list)."""
    if len(idx) == 1:
        return [items[int(idx[0])]]
    return operator.itemgetter(*idx.tolist())(items) if len(idx) else []


_SHAPE_ATTRS = ("input_dims", "input_type", "concrete")
_RAW_COLUMN = dict(_RAW_ATTRS)


class _EventFields:
    """Reads the fields of decoded event structs, column by column (C-level passes)."""

    __slots__ = ("events", "strict")

    def __init__(self, events: Any, strict: bool) -> None:
        self.events, self.strict = events, strict

    def take(self, idx: np.ndarray) -> _EventFields:
        return _EventFields(_take(self.events, idx), self.strict)

    def floats(self, attr: str, default: float) -> np.ndarray:
        return _floats(self.events, attr, default, self.strict)

    def flops(self, rows: np.ndarray) -> np.ndarray:
        return _floats(_take(self.events, rows), "args.flops", _NAN, self.strict)

    def ints(self, attrs: tuple[str, ...], rows: np.ndarray | None) -> list[np.ndarray]:
        """Int64 columns of ``args.<attr>`` on ``rows`` (all rows for None); fresh arrays."""
        items = self.events if rows is None else _take(self.events, rows)
        # py_parent may be null (a root Python frame): not strict
        return [_ints(items, "args." + attr, self.strict and attr != "py_parent") for attr in attrs]

    def raws(self, attrs: tuple[str, ...], rows: np.ndarray, interners: list[_Interner]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per attr, the positions in ``rows`` that have it and their codes in its interner."""
        items = _take(self.events, rows)
        out = []
        for attr, interner in zip(attrs, interners, strict=True):
            values = list(map(operator.attrgetter("args." + attr), items))
            present = np.fromiter(map(operator.is_not, values, itertools.repeat(None)), dtype=bool, count=len(values))
            idx = np.flatnonzero(present)
            chosen: Any = values if len(idx) == len(values) else [values[i] for i in idx.tolist()]
            if not (self.strict and attr == "call_stack"):
                chosen = map(bytes, chosen)  # Raw views into the batch's buffer
            out.append((idx, interner.encode(chosen, len(idx))))
        return out


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
        self.native: Any = None  # its advisor.trace.native.NativeScan, once a batch is scanned

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
        """Append one batch of decoded event structs to the columns (see :meth:`add_rows`)."""
        n = len(events)
        if not n:
            return
        strict = type(events[0]) is _Event
        if not strict:
            for event in events:
                event.args = _loose_args(event.args)
        keys = map(_EVENT_KEY, events)
        key = np.fromiter(map(self.keys.__getitem__, keys if strict else map(_hashable_key, keys)), np.int32, n)
        self.add_rows(key, _EventFields(events, strict))

    def add_rows(self, key: np.ndarray, fields: Any) -> None:
        """Append rows given their codes in ``self.keys`` and a reader of their other fields.

        Args are read only for the event kinds that carry them (ids and shapes on operators,
        stream/bytes on device events, memory fields on ``[memory]`` instants, frame ids on
        ``python_function`` events). Flow events (:data:`FLOW_PHASES`) get no row.

        Args:
            key: int32 codes of the rows' ``(name, cat, ph, pid, tid)`` in ``self.keys``.
            fields: :class:`_EventFields`, or another reader with its methods
                (:class:`advisor.trace.native._ScanFields`).
        """
        if len(self.keys.keys) > len(self.luts["name"]):
            self._update_tables()
        if "flow" in self.kinds and (flow := self.kinds["flow"][key]).any():
            # after interning, so the categories are those of the whole file either way
            kept = np.flatnonzero(~flow)
            if not len(kept):
                return
            fields, key = fields.take(kept), key[kept]
        n = len(key)
        dense = self.dense
        dense["key"].append(key)
        dense["ts"].append(fields.floats("ts", _NAN))
        dense["dur"].append(fields.floats("dur", 0.0))
        (ext,) = fields.ints(("ext_id",), None)
        dense["ext_id"].append(ext)
        rows = {kind: np.flatnonzero(table[key]) for kind, table in self.kinds.items()}
        empty = np.zeros(0, dtype=np.intp)
        retry = rows.get("retry", empty)
        # old traces spell it "external id" on runtime and GPU events: read that spelling only
        # where the first one is missing
        retry = retry[ext[retry] == MISSING]
        if len(retry):
            ext[retry] = fields.ints(("ext_id_old",), retry)[0]
        for kind, attrs in _SPARSE_INTS:
            where = rows.get(kind, empty)
            if len(where):
                for attr, values in zip(attrs, fields.ints(attrs, where), strict=True):
                    self._sparse(attr, where, values)
        host = rows.get("host", empty)
        if len(host):
            self._sparse("flops", host, fields.flops(host))
            # shapes and dtypes only for the ops that use them; stacks for every operator
            for where, attrs in ((rows.get("shaped", empty), _SHAPE_ATTRS), (host, ("call_stack",))):
                if len(where):
                    cols = [_RAW_COLUMN[attr] for attr in attrs]
                    for col, (idx, codes) in zip(cols, fields.raws(attrs, where, [self.raws[c] for c in cols]), strict=True):
                        self._sparse(col, where[idx], codes)
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
        import pandas as pd  # noqa: PLC0415 - see categorical()

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
