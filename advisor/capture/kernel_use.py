"""What the operating system did for the script's process while its timed steps ran.

``getrusage`` is read at the timed window's two edges: page faults, CPU time in user space and in
the kernel, and context switches of the main process and every thread in it (not the DataLoader
workers: they are processes of their own). A training loop on glibc's malloc can spend a third
of its CPU time in the kernel: each step frees its large buffers, malloc hands them back to the
kernel (``munmap`` above the mmap threshold, a trimmed heap top above the trim threshold), and
the next step faults every page in again, zero-filled (on this project's 2-core machine,
2,500-55,000 minor faults per step on the zoo's CPU examples, 30-40% of their CPU time in the
kernel). The trace shows none of it: the time lands inside whichever operator touched the page.

Two readings per run, never one per step: a ``getrusage`` call is a system call, and the window
is what the timed step times cover.
"""

from __future__ import annotations

import resource
from collections.abc import Callable
from dataclasses import dataclass

from advisor.capture.vocab import Phase


@dataclass(frozen=True)
class KernelUse:
    """The main process's resource use over its timed steps (``getrusage(RUSAGE_SELF)`` differences).

    Attributes:
        steps: Timed steps inside the window.
        wall_s: The window's wall time: the sum of those steps' times.
        user_s: CPU seconds in user space, all of the process's threads.
        system_s: CPU seconds in the kernel, all of the process's threads.
        minor_faults: Page faults served without I/O (fresh zero pages, pages already cached).
        major_faults: Page faults that read from disk.
        involuntary_switches: Times a thread was descheduled while it could still run (other
            work, or the process's own threads, wanted the cores).
    """

    steps: int = 0
    wall_s: float = 0.0
    user_s: float = 0.0
    system_s: float = 0.0
    minor_faults: int = 0
    major_faults: int = 0
    involuntary_switches: int = 0

    @property
    def faults_per_step(self) -> float | None:
        """Minor page faults per timed step (None without a timed step)."""
        return self.minor_faults / self.steps if self.steps > 0 else None


Usage = Callable[[], resource.struct_rusage]


def _self_usage() -> resource.struct_rusage:
    return resource.getrusage(resource.RUSAGE_SELF)


class KernelMeter:
    """Reads ``getrusage`` when the timed phase starts and when it ends (``on_phase`` of the recorder).

    A measurement restarted from warm-up starts the window again. A script that ends inside the
    timed phase gets the window up to :meth:`record`.
    """

    def __init__(self, usage: Usage = _self_usage) -> None:
        self._usage = usage
        self._start: resource.struct_rusage | None = None
        self._end: resource.struct_rusage | None = None
        self._steps_ms: list[float] = []

    def on_phase(self, phase: str, step_times_ms: list[float]) -> None:
        """Read at the timed phase's edges (a phase change); ``step_times_ms`` is the recorder's list, kept."""
        if phase == Phase.TIMED:
            self._start, self._end = self._usage(), None
        elif phase == Phase.WARMUP:
            self._start = self._end = None
        elif self._start is not None and self._end is None:
            self._end = self._usage()
        self._steps_ms = step_times_ms

    def record(self) -> KernelUse | None:
        """Return the window so far (None before the timed phase began, or with no timed step)."""
        if self._start is None or not self._steps_ms:
            return None
        a, b = self._start, self._end or self._usage()
        return KernelUse(
            steps=len(self._steps_ms),
            wall_s=round(sum(self._steps_ms) / 1000.0, 6),
            user_s=round(b.ru_utime - a.ru_utime, 6),
            system_s=round(b.ru_stime - a.ru_stime, 6),
            minor_faults=int(b.ru_minflt - a.ru_minflt),
            major_faults=int(b.ru_majflt - a.ru_majflt),
            involuntary_switches=int(b.ru_nivcsw - a.ru_nivcsw),
        )


@dataclass(frozen=True)
class AfterWork:
    """The main process's page faults in the first whole step after work between steps.

    glibc raises its malloc thresholds when the process frees a block larger than they are; an
    evaluation at a larger batch frees such blocks. A CNN of ours faulted in about 7,800 pages a
    step through its first epoch and none after its first test pass, so a fix that keeps freed
    memory gained 1.2-1.3x on the timed steps (all before that pass) and 1.06-1.09x on the run.

    Attributes:
        step: The occurrence's :attr:`~advisor.capture.between.BetweenWork.step` (training
            steps completed before it ran).
        minor_faults: Page faults of the step after the one the work ran in.
        profiled: Whether a profiler recorded that step (its own allocations fault too).
    """

    step: int
    minor_faults: int
    profiled: bool = False


class AfterWorkMeter:
    """Reads the page-fault count at every step's end; keeps the first clean step after each occurrence.

    Work between steps counted ``w`` steps before it ran lands in step ``w + 1``; step ``w + 2``
    is the first whole step after it, unless work ran there too.
    """

    def __init__(self, usage: Usage = _self_usage) -> None:
        self._usage = usage
        self._last: tuple[int, int] | None = None  # (steps, minor faults) at the last step's end
        self.records: list[AfterWork] = []

    def on_step(self, steps: int, work_steps: set[int], profiled: bool) -> None:
        """Read at the end of a step (``steps`` completed so far); ``work_steps``: the occurrences' steps."""
        if not work_steps:
            return  # NOTE: nothing to read after yet: a getrusage a step only once work was seen
        faults = int(self._usage().ru_minflt)
        last, self._last = self._last, (steps, faults)
        w = steps - 2
        # NOTE: steps grows by one a call, so each occurrence's step after it is read once
        if last is not None and last[0] == steps - 1 and w in work_steps and steps - 1 not in work_steps:
            self.records.append(AfterWork(w, faults - last[1], profiled))

