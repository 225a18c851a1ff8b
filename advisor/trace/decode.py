"""Streaming decode: locate the ``traceEvents`` array, cut it into batches, decode each batch.

The array is found without parsing the events (:func:`_locate_events`; a full parse of the head
is the fallback) and cut at line breaks into batches of about ``BATCH_BYTES``. Each batch is
scanned into columns by native code where it was built (:mod:`advisor.trace.native`), or else
decoded in place (two separator bytes are swapped for ``[``/``]`` during the decode and
restored) into typed structs, only one batch of Python objects alive at a time. A file laid out
differently (no line breaks, a cut inside an event) goes down a safe path that decodes one
``Raw`` per event.
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from advisor.errors import TraceError
from advisor.trace import fanout, native
from advisor.trace.columns import _Columns, _Event, _LooseEvent

if TYPE_CHECKING:
    import pandas as pd


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
BATCH_EVENTS = 65536
"""Events decoded into Python objects at a time: bounds the memory of the object stage."""
BATCH_BYTES = 4 << 20
"""Bytes of events per batch on the fast path (about ten thousand events). Each batch costs a
fixed share of Python work (the scanner's call, its new values, the kinds of its rows): decoding
the 386 MB benchmark trace serially (as each rank file of a job is) took 7% less CPU in 4 MB
batches than in 1 MB ones (median of 8 interleaved pairs); msgspec's path was no slower (best of
4), and the parallel decode of ``advisor analyze`` the same (0.992, 24 pairs)."""
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])


class _BadSplit(Exception):
    """A newline split did not fall between two events: use the safe path."""


def _raise_if_not_utf8(exc: msgspec.DecodeError) -> None:
    """Raise the UnicodeDecodeError msgspec before 0.23 raised for bytes that are not UTF-8.

    Since 0.23 a string that is not UTF-8 is a DecodeError like a bad split; only its message
    tells them apart. The whole-file parse skips the event array's strings unchecked, so it is a
    batch that meets such a name, and the load repairs it (:mod:`advisor.trace.repair`).
    """
    if "UTF-8" in str(exc):
        raise UnicodeDecodeError("utf-8", b"", 0, 0, str(exc)) from exc


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
            _drop_pages(raw, a, b)
    finally:
        view.release()


def _drop_pages(raw: Any, start: int, stop: int) -> None:
    """Unmap the whole pages of ``raw[start:stop]`` from this process (a decoded batch).

    A memory-mapped file's pages count in the process's resident memory once read, so without
    this the peak memory would hold the whole file. The pages stay in the page cache, and a
    later read (a fallback that parses the file again) maps them back, with the file's bytes:
    the same bytes, as every batch's brackets were restored before.
    """
    if not isinstance(raw, mmap.mmap):
        return
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    last = stop // mmap.PAGESIZE * mmap.PAGESIZE
    if last > first:
        with contextlib.suppress(OSError, ValueError, AttributeError):  # no madvise: keep them
            raw.madvise(mmap.MADV_DONTNEED, first, last - first)


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
    # NOTE: the kernel maps the page cache's large folios whole (up to MBs each), so probing
    # every 1 MB above left the whole file mapped here, and in every worker forked after
    _drop_pages(raw, start, stop)
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
    _fill(path, chunks, fast, columns)
    return columns.frame()


def _fill(path: Path, chunks: Iterator[memoryview], fast: bool, columns: _Columns) -> None:
    """Decode batches into typed structs and append them to ``columns``."""
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
                    _raise_if_not_utf8(exc)
                    raise _BadSplit from exc
            except msgspec.DecodeError as exc:
                _raise_if_not_utf8(exc)
                # the whole file parsed already, so only a bad split can fail here
                raise _BadSplit from exc
            columns.add_batch(batch)
            del batch  # drops the Raw views into the chunk before the buffer is reused
            chunk.release()
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()  # restores the bytes an in-place framing overwrote


def _fast_frame(
    path: Path, raw: Any, start: int, stop: int, meanwhile: _Once | None = None, started: Started | None = None
) -> pd.DataFrame | None:
    """Build the events table from batches cut at line breaks; None when a batch fails.

    A large array is decoded by worker processes, one per core (:mod:`advisor.trace.fanout`),
    into the same table.

    Args:
        path: For messages.
        raw: The file's bytes.
        start: Offset of the ``traceEvents`` array's ``[``.
        stop: Offset of its ``]``.
        meanwhile: The caller's other work, run while worker processes decode (if they do).
        started: Workers already decoding these bytes (:func:`start_parallel`).
    """
    ranges = started.ranges if started is not None else _line_ranges(raw, start + 1, stop)
    if ranges is None:
        return None
    try:
        workers = started.workers.count if started is not None else fanout.workers_for(stop - start)
        if workers > 1:
            frame = fanout.decode_parallel(_parallel_fill(path, raw), ranges, workers, meanwhile,
                                           started.workers if started is not None else None)
            if frame is not None:
                return frame
        columns = _Columns()
        _fill_ranges(path, raw, ranges, columns)
        return columns.frame()
    except _BadSplit:
        return None


def _fill_ranges(path: Path, raw: Any, ranges: list[tuple[int, int]], columns: _Columns) -> None:
    """Decode the batches at ``ranges`` (cut at line breaks) into ``columns``.

    Natively scanned where :mod:`advisor.trace.native` can; a batch it gives up on (and every
    batch without it) goes through msgspec.
    """
    if not native.enabled():
        _fill(path, _framed(raw, ranges), True, columns)
        return
    scan = columns.native
    if scan is None:
        scan = columns.native = native.NativeScan()
    for a, b in ranges:
        if not scan.add(columns, raw, a, b):
            _fill(path, _framed(raw, [(a, b)]), True, columns)
        _drop_pages(raw, a, b)


def _parallel_fill(path: Path, raw: Any) -> fanout.Fill:
    """Return what a decode worker runs on its batches (it inherits ``raw`` through the fork)."""
    return lambda part, columns: _fill_ranges(path, raw, part, columns)


class Started:
    """Workers decoding a file's bytes (``raw``) since :func:`start_parallel`, and where its events array lies."""

    __slots__ = ("head", "ranges", "raw", "start", "stop", "workers")

    def __init__(
        self, raw: Any, head: _Head, start: int, stop: int, ranges: list[tuple[int, int]], workers: fanout.Workers
    ) -> None:
        self.raw, self.head, self.start, self.stop, self.ranges, self.workers = raw, head, start, stop, ranges, workers


def start_parallel(path: Path, raw: Any) -> Started | None:
    """Fork the decode workers of a large trace now, to be read by a later :func:`_read_trace`.

    Returns:
        None when the file would not be decoded in parallel (small, one core, no line breaks, an
        array that cannot be located without a full parse): the load then goes its usual way.
    """
    located = _locate_events(raw)
    if located is None:
        return None
    head, start, stop = located
    workers = fanout.workers_for(stop - start)
    ranges = _line_ranges(raw, start + 1, stop) if workers > 1 else None
    if ranges is None:
        return None
    pool = fanout.Workers.start(_parallel_fill(path, raw), ranges, workers)
    return None if pool is None else Started(raw, head, start, stop, ranges, pool)


def _framed(raw: Any, ranges: list[tuple[int, int]]) -> Iterator[memoryview]:
    """Frame the batches at ``ranges`` as JSON arrays: in place when ``raw`` is writable, else copied."""
    if memoryview(raw).readonly:
        framer = _Framer(raw)
        return (framer.frame(a, b) for a, b in ranges)
    return _framed_in_place(raw, ranges)


def _safe_frame(path: Path, raw: Any, start: int, stop: int) -> pd.DataFrame:
    """Build the events table from one ``Raw`` per event, batched by count (any layout)."""
    raw_events = _RAW_LIST.decode(memoryview(raw)[start : stop + 1])
    if not raw_events:
        return _Columns().frame()
    return _decode_chunks(path, _batches(raw, raw_events), fast=False)


class _Once:
    """The caller's other work, done at most once (while workers decode, or else afterwards)."""

    def __init__(self, work: Callable[[], object] | None) -> None:
        self.work = work

    def __call__(self) -> None:
        work, self.work = self.work, None
        if work is not None:
            work()


def _read_trace(
    path: Path, raw: Any, meanwhile: _Once | None = None, started: Started | None = None
) -> tuple[_Head, pd.DataFrame]:
    """Decode a file's bytes into its head and its events table.

    Fast path: the array located without a full parse (:func:`_locate_events`), decoded in
    batches cut at line breaks (by ``started``'s workers when given). If anything does not fit (a
    cut inside an event, a wrong guess of the array's end), the whole file is parsed first and
    the batches are cut again, or taken one ``Raw`` per event (safe path).
    """
    located = (started.head, started.start, started.stop) if started is not None else _locate_events(raw)
    if located is not None:
        head, start, stop = located
        frame = _fast_frame(path, raw, start, stop, meanwhile, started)
        if frame is not None:
            return head, frame
    head, start2, stop2 = _decode_head(path, raw)
    frame = None
    if located is None or (start2, stop2) != (start, stop):
        frame = _fast_frame(path, raw, start2, stop2, meanwhile)
    if frame is None:
        frame = _safe_frame(path, raw, start2, stop2)
    return head, frame


class _InvalidJSON(TraceError):
    """The file does not parse as JSON (maybe only because of a badly written event name)."""


def _decode_guarded(
    path: Path, raw: Any, meanwhile: _Once | None = None, started: Started | None = None
) -> tuple[_Head, pd.DataFrame]:
    """:func:`_read_trace`, with the decoder's non-JSON failures turned into trace errors."""
    try:
        return _read_trace(path, raw, meanwhile, started)
    except UnicodeDecodeError as exc:  # msgspec's answer to bytes that are not UTF-8
        raise _InvalidJSON(f"{path} is not valid JSON (bytes that are not UTF-8); the file may be damaged") from exc
    except RecursionError:
        raise TraceError(f"{path} is nested too deeply to be a torch.profiler trace") from None
