"""The kernel's share of the training process's CPU time, and the page faults behind it.

From ``capture.json``'s ``kernel`` record (:mod:`advisor.capture.kernel_use`): ``getrusage`` of the
main process over its timed steps. A bare trace answers neither: the time a page fault takes
lands inside whichever operator first touched the page, and reads as that operator's.

The pattern these name: glibc's malloc returns a step's large buffers to the kernel (``munmap``
above its mmap threshold, the heap's top above its trim threshold) and the next step faults every
page in again, zero-filled. On this project's 2-core machine (2026-11-27) a small CNN on
per-sample numpy work took 2,300-4,600 minor faults per step and 9-32% of its CPU time in the
kernel, and ran 1.35x faster on steps 10-60 with malloc told to keep its memory
(``benchmarks/allocator_churn.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from advisor.capture.kernel_use import AfterWork
from advisor.capture.model import RunCapture

STOPPED_BELOW = 0.1
"""Page faults after work between steps under this share of the timed steps' per step: they stopped."""


def kernel_use_metrics(capture: RunCapture | None) -> dict[str, float | None]:
    """Return the declared kernel-use metrics of a capture (None where unknown)."""
    out: dict[str, float | None] = dict.fromkeys(
        ("kernel_cpu_frac", "kernel_time_frac", "page_faults_per_step_count", "page_faults_per_s",
         "page_faults_after_work_count", "page_faults_stopped_after_steps")
    )
    k = getattr(capture, "kernel", None)
    if k is None or k.steps <= 0 or k.wall_s <= 0:
        return out
    cpu = k.user_s + k.system_s
    out["kernel_cpu_frac"] = k.system_s / cpu if cpu > 0 else None
    out["kernel_time_frac"] = min(1.0, k.system_s / k.wall_s)
    out["page_faults_per_step_count"] = k.faults_per_step
    out["page_faults_per_s"] = k.minor_faults / k.wall_s
    after = _latest(getattr(capture, "faults_after_work", ()))
    if after is not None:
        out["page_faults_after_work_count"] = float(after.minor_faults)
        per_step = k.faults_per_step or 0.0
        if after.step > 0 and per_step > 0 and after.minor_faults < STOPPED_BELOW * per_step:
            out["page_faults_stopped_after_steps"] = float(after.step)
    return out


def _latest(records: Sequence[AfterWork]) -> AfterWork | None:
    """Return the last occurrence's step after it, preferring steps no profiler recorded (its own allocations fault)."""
    plain = [r for r in records if not r.profiled]
    return max(plain or records, key=lambda r: r.step, default=None)
