"""Trace events scanned into columns by native code, where it was built (``_scan.c``).

The scanner reads the fields the analysis uses straight from the JSON text into arrays, with
one Python object per distinct value instead of one per event and field: a large trace's
decode takes about a quarter of the CPU time msgspec's structs need. It accepts only events the
strict struct decode (:class:`advisor.trace.columns._Event`) takes the same way, and gives up
on a batch with anything else; that batch is then decoded through msgspec, so the table is the
same either way (``tests/trace/test_native_scan.py`` compares the two on every trace we have).

Without a C compiler at install time the module is missing and every batch goes through
msgspec. ``ADVISOR_NATIVE_SCAN=0`` turns it off (to compare the two).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from advisor.trace.model import MISSING

try:
    from advisor.trace._scan import FLOAT_FIELDS, INT_FIELDS, KEY_FIELDS, RAW_FIELDS, Scanner
except ImportError:  # not compiled here: msgspec decodes everything
    Scanner = None
    FLOAT_FIELDS = INT_FIELDS = KEY_FIELDS = RAW_FIELDS = ()

if TYPE_CHECKING:
    import pandas as pd

    from advisor.trace.columns import _Columns, _Interner

# _Event's defaults for an absent key field
_KEY_DEFAULTS = tuple({"name": "", "cat": "", "ph": "", "pid": MISSING, "tid": MISSING}[f] for f in KEY_FIELDS)
# the row of each field in the scanner's column blocks (their order is the C module's)
_FLOAT_ROWS = {attr: i for i, attr in enumerate(FLOAT_FIELDS)}
_INT_ROWS = {attr: i for i, attr in enumerate(INT_FIELDS)}
_RAW_ROWS = {attr: i for i, attr in enumerate(RAW_FIELDS)}


def enabled() -> bool:
    """Whether batches are scanned natively (the module was built, and not turned off)."""
    return Scanner is not None and os.environ.get("ADVISOR_NATIVE_SCAN", "1") != "0"


def check_same_events(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Raise AssertionError unless two events tables are the same: values, dtypes, categories and their order.

    What the scanner promises against the struct decode (its tests and the GPU check hold it to
    that); the parallel decode promises the same against the serial one.
    """
    import pandas as pd  # noqa: PLC0415 - decode workers never build a table: they start before pandas loads

    pd.testing.assert_frame_equal(a, b, check_exact=True)
    for col in a.columns:
        if isinstance(a[col].dtype, pd.CategoricalDtype) and list(a[col].cat.categories) != list(b[col].cat.categories):
            raise AssertionError(f"{col}: the categories differ in order")


class NativeScan:
    """One file's (or one decode worker's) scanner, feeding one :class:`_Columns`.

    The scanner keeps the distinct raw values and keys it has seen across batches; this keeps
    their decoded values and their codes in the columns' interners.
    """

    def __init__(self) -> None:
        self.scanner = Scanner()
        self.values: list[Any] = []  # decoded value per token id
        self.key_codes = np.zeros(0, dtype=np.int32)  # code in columns.keys per scanner key id
        self.tokens: list[bytes] = []  # the raw JSON value per token id
        self.luts: dict[str, np.ndarray] = {}  # per raw column: code in its interner per token id (-2: not yet)
        self.broken = False

    def add(self, columns: _Columns, raw: Any, start: int, stop: int) -> bool:
        """Append the events in ``raw[start:stop]`` to ``columns``; False when they must be decoded otherwise."""
        if self.broken:
            return False
        got = self.scanner.scan(raw, start, stop)
        if got is None:
            return False
        n, key, tokens, new_keys, floats, ints, stack, raws = got
        try:
            self.values.extend(map(msgspec.json.decode, tokens))
            self.tokens.extend(tokens)
        except (msgspec.DecodeError, UnicodeDecodeError):
            # a value msgspec refuses (the scanner checks less): the scanner has moved on past
            # it, so from here on msgspec decodes every batch, this one included
            self.broken = True
            return False
        if new_keys:
            ids = np.frombuffer(new_keys, dtype=np.int32).reshape(-1, len(KEY_FIELDS)).tolist()
            codes = [columns.keys[tuple(self.values[i] if i >= 0 else d for i, d in zip(row, _KEY_DEFAULTS, strict=True))] for row in ids]
            self.key_codes = np.concatenate([self.key_codes, np.array(codes, dtype=np.int32)])
        if n:
            fields = _ScanFields(
                self,
                np.frombuffer(floats, dtype=np.float64).reshape(len(_FLOAT_ROWS), n),
                np.frombuffer(ints, dtype=np.int64).reshape(len(_INT_ROWS), n),
                np.frombuffer(stack, dtype=np.int32),
                np.frombuffer(raws, dtype=np.int32).reshape(len(_RAW_ROWS), n),
            )
            columns.add_rows(self.key_codes[np.frombuffer(key, dtype=np.int32)], fields)
        return True

    def codes_of(self, col: str, ids: np.ndarray, interner: _Interner) -> np.ndarray:
        """Codes in ``interner`` (column ``col``'s) of the token ids ``ids``.

        A stack is interned by its text, as the struct decode's ``str``; shapes and dtypes by
        their JSON bytes, as its ``msgspec.Raw``.
        """
        lut = self.luts.get(col, np.zeros(0, dtype=np.int32))
        if len(lut) < len(self.values):
            lut = np.concatenate([lut, np.full(len(self.values) - len(lut), -2, dtype=np.int32)])
            self.luts[col] = lut
        codes = lut[ids]
        unseen = ids[codes == -2]
        if len(unseen):
            # in order of first appearance in these rows: the interner's codes (and so the
            # column's categories) come out in the order the struct decode gives them
            new, first = np.unique(unseen, return_index=True)
            new = new[np.argsort(first)]
            source = self.values if col == "call_stack" else self.tokens
            lut[new] = [interner[source[i]] for i in new.tolist()]
            codes = lut[ids]
        return codes


class _ScanFields:
    """Reads one scanned batch's fields (the interface of :class:`advisor.trace.columns._EventFields`).

    ``take`` keeps the rows it selects instead of gathering every field's block: a fifth of a
    kineto trace's events are flow events, dropped that way, and most of the 14 integer rows
    are read only for a few kinds of event.
    """

    __slots__ = ("_floats", "_ints", "_raws", "_rows", "scan", "stack")

    def __init__(
        self, scan: NativeScan, floats: np.ndarray, ints: np.ndarray, stack: np.ndarray, raws: np.ndarray,
        rows: np.ndarray | None = None,
    ) -> None:
        self.scan = scan
        self._floats, self._ints, self.stack, self._raws, self._rows = floats, ints, stack, raws, rows

    def take(self, idx: np.ndarray) -> _ScanFields:
        rows = idx if self._rows is None else self._rows[idx]
        return _ScanFields(self.scan, self._floats, self._ints, self.stack, self._raws, rows)

    def _at(self, rows: np.ndarray | None) -> np.ndarray | None:
        """Return the scanned rows of this reader's ``rows`` (all of its rows when None)."""
        if self._rows is None:
            return rows
        return self._rows if rows is None else self._rows[rows]

    def floats(self, attr: str, default: float) -> np.ndarray:  # noqa: ARG002 - the scanner filled the defaults
        row = self._floats[_FLOAT_ROWS[attr]]
        return row.copy() if self._rows is None else row[self._rows]

    def flops(self, rows: np.ndarray) -> np.ndarray:
        return self._floats[_FLOAT_ROWS["flops"]][self._at(rows)]

    def ints(self, attrs: tuple[str, ...], rows: np.ndarray | None) -> list[np.ndarray]:
        at = self._at(rows)
        if at is None:
            return [self._ints[_INT_ROWS[attr]].copy() for attr in attrs]
        return [self._ints[_INT_ROWS[attr]][at] for attr in attrs]

    def raws(self, attrs: tuple[str, ...], rows: np.ndarray, interners: list[_Interner]) -> list[tuple[np.ndarray, np.ndarray]]:
        at = self._at(rows)
        out = []
        for attr, interner in zip(attrs, interners, strict=True):
            ids = self.stack[at] if attr == "call_stack" else self._raws[_RAW_ROWS[attr]][at]
            idx = np.flatnonzero(ids >= 0)
            out.append((idx, self.scan.codes_of(attr, ids[idx], interner)))
        return out
