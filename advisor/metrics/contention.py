"""Who else wanted the cores: threads the run asked for, and what other work did meanwhile.

Two questions, both from ``capture.json`` (a bare trace answers neither):

* **Oversubscription** (the run's own doing): the threads that want a core at once are torch's
  intra-op threads (``environment.intra_op_threads``, as the script left them) plus the main
  DataLoader's worker processes (each runs one thread of arithmetic: torch sets one intra-op
  thread in a worker) plus the cores other work kept busy. More of them than cores means threads
  wait for each other; OpenMP's barrier makes a step as slow as its most-descheduled thread.
* **Contention** (someone else's doing): the share of the machine's CPU time used outside the
  run's process tree while it ran (``cpu.other_util_frac``, sampled with psutil), and the load
  average beyond the run's own threads. Timings taken under contention are not those of a quiet
  machine: the report says so (:func:`contention_warnings`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from advisor.capture.model import RunCapture

CONTENTION_OTHER_FRAC = 0.25
"""Other processes using at least a quarter of the machine's CPU time make timings unreliable:
on 2 cores that is half a core, enough to deschedule one of two intra-op threads (the issue
behind this module measured 2 threads 20x slower than 1 at load 11)."""


def contention_metrics(capture: RunCapture | None) -> dict[str, float | None]:
    """Return the declared oversubscription and contention metrics of a capture (None where unknown)."""
    out: dict[str, float | None] = dict.fromkeys(
        ("load_avg", "other_cpu_util_frac", "intra_op_threads_count", "runnable_threads_count",
         "cpu_demand_ratio", "contention_flag")
    )
    if capture is None:
        return out
    cores = capture.environment.cpu_count or None
    threads = capture.environment.intra_op_threads
    workers = max((d.num_workers for d in capture.dataloaders), default=0)
    cpu = capture.cpu
    out["load_avg"] = cpu.load_avg_mean
    out["other_cpu_util_frac"] = cpu.other_util_frac
    if threads:
        out["intra_op_threads_count"] = float(threads)
        out["runnable_threads_count"] = float(threads + workers)
    if not cores:
        return out
    other_cores = _other_cores(cpu.other_util_frac, cpu.load_avg_mean, out["runnable_threads_count"], cores)
    if out["runnable_threads_count"] is not None:
        out["cpu_demand_ratio"] = (out["runnable_threads_count"] + (other_cores or 0.0)) / cores
    if other_cores is not None:
        out["contention_flag"] = 1.0 if other_cores >= CONTENTION_OTHER_FRAC * cores else 0.0
    return out


def _other_cores(other_frac: float | None, load: float | None, own: float | None, cores: int) -> float | None:
    """Cores' worth of other work: what other processes used, or the load beyond the run's own threads.

    NOTE: other processes' CPU time undercounts their demand when the run itself holds the cores
    (they get only what is left); the load average counts everything runnable, the run's threads
    included, so the run's own threads are taken off it. The larger of the two is used.
    """
    used = None if other_frac is None else other_frac * cores
    queued = None if load is None else max(0.0, load - (own or 0.0))
    known = [v for v in (used, queued) if v is not None]
    return max(known) if known else None


def contention_warnings(summary: Mapping[str, Any], primary_category: str | None) -> tuple[str, ...]:
    """Return the report's warning when the run was measured while other work competed for the cores."""
    if summary.get("contention_flag") != 1.0:
        return ()
    parts = []
    load, other, own = summary.get("load_avg"), summary.get("other_cpu_util_frac"), summary.get("cpu_util_frac")
    cores = summary.get("cpu_count")
    if load is not None:
        parts.append(f"load average {load:.1f}" + (f" on {cores:.0f} cores" if cores else ""))
    if other is not None:
        parts.append(f"other processes used {other:.0%} of the CPU")
    if own is not None:
        parts.append(f"this run got {own:.0%}")
    text = (
        "measured while other work competed for the cores (" + ", ".join(parts) + "): step times, "
        "shares of the step and fix speedups may differ on a quiet machine"
    )
    if primary_category:
        text += (
            f"; the primary category ({primary_category}) was decided from these timings and may "
            "change when the machine is quiet: re-run then to confirm it"
        )
    return (text,)
