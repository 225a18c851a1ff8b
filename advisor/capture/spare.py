"""How many of this process's cores other processes keep busy right now: whether a helper may run beside a measurement.

The diagnose starts the trials' warm-start server beside its capture's start-up only when two
cores are free for the two of them: on two cores beside one busy process, the server's imports
made the capture's measured start-up 45% longer (3.8 against 2.6 s), where on an idle machine
it cost 6%.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

WINDOW_S = 0.1
"""How long the machine is watched: ten of the kernel's 10 ms ticks per core."""


def cores() -> list[int]:
    """Return the CPUs this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def busy_s(t: Any) -> float:
    """Busy seconds of one ``psutil.cpu_times()`` reading: everything but idle and I/O wait (guest time is in user time already)."""
    idle = getattr(t, "idle", 0.0) + getattr(t, "iowait", 0.0)
    return float(sum(t)) - idle - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)


def _busy_s(cpus: Sequence[int], per_cpu: Callable[[], Sequence[Any]]) -> float:
    """CPU seconds ``cpus`` have spent busy."""
    times = per_cpu()
    return sum(busy_s(times[i]) for i in cpus if i < len(times))


def busy_elsewhere(window_s: float = WINDOW_S, per_cpu: Callable[[], Sequence[Any]] | None = None) -> float | None:
    """Return how many of this process's cores other processes kept busy over ``window_s`` (None: cannot tell).

    The machine's busy time on those cores, less this process's own, over the window's wall time.
    """
    if per_cpu is None:
        try:
            import psutil
        except ImportError:
            return None
        per_cpu = lambda: psutil.cpu_times(percpu=True)  # noqa: E731 - the one call that varies
    cpus = cores()
    try:
        busy0, own0, t0 = _busy_s(cpus, per_cpu), sum(os.times()[:2]), time.perf_counter()
        time.sleep(window_s)
        busy1, own1, t1 = _busy_s(cpus, per_cpu), sum(os.times()[:2]), time.perf_counter()
    except Exception:  # noqa: BLE001 - a guess for a speed-up: never a reason to fail
        return None
    return max(0.0, (busy1 - busy0) - (own1 - own0)) / max(t1 - t0, 1e-6)


def free_cores(window_s: float = WINDOW_S) -> float | None:
    """Return how many of this process's cores nothing else used over ``window_s`` (None: cannot tell)."""
    elsewhere = busy_elsewhere(window_s)
    return None if elsewhere is None else len(cores()) - elsewhere
