"""Run a side branch of one rank's analysis on a second core, in a forked child.

Two branches need nothing the rest computes: the step-time breakdown (beside the other step
columns of :func:`advisor.metrics.steps.analyze_trace`), and the lead rank's tables that no
step column needs (operators, modules, memory lines, source locations: beside the idle
attribution and the roofline). On a machine with a free core, a forked child computes such a
branch from the same events (inherited, not copied) while this process does the rest, and
sends back its result pickled through a pipe (kilobytes: no event rows).

Everything here is a shortcut with the same result: where a fork is not safe or not useful
(one core, other threads running, inside a ``multiprocessing`` worker, no ``os.fork``), or when
the child fails or dies, this process computes the branch itself, when its result is taken.
The child ignores SIGINT, dies with this process, and is killed and reaped when the result is
not taken (an error here, Ctrl-C).
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from advisor._proc import die_with_parent

T = TypeVar("T")

MIN_ROWS = 200_000
"""Fewest events for which a branch is forked: a fork of a process holding a large table costs
about 10 ms, the branches of a small trace about as much."""


def can_fork(busy: int = 0) -> bool:
    """Whether a forked child can do work beside this process now (a free core, no threads).

    ``busy``: how many cores this process's other branches already took.
    """
    if not hasattr(os, "fork") or threading.active_count() != 1:
        return False  # a lock held by another thread would stay locked in the child
    mp = sys.modules.get("multiprocessing")
    if mp is not None and mp.parent_process() is not None:
        return False  # a rank worker of ``advisor analyze --jobs N``: the cores are taken
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return cores > 1 + busy


class Aside(Generic[T]):
    """A branch's result: from the forked child when it answered, else computed here."""

    def __init__(self, work: Callable[[], T]) -> None:
        self.work = work
        self.pid = 0
        self.fd = -1

    def start(self, busy: int = 0) -> None:
        """Fork the child that runs ``work`` (nothing when :func:`can_fork` says no)."""
        if not can_fork(busy):
            return
        read, write = os.pipe()
        try:
            pid = os.fork()
        except OSError:  # no memory or process slot for a child: compute it here
            os.close(read)
            os.close(write)
            return
        if pid == 0:  # pragma: no cover - runs in the child, which never returns
            os.close(read)
            _child(self.work, write)
        os.close(write)
        self.pid, self.fd = pid, read

    def result(self) -> T:
        """Return the child's result (waiting for it), or run ``work()`` here when there is none."""
        data = self._collect()
        if data is not None:
            try:
                status, value = pickle.loads(data)
            except Exception:  # noqa: BLE001 - a result that does not unpickle: compute it here
                status, value = "error", None
            if status == "ok":
                return value
        return self.work()

    def _collect(self) -> bytes | None:
        if self.fd < 0:
            return None
        chunks = []
        try:
            while chunk := os.read(self.fd, 1 << 20):
                chunks.append(chunk)
        finally:
            self.close()
        return b"".join(chunks) or None

    def close(self) -> None:
        """End and reap the child if it is still there (its result was not taken)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):  # reaped by a SIGCHLD handler
                os.waitpid(self.pid, 0)
            self.pid = 0


@contextlib.contextmanager
def aside(work: Callable[[], T], rows: int, busy: int = 0) -> Iterator[Aside[T]]:
    """Start ``work`` on another core (over a table of ``rows`` events); take its result with ``.result()`` inside the block.

    ``busy``: the cores other branches of this analysis took already (none is forked when no core is left).
    """
    branch = Aside(work)
    if rows >= MIN_ROWS:
        branch.start(busy)
    try:
        yield branch
    finally:
        branch.close()


def _child(work: Callable[[], object], fd: int) -> None:  # pragma: no cover - child
    """Run ``work``, write its pickled result (or a failure mark) to ``fd``, exit without cleanup."""
    status = 1
    try:
        # Ctrl-C reaches the whole foreground group: the parent ends the child itself
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        die_with_parent(signal.SIGKILL)
        # a full collection would touch every object's header: copies of the parent's pages
        gc.disable()
        try:
            message = pickle.dumps(("ok", work()), protocol=5)
        except Exception:  # noqa: BLE001 - the parent computes it again and raises what it raises
            message = pickle.dumps(("error", None), protocol=5)
        view = memoryview(message)
        while view:
            view = view[os.write(fd, view) :]
        status = 0
    finally:
        # NOTE: os._exit: the parent's finally blocks, atexit handlers and buffers stay the parent's
        os._exit(status)
