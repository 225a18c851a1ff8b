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
  turned into numpy columns, and only one batch of Python objects is alive at a time; each
  decoded batch's pages of the mapped file are unmapped again, so the peak memory is about the
  final table, not the file;
* decodes a large array (tens of MB and more) on every core: forked workers decode runs of
  batches into columns that this process merges (:mod:`advisor.trace.fanout`; msgspec holds
  the GIL, so threads would not help);
* turns the garbage collector off while decoding (millions of small objects, no cycles);
* interns each event's ``(name, cat, ph, pid, tid)`` tuple in one C-level pass and splits the
  few hundred distinct tuples into categoricals through lookup tables; reads args only on the
  rows of the event kinds that carry them, kept sparse until the table is built.

A value of an unexpected type (a string id, a null name) sends its batch down a slower, untyped
path instead of failing; a file laid out differently (no line breaks, a cut inside an event)
goes down a safe path that decodes one ``Raw`` per event. Nothing here imports torch or
unpickles anything read from a file (the decode workers' columns come back pickled, through a
pipe only this process and its own forked workers hold). Old Kineto category names
(``Operator``, ``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``) become the current ones.

The steps live in their own modules: :mod:`advisor.trace.read` (files, memory maps, gzip),
:mod:`advisor.trace.decode` (locating and batching the array), :mod:`advisor.trace.columns`
(structs to columns), :mod:`advisor.trace.fanout` (the parallel decode),
:mod:`advisor.trace.repair` (unescaped names) and :mod:`advisor.trace.model` (the
:class:`Trace` table). The tuning constants (``BATCH_BYTES``,
``MIN_GZIP_CAP``, ...) are read from the module that defines them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from advisor.errors import TraceError
from advisor.trace import early
from advisor.trace.decode import _decode_guarded, _InvalidJSON, _Once
from advisor.trace.fanout import workers_for
from advisor.trace.model import CATEGORY_ALIASES, MISSING, REPAIRED_KEY, Trace
from advisor.trace.read import _gc_paused, _read_bytes, find_trace_files
from advisor.trace.repair import _repair_names, escape_controls
from advisor.trace.sanity import check_values, not_a_number
from advisor.trace.shapes import ROOFLINE_SHAPE_OPS, SHAPE_OPS

__all__ = [
    "CATEGORY_ALIASES",
    "MISSING",
    "REPAIRED_KEY",
    "ROOFLINE_SHAPE_OPS",
    "SHAPE_OPS",
    "Trace",
    "find_trace_files",
    "load_trace",
    "load_traces",
]


def load_trace(path: Path, index: int = 0, *, meanwhile: Callable[[], object] | None = None) -> Trace:
    """Load one trace file.

    Args:
        path: A ``.json`` or ``.json.gz`` Chrome trace written by torch.profiler / Kineto.
        index: Rank to use when the trace has no ``distributedInfo.rank``.
        meanwhile: Other work of the caller's, run once: while worker processes decode a large
            trace (this process only waits then), else before the decode.

    Raises:
        TraceError: The file is missing, empty, truncated, not JSON or not a trace.
    """
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"trace file {path} does not exist; pass a .json/.json.gz trace")
    started = early.claim(path)
    raw = started.raw if started is not None else _read_bytes(path)
    once = _Once(meanwhile)
    if started is None and workers_for(len(raw)) < 2:
        once()
    repaired = 0
    with _gc_paused():
        try:
            head, frame = _decode_guarded(path, raw, once, started)
        except _InvalidJSON as exc:
            fixed, escaped = escape_controls(raw)
            fixed, repaired = _repair_names(fixed)
            if not (repaired or escaped):
                raise TraceError(not_a_number(path, raw) or str(exc)) from exc
            del raw
            raw = fixed
            try:
                head, frame = _decode_guarded(path, raw, once)
            except _InvalidJSON as again:
                raise TraceError(f"{again} (after re-escaping {repaired} event names and {escaped} control characters)") from again
        finally:
            if started is not None:
                started.workers.close()  # done already unless the decode failed before reading them
                started = None
    del raw
    once()  # the decode went serially after all (no line breaks, a failed cut, ...)
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
    check_values(path, frame)
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
