"""A process's descendants read from its own ``/proc`` entries, not from every process's.

psutil's ``Process.children(recursive=True)`` reads ``/proc/PID/stat`` of every process on the
machine to find parents. advisor polls a run's tree about twenty times a second (the sampler's
process count, the memory watchdog, its own CPU time), so the cost grows with what else the
machine runs: 33 ms a call beside 600 idle processes here, and advisor's parent then took 32% of
a core while it timed the user's script (9% without them). Linux lists each thread's children in
``/proc/PID/task/TID/children`` (``CONFIG_PROC_CHILDREN``); walking those reads the tree alone.
The kernel calls that list exact only while the children are stopped: a process forked during the
walk can be missed, and the next poll finds it. :func:`pid_exists` is the one test of whether a
pid names a process, for the run list, the TensorBoard copies and the set-aside lists alike.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Collection, Iterator
from typing import Any

PROC = "/proc"
"""Where the process entries are read (a test points it at a tree of its own)."""


@functools.cache
def supported() -> bool:
    """Whether this kernel lists children in ``/proc/PID/task/TID/children``."""
    me = os.getpid()
    return os.path.exists(f"/proc/{me}/task/{me}/children")


def descendants(pid: int) -> dict[int, int]:
    """Every descendant of ``pid`` still there, with its thread count, in the order found.

    Raises:
        ProcessLookupError: ``pid`` itself is gone.
    """
    proc = PROC
    found: dict[int, int] = {}
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            tids = os.listdir(f"{proc}/{current}/task")
        except OSError:
            if current == pid:
                raise ProcessLookupError(pid) from None
            found.pop(current, None)  # ended while the walk ran
            continue
        if current != pid:
            found[current] = len(tids)
        for tid in tids:
            try:
                with open(f"{proc}/{current}/task/{tid}/children", "rb") as fh:
                    kids = [int(k) for k in fh.read().split()]
            except (OSError, ValueError):
                continue  # the thread ended
            stack.extend(k for k in reversed(kids) if k not in found and k != pid)
    return found


def threads(pid: int) -> int:
    """Return the number of threads of ``pid`` (0 once it is gone)."""
    try:
        return len(os.listdir(f"{PROC}/{pid}/task"))
    except OSError:
        return 0


def handles(psutil: Any, root: Any, skip: Collection[int] = ()) -> Iterator[Any]:
    """Yield psutil handles of ``root``'s descendants but those in ``skip`` (from ``/proc``'s lists where the kernel has them).

    Raises what ``root.children`` raises, or :class:`ProcessLookupError`, when ``root`` is gone.
    """
    if not supported():
        yield from (proc for proc in root.children(recursive=True) if proc.pid not in skip)
        return
    for pid in descendants(root.pid):
        if pid not in skip:
            with contextlib.suppress(psutil.Error):
                yield psutil.Process(pid)


def pid_exists(pid: Any) -> bool:
    """Whether a process with this id exists (one of another user's counts: it exists).

    Anything but a positive int (None, a bool, a pid past pid_t) is no process.
    """
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OSError, OverflowError):  # NOTE: a pid past pid_t raised OverflowError (issue #30 campaign)
        return False
    return True
