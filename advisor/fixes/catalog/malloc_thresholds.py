"""``malloc_thresholds``: glibc's malloc keeps the memory a step frees, instead of handing it back every step.

``mallopt(M_TRIM_THRESHOLD)`` and ``mallopt(M_MMAP_THRESHOLD)`` at 1 GiB: requests below it come
from the heap rather than from a fresh ``mmap``, and up to that much free memory stays at the
heap's top rather than going back to the kernel. Setting either also turns off glibc's moving
thresholds, which otherwise depend on what the process happened to free before
(:mod:`advisor.metrics.kernel_use`). The memory the script uses at its peak is unchanged; the
process keeps it between steps, as a caching allocator does.

At run time the calls go through ``ctypes`` before the script runs: in a forked trial child and
in the DataLoader workers it forks they hold too, which the environment variables
(``MALLOC_TRIM_THRESHOLD_``, read once at process start) could not do. The diff adds the same
calls after the script's imports. Not glibc (musl, macOS): nothing to set, the fix does not apply.

Its runs are forked from the warm-start server like every other fix's, though a forked run
inherits the server's heap. Measured both ways on two scripts against the diff timed plainly
(2026-11-28, docs/benchmarks.md): on word_language_model, forked runs read 0.92-1.18x in 4
diagnoses and cold ones 1.03-1.30x, against 1.17x plainly (6 pairs), every interval holding it,
the forked diagnoses a third as long (15-22 s against 27-54 s: 13 of 15 runs imported torch
afresh); on examples/memory_bound.py forked 1.41-1.65x, cold 1.39-1.65x, plainly 1.51x (4
pairs). An earlier forked measurement read 1.37x [1.18-1.58] against 1.20x plainly.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Any

from advisor.fixes.diff_plan import DiffPlan
from advisor.fixes.fix import SAFE, Fix, FixContext

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
THRESHOLD = 1 << 30
"""1 GiB for both. The mmap threshold could be capped lower by an older glibc (32 MiB on 64-bit
before 2.26's tunables): a refused call is retried at that cap."""
MMAP_CAP = 32 << 20

HEADER = f"""\
try:  # advisor: malloc_thresholds: glibc keeps freed memory, not faulting pages in every step
    import ctypes
    _libc = ctypes.CDLL("libc.so.6")
    _libc.mallopt({M_TRIM_THRESHOLD}, {THRESHOLD})  # M_TRIM_THRESHOLD
    _libc.mallopt({M_MMAP_THRESHOLD}, {THRESHOLD}) or _libc.mallopt({M_MMAP_THRESHOLD}, {MMAP_CAP})  # M_MMAP_THRESHOLD
except (OSError, AttributeError):
    pass"""


def glibc() -> Any:
    """Return the C library when it is glibc with ``mallopt`` (None elsewhere)."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
    except (ValueError, OSError, AttributeError):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "mallopt") else None
    except OSError:
        return None


def check(ctx: FixContext) -> str | None:
    """Refuse unless the C library is glibc (this process's: the child runs on the same machine), or under a CPU memory budget."""
    if not ctx.cuda and ctx.memory_limit_bytes is not None:
        # NOTE: on a CPU run the budget is the process's RSS, and the memory malloc keeps counts in it.
        return "a --memory-budget holds this run's resident memory, and the memory malloc would keep counts in it"
    return None if glibc() is not None else "the C library is not glibc: it has no mallopt thresholds to set"


def install(state: Any, params: dict[str, Any]) -> None:
    """Child side: set both thresholds before the script runs."""
    libc = glibc()
    if libc is None:
        state.skipped("malloc_thresholds", "the C library is not glibc")
        return
    trim = libc.mallopt(M_TRIM_THRESHOLD, THRESHOLD)
    mmap = THRESHOLD if libc.mallopt(M_MMAP_THRESHOLD, THRESHOLD) else MMAP_CAP * bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_CAP))
    if not trim or not mmap:
        state.skipped("malloc_thresholds", "glibc refused the thresholds (mallopt returned 0)")
        return
    state.applied("malloc_thresholds", f"mallopt: trim threshold {THRESHOLD >> 20} MiB, mmap threshold "
                                       f"{mmap >> 20} MiB, before the script ran")


def plan_diff(plan: DiffPlan, params: dict[str, Any]) -> None:
    """Add the ``mallopt`` calls after the imports (HB005's message names the environment's way too)."""
    plan.header_statements.append(HEADER)


FIX = Fix(
    id="malloc_thresholds",
    safety=SAFE,
    description="glibc's malloc keeps freed memory (trim and mmap thresholds at 1 GiB) instead of returning it every step",
    applies_when="the training process spends a tenth or more of its CPU time in the kernel, faulting in pages every step",
    measured="one run, with both thresholds set before the script runs, against the interleaved baseline runs",
    check=check,
    install=install,
    plan_diff=plan_diff,
    # NOTE: a baseline whose page faults stopped after work between steps (glibc raised its own
    # thresholds) has nothing left for the fix to keep after it
    gains_until="page_faults_stopped_after_steps",
)
