"""Decode one large trace on every core: forked workers decode byte ranges, this process merges.

msgspec holds the GIL while it decodes, so threads cannot share the work; processes can. The
array's batches (cut at line breaks by :func:`advisor.trace.decode._line_ranges`) are grouped
into tasks of consecutive batches, taken one at a time from a shared queue by ``os.fork()``-ed
workers that inherit the file's memory map (or the decompressed bytes) without a copy. Each worker builds columns with
the same :class:`~advisor.trace.columns._Columns` code as the serial path and sends, per task,
its numpy columns plus the event keys and interned strings it saw first in that task (pickled
through a pipe: a few MB per task, a small part of the decode). This process merges the tasks
in file order, mapping each worker's codes onto one set of interners, so categories come out in
the same order as a serial decode and the table is identical.

Workers ignore SIGINT, die with this process (``PR_SET_PDEATHSIG``), and are killed and reaped
in a ``finally`` when anything goes wrong here (Ctrl-C, an error): none outlives advisor. A
worker that dies without answering (an OOM kill) makes the caller decode serially instead.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import select
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from advisor.trace.columns import _RAW_ATTRS, _Columns, _Interner

if TYPE_CHECKING:
    import pandas as pd

PARALLEL_BYTES = 48 << 20
"""Smallest events array decoded in parallel: below it the fork and merge cost more than they save."""
WORKER_BYTES = 24 << 20
"""Bytes of events a worker gets at least: a fork and a worker's own interners cost about what
decoding a few MB does, so a many-core machine does not start a worker per core for a small trace."""
TASK_BYTES = 8 << 20
"""Bytes of events per task: small enough to balance the workers and overlap the merge."""
_RAW_COLS = tuple(col for _attr, col in _RAW_ATTRS)
_HEADER = 8
_INDEX = 4  # bytes of a task number in the queue (all are in it before the first read: whole reads)
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_PIPE_BYTES = 1 << 20  # Linux's default limit for an unprivileged process (fs.pipe-max-size)

Fill = Callable[[list[tuple[int, int]], _Columns], None]
"""Decodes the batches at some byte ranges and appends them to columns (the serial path's code)."""


def workers_for(size: int) -> int:
    """How many worker processes should decode an events array of ``size`` bytes (1: serially).

    One per core, each with at least :data:`WORKER_BYTES`; serial below :data:`PARALLEL_BYTES`, on one core, where fork is missing, in a process that
    runs other threads (a lock held by one would stay locked in the child) and inside a
    ``multiprocessing`` worker (``advisor analyze --jobs N`` already gives each rank file a core).
    """
    if size < PARALLEL_BYTES or not hasattr(os, "fork") or threading.active_count() != 1:
        return 1
    mp = sys.modules.get("multiprocessing")
    if mp is not None and mp.parent_process() is not None:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, size // WORKER_BYTES))


class _Part:
    """One task's columns, in the worker's codes, and what the worker first saw in it."""

    # NOTE: plain classes, not dataclasses: building a dataclass costs milliseconds at import
    __slots__ = ("dense", "keys", "n", "raw_values", "sparse")

    def __init__(
        self,
        n: int,
        keys: list[tuple[Any, ...]],
        raw_values: dict[str, list[Any]],
        dense: dict[str, np.ndarray],
        sparse: dict[str, tuple[np.ndarray, np.ndarray]],
    ) -> None:
        self.n, self.keys, self.raw_values, self.dense, self.sparse = n, keys, raw_values, dense, sparse


class _Sent:
    """How many keys and raw values a worker has sent so far (it sends only new ones)."""

    def __init__(self) -> None:
        self.keys = 0
        self.raws = dict.fromkeys(_RAW_COLS, 0)


def _take_part(columns: _Columns, sent: _Sent) -> _Part:
    """Export the rows decoded since the last part, and reset them (a worker's side)."""
    keys = columns.keys.keys[sent.keys :]
    sent.keys += len(keys)
    raw_values = {}
    for col in _RAW_COLS:
        values = columns.raws[col].values
        raw_values[col] = values[sent.raws[col] :]
        sent.raws[col] = len(values)
    dense = {col: np.concatenate(parts) for col, parts in columns.dense.items() if parts}
    # a task's rows fit in int32: half the bytes to send of the widest sparse arrays
    sparse = {
        col: (np.concatenate(rows).astype(np.int32), np.concatenate(values)) for col, (rows, values) in columns.sparse.items()
    }
    part = _Part(columns.n, keys, raw_values, dense, sparse)
    columns.dense = {col: [] for col in columns.dense}
    columns.sparse = {}
    columns.n = 0
    return part


class _Codes:
    """One worker's codes -> this process's codes (keys, and each raw column's values)."""

    def __init__(self) -> None:
        self.keys = np.zeros(0, dtype=np.int32)
        self.raws = {col: np.zeros(0, dtype=np.int32) for col in _RAW_COLS}


def _merge_values(interner: _Interner, values: list[Any]) -> np.ndarray:
    """Codes in ``interner`` of already normalised values, assigning new ones in order."""
    codes = interner.codes
    out = np.empty(len(values), dtype=np.int32)
    for i, value in enumerate(values):
        code = codes.get(value)
        if code is None:
            code = codes[value] = len(interner.values)
            interner.values.append(value)
        out[i] = code
    return out


def _merge(columns: _Columns, part: _Part, codes: _Codes) -> None:
    """Append a worker's part to ``columns`` (this process's), translating its codes."""
    if part.keys:
        new = np.fromiter(map(columns.keys.__getitem__, part.keys), dtype=np.int32, count=len(part.keys))
        codes.keys = np.concatenate([codes.keys, new])
        if len(columns.keys.keys) > len(columns.luts["name"]):
            columns._update_tables()
    for col, values in part.raw_values.items():
        if values:
            codes.raws[col] = np.concatenate([codes.raws[col], _merge_values(columns.raws[col], values)])
    if not part.n:
        return
    for col, values in part.dense.items():
        columns.dense[col].append(codes.keys[values] if col == "key" else values)
    for col, (rows, values) in part.sparse.items():
        if col in codes.raws:
            values = np.where(values >= 0, codes.raws[col][np.maximum(values, 0)], -1).astype(np.int32)
        columns._sparse(col, rows.astype(np.intp), values)
    columns.n += part.n


def _tasks(ranges: list[tuple[int, int]], workers: int) -> list[list[tuple[int, int]]]:
    """Group consecutive batches into tasks of about :data:`TASK_BYTES` (at least 4 per worker)."""
    total = sum(b - a for a, b in ranges)
    target = max(1, min(TASK_BYTES, total // (4 * workers)))
    tasks: list[list[tuple[int, int]]] = []
    size = 0
    for a, b in ranges:
        if not tasks or size >= target:
            tasks.append([])
            size = 0
        tasks[-1].append((a, b))
        size += b - a
    return tasks


class _WorkerDied(Exception):
    """A worker ended without sending its part."""


def decode_parallel(
    fill: Fill,
    ranges: list[tuple[int, int]],
    workers: int,
    meanwhile: Callable[[], object] | None = None,
    started: Workers | None = None,
) -> pd.DataFrame | None:
    """Decode the batches at ``ranges`` in ``workers`` processes into the events table.

    ``fill`` runs in the workers, which inherit it (and the buffer it reads) through the fork.
    ``meanwhile`` (the caller's other work) runs here once the workers have started; it is not
    called when None is returned before they start. ``started``: workers forked earlier for
    these very ranges (:meth:`Workers.start`), read instead of forking new ones.

    Returns:
        The table, or None to decode serially: the batches make fewer than two tasks, or a
        worker died without answering.

    Raises:
        The first error (in file order) a worker met, as the serial decode would have raised
        it (:class:`advisor.trace.decode._BadSplit` for a cut inside an event).
    """
    pool = started if started is not None else Workers.start(fill, ranges, workers)
    if pool is None:
        return None
    columns = _Columns()
    codes = [_Codes() for _ in range(pool.count)]
    try:
        # closing: an error here (Ctrl-C while merging) ends the workers now, not when the
        # generator is collected
        with contextlib.closing(pool.parts(meanwhile)) as parts:
            for worker, part in parts:
                _merge(columns, part, codes[worker])
    except _WorkerDied:
        return None
    finally:
        pool.close()
    return columns.frame()


class Workers:
    """Decode workers, forked by :meth:`start`; :meth:`parts` reads what they send, in file order.

    The task numbers wait in a pipe that every worker reads, four bytes (one number) at a time:
    a worker slowed down by other load on its core takes fewer tasks. No worker outlives
    :meth:`close`, which every owner calls (a ``finally``, or an exit handler for workers started
    ahead of their reader).
    """

    def __init__(self, tasks: list[list[tuple[int, int]]]) -> None:
        self.tasks = tasks
        self.children: dict[int, tuple[int, int]] = {}  # read end of its pipe -> (worker, pid)
        self.done = False
        self.closed = False
        self.queue_read = -1

    @property
    def count(self) -> int:
        """How many workers were forked."""
        return len(self.children)

    @classmethod
    def start(cls, fill: Fill, ranges: list[tuple[int, int]], workers: int) -> Workers | None:
        """Fork ``workers`` processes decoding ``ranges``; None when the batches make fewer than two tasks."""
        tasks = _tasks(ranges, workers)
        workers = min(workers, len(tasks))
        if workers < 2:
            return None
        pool = cls(tasks)
        try:
            pool._fork(fill, workers)
        except BaseException:
            pool.close()
            raise
        return pool

    def _fork(self, fill: Fill, workers: int) -> None:
        self.queue_read, queue_write = os.pipe()
        try:
            # NOTE: all numbers at once, before any fork: a few hundred bytes, less than a pipe holds
            os.write(queue_write, b"".join(i.to_bytes(_INDEX, "little") for i in range(len(self.tasks))))
        finally:
            os.close(queue_write)
        for w in range(workers):
            read, write = os.pipe()
            _widen(write)
            pid = os.fork()
            if pid == 0:  # pragma: no cover - runs in the child, which never returns
                os.close(read)
                for fd in self.children:
                    os.close(fd)
                _work(fill, self.tasks, self.queue_read, write)
            os.close(write)
            self.children[read] = (w, pid)
        os.close(self.queue_read)
        self.queue_read = -1

    def parts(self, meanwhile: Callable[[], object] | None) -> Iterator[tuple[int, _Part]]:
        """Run ``meanwhile``, then yield ``(worker, part)`` in file order (parts that arrive early wait here)."""
        if meanwhile is not None:
            meanwhile()
        waiting: dict[int, tuple[int, Any]] = {}  # task -> (worker, its part or error)
        poller = select.poll()
        for fd in self.children:
            poller.register(fd, select.POLLIN)
        open_fds = set(self.children)
        for i in range(len(self.tasks)):
            while i not in waiting:
                if not open_fds:
                    raise _WorkerDied  # a worker ended without sending a task it took
                for fd, _event in poller.poll():
                    message = _receive(fd)
                    if message is None:  # the worker is done
                        poller.unregister(fd)
                        open_fds.discard(fd)
                        continue
                    status, task, value = _loads(message)
                    waiting[task] = (self.children[fd][0], value if status == "ok" else _Failed(value))
            worker, value = waiting.pop(i)
            if isinstance(value, _Failed):
                raise value.error
            yield worker, value
        self.done = True

    def close(self) -> None:
        """Kill the workers unless every part was read, and reap them (once; later calls do nothing)."""
        if self.closed:
            return
        self.closed = True
        if self.queue_read >= 0:
            with contextlib.suppress(OSError):
                os.close(self.queue_read)
        for fd, (_w, pid) in self.children.items():
            if not self.done:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            os.close(fd)
            with contextlib.suppress(ChildProcessError):  # reaped by a SIGCHLD handler
                os.waitpid(pid, 0)


class _Failed:
    """A worker's error, waiting for its task's turn."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _work(fill: Fill, tasks: list[list[tuple[int, int]]], queue: int, fd: int) -> None:  # pragma: no cover - child
    """Decode the tasks a worker takes from ``queue``, send each part (or the error), exit without cleanup."""
    status = 1
    try:
        # Ctrl-C reaches the whole foreground group: the parent ends the workers itself
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _die_with_parent()
        # millions of short-lived objects and no cycles; a worker started ahead of the load
        # (advisor.trace.early) was forked with the collector on
        gc.disable()
        columns = _Columns()
        sent = _Sent()
        outbox = _Outbox(fd)
        while len(number := os.read(queue, _INDEX)) == _INDEX:
            task = int.from_bytes(number, "little")
            try:
                fill(tasks[task], columns)
                message, ok = _frames(("ok", task, _take_part(columns, sent))), True
            except Exception as exc:  # noqa: BLE001 - sent to the parent, which raises it
                message, ok = _pickled_error(task, exc), False
            outbox.put(message)
            if not ok:
                break  # the parent stops at the first error
        outbox.close()
        status = 0
    finally:
        # NOTE: os._exit: the parent's finally blocks, atexit handlers and buffers stay the parent's
        os._exit(status)


def _widen(fd: int) -> None:
    """Let a pipe hold a whole part or so, so that workers go on decoding while this process is busy."""
    import fcntl  # noqa: PLC0415 - only a parallel decode needs it

    with contextlib.suppress(OSError, AttributeError):  # a lower system limit: the default size
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)


def _die_with_parent() -> None:  # pragma: no cover - child
    """Ask Linux to kill this worker when the parent dies (``prctl(PR_SET_PDEATHSIG)``).

    Elsewhere a worker whose parent died still ends at its next write to the closed pipe.
    """
    # NOTE: advisor._proc.die_with_parent does this for the other stages; the trace layer
    # imports nothing of ours but the errors (tests/test_layers.py).
    if not sys.platform.startswith("linux"):
        return
    import ctypes  # noqa: PLC0415 - only workers pay for it

    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before the request: re-parented already
        os._exit(1)


def _pickled_error(task: int, exc: Exception) -> list[Any]:
    try:
        return _frames(("error", task, exc))
    except Exception:  # noqa: BLE001 - an exception that does not pickle
        return _frames(("error", task, RuntimeError(f"{type(exc).__name__}: {exc}")))


class _Outbox:
    """A worker's end of its pipe: parts wait here while the pipe is full, so the worker goes on.

    The parent reads the parts in file order, and runs the caller's other work first: a worker
    that waited for it to read would sit idle.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.queue: list[memoryview] = []
        os.set_blocking(fd, False)

    def put(self, frames: list[Any]) -> None:
        """Queue one message (its frames, counted and length-prefixed) and write what the pipe takes now."""
        views = [memoryview(frame).cast("B") for frame in frames]
        head = b"".join(n.to_bytes(_HEADER, "little") for n in (len(views), *(v.nbytes for v in views)))
        self.queue.append(memoryview(head))
        self.queue.extend(view for view in views if view.nbytes)
        self._write()

    def close(self) -> None:
        """Write everything left, waiting for the parent to read it."""
        os.set_blocking(self.fd, True)
        self._write()

    def _write(self) -> None:
        while self.queue:
            try:
                n = os.write(self.fd, self.queue[0])
            except BlockingIOError:
                return
            self.queue[0] = self.queue[0][n:]
            if not self.queue[0]:
                self.queue.pop(0)


def _receive(fd: int) -> list[np.ndarray] | None:
    """One message's frames from a worker's pipe (see :func:`_frames`); None at its end.

    None means the worker exited between messages.
    """
    head = _read_exact(fd, _HEADER, at_end=True)
    if head is None:
        return None
    count = int.from_bytes(head, "little")
    sizes = np.frombuffer(_read_all(fd, _HEADER * count), dtype="<u8")
    return [_read_all(fd, int(size)) for size in sizes]


def _frames(message: object) -> list[Any]:
    """Pickle ``message`` with its arrays out of band: the pickle, then each array's bytes.

    The arrays cross the pipe as they are and become views of the bytes the parent read
    (``pickle.loads(..., buffers=)``): in band, pickling and unpickling each copied them once more.
    """
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
    return [payload, *(buffer.raw() for buffer in buffers)]


def _loads(frames: list[np.ndarray]) -> Any:
    return pickle.loads(frames[0], buffers=frames[1:])


def _read_all(fd: int, size: int) -> np.ndarray:
    """Read ``size`` bytes; the pipe ending first means the worker died mid-message."""
    buf = _read_exact(fd, size)
    if buf is None:  # pragma: no cover - only at_end reads return None
        raise _WorkerDied
    return buf


def _read_exact(fd: int, size: int, at_end: bool = False) -> np.ndarray | None:
    """Read ``size`` bytes; None when ``at_end`` and the pipe ends before the first byte."""
    # NOTE: np.empty, not bytearray(size): the read fills it, a zeroing pass first cost page
    # faults and a memset over every part (about 100 MB on a 386 MB trace)
    buf = np.empty(size, dtype=np.uint8)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = os.readv(fd, [view[got:]])
        if n == 0:
            if at_end and got == 0:
                return None
            raise _WorkerDied  # it ended in the middle of a message
        got += n
    view.release()
    return buf
