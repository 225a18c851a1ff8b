"""Utilisation sampling from the parent: CPU with psutil, GPU with NVML (``nvidia-ml-py``).

A daemon thread samples every ``interval_s`` while the child runs. CPU utilisation is the CPU
time of the child's whole process tree (DataLoader workers included) divided by wall time and
the machine's logical cores, so other jobs on a shared machine do not count. The GPU's mean is
the timed steps' (:meth:`UtilSampler.timing`): over a whole GPU run it was mostly the start-up's
idle device (2% on an H200 whose kernels ran 27% of each timed step). Those other jobs
are measured too, as contention: the machine's busy CPU time less the tree's (``other_util_frac``)
and the 1-minute load average, with the tree's process and thread counts. Without an NVIDIA
driver or GPU, the GPU summary carries a note instead of numbers.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any

from advisor import _proctree
from advisor.capture.model import UtilSummary
from advisor.capture.spare import busy_s

# Between CPU samples the process tree is counted this often (seconds).
_TREE_POLL_S = 0.1


class UtilSampler:
    """Samples CPU (process tree) and GPU (device) utilisation of a running child."""

    def __init__(self, pid: int, interval_s: float = 0.5) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="advisor-sampler", daemon=True)
        self._cpu: list[float] = []
        self._other: list[float] = []
        self._load: list[float] = []
        self._procs = 0
        self._threads = 0
        self._rss_peak = 0
        self._gpu: list[float] = []
        self._gpu_timed: list[float] = []
        self._timing = False
        self._gpu_mem_peak = 0
        self._gpu_total: int | None = None
        self._gpu_note: str | None = None
        self._handles: list[Any] = []
        self._nvml: Any = None
        self._handles_by_pid: dict[int, Any] = {}

    def start(self) -> None:
        """Start sampling in the background."""
        self._init_nvml()
        self._thread.start()

    def timing(self, on: bool) -> None:
        """Say whether the child is in its timed steps now (the run's progress events tell the parent)."""
        self._timing = on

    def stop(self) -> tuple[UtilSummary, UtilSummary]:
        """Stop and return (cpu, gpu) summaries."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass
        return self._cpu_summary(), self._gpu_summary()

    # ----- NVML --------------------------------------------------------------------------------

    def _init_nvml(self) -> None:
        try:
            import pynvml
        except ImportError:
            self._gpu_note = "GPU not sampled: nvidia-ml-py (pynvml) is not installed"
            return
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound and friends
            self._gpu_note = f"GPU not sampled: no NVIDIA driver or GPU ({exc})"
            return
        try:
            self._handles = visible_handles(pynvml, os.environ.get("CUDA_VISIBLE_DEVICES"))
            if self._handles:
                self._gpu_total = sum(
                    int(pynvml.nvmlDeviceGetMemoryInfo(h).total) for h in self._handles
                )
        except Exception as exc:  # noqa: BLE001
            self._gpu_note = f"GPU not sampled: NVML query failed ({exc})"
            self._handles = []
        if not self._handles and self._gpu_note is None:
            self._gpu_note = "GPU not sampled: NVML sees no GPU"
        self._nvml = pynvml

    # ----- sampling ----------------------------------------------------------------------------

    def _loop(self) -> None:
        import psutil

        ncpu = os.cpu_count() or 1
        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        last_cpu: float | None = None
        last_busy = _machine_busy_s(psutil)
        last_own = _advisor_cpu_s(psutil, {self.pid})
        last_t = time.perf_counter()
        while True:
            tree = self._count_tree(root)
            if tree is None:
                break
            total_cpu, rss = 0.0, 0
            for proc in tree:
                try:
                    times = proc.cpu_times()
                    total_cpu += times.user + times.system
                    rss += proc.memory_info().rss
                except psutil.Error:
                    continue
            busy = _machine_busy_s(psutil)
            own = _advisor_cpu_s(psutil, {p.pid for p in tree})
            now = time.perf_counter()
            # NOTE: an exited worker takes its CPU time with it; such an interval is skipped.
            if last_cpu is not None and now > last_t and total_cpu >= last_cpu:
                frac = (total_cpu - last_cpu) / ((now - last_t) * ncpu)
                self._cpu.append(min(1.0, frac))
                if busy is not None and last_busy is not None and own is not None and last_own is not None \
                        and own >= last_own:
                    spent = (total_cpu - last_cpu) + (own - last_own)
                    other = (busy - last_busy - spent) / ((now - last_t) * ncpu)
                    self._other.append(min(1.0, max(0.0, other)))
            last_cpu, last_busy, last_own, last_t = total_cpu, busy, own, now
            with contextlib.suppress(OSError, AttributeError):
                self._load.append(os.getloadavg()[0])
            self._rss_peak = max(self._rss_peak, rss)
            self._sample_gpu()
            if self._watch_tree(root, now + self.interval_s):
                break

    def _count_tree(self, root: Any) -> list[Any] | None:
        """List the child's process tree and record its largest process and thread counts.

        None once the child is gone. The tree is read from its own ``/proc`` entries where the
        kernel lists children there (:mod:`advisor._proctree`): psutil reads every process's.
        """
        import psutil

        if _proctree.supported():
            try:
                kids = _proctree.descendants(root.pid)
            except ProcessLookupError:
                return None
            tree = [root, *(proc for pid in kids if (proc := self._process(pid)) is not None)]
            threads = _proctree.threads(root.pid) + sum(kids.values())
        else:
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.Error:
                return None
            threads = 0
            for proc in tree:
                with contextlib.suppress(psutil.Error):
                    threads += proc.num_threads()
        self._procs, self._threads = max(self._procs, len(tree)), max(self._threads, threads)
        return tree

    def _process(self, pid: int) -> Any:
        """Return psutil's handle of ``pid``, made once per process (None once it is gone)."""
        import psutil

        proc = self._handles_by_pid.get(pid)
        if proc is None:
            try:
                proc = self._handles_by_pid[pid] = psutil.Process(pid)
            except psutil.Error:
                return None
        return proc

    def _watch_tree(self, root: Any, until: float) -> bool:
        """Count the tree's processes often between samples; True once asked to stop.

        DataLoader workers of a short run can live for less than one CPU sampling interval;
        counting them and their threads is cheap, so the count is polled every ``_TREE_POLL_S``.
        """
        while True:
            left = until - time.perf_counter()
            if left <= 0:
                return self._stop.is_set()
            if self._stop.wait(min(_TREE_POLL_S, left)):
                return True
            if self._count_tree(root) is None:
                return False

    def _sample_gpu(self) -> None:
        if not self._handles:
            return
        nvml = self._nvml
        try:
            utils = [nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self._handles]
            used = sum(int(nvml.nvmlDeviceGetMemoryInfo(h).used) for h in self._handles)
        except Exception:  # noqa: BLE001 - one failed sample is skipped
            return
        util = sum(utils) / (100.0 * len(utils))
        self._gpu.append(util)
        if self._timing:
            self._gpu_timed.append(util)
        self._gpu_mem_peak = max(self._gpu_mem_peak, used)

    def _cpu_summary(self) -> UtilSummary:
        import psutil

        note = None if self._cpu else "CPU not sampled: the script ended before a full interval"
        return UtilSummary(
            mean_util_frac=_mean(self._cpu),
            max_util_frac=max(self._cpu) if self._cpu else None,
            samples=len(self._cpu),
            peak_memory_bytes=self._rss_peak or None,
            total_memory_bytes=int(psutil.virtual_memory().total),
            note=note,
            load_avg_mean=_mean(self._load),
            load_avg_max=max(self._load) if self._load else None,
            other_util_frac=_mean(self._other),
            max_processes=self._procs or None,
            max_threads=self._threads or None,
        )

    def _gpu_summary(self) -> UtilSummary:
        if not self._handles:
            return UtilSummary(note=self._gpu_note)
        # NOTE: the timed steps' samples where there are any; a run too short for one keeps the whole run's, and says so.
        shown = self._gpu_timed or self._gpu
        note = None
        if not self._gpu:
            note = "GPU not sampled: the script ended before a full interval"
        elif not self._gpu_timed:
            note = "GPU utilisation over the whole run: no NVML sample fell in the timed steps"
        return UtilSummary(
            mean_util_frac=_mean(shown),
            max_util_frac=max(shown) if shown else None,
            samples=len(shown),
            peak_memory_bytes=self._gpu_mem_peak or None,
            total_memory_bytes=self._gpu_total,
            note=note,
        )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _machine_busy_s(psutil: Any) -> float | None:
    """CPU seconds the whole machine has spent busy (all cores, everything but idle and I/O wait)."""
    try:
        return busy_s(psutil.cpu_times())
    except Exception:  # noqa: BLE001 - contention is best effort
        return None


def _advisor_cpu_s(psutil: Any, tree: set[int]) -> float | None:
    """CPU seconds of advisor's own processes outside the run's ``tree``: this one and the rest it started.

    Not "other processes": the trials' warm-start server imports torch beside the capture's
    start-up (it is stopped during the measured steps), and advisor's own threads sample and draw.
    """
    try:
        me = psutil.Process()
        total = sum(me.cpu_times()[:2])
        for proc in _proctree.handles(psutil, me, skip=tree):
            with contextlib.suppress(psutil.Error):
                total += sum(proc.cpu_times()[:2])
    except Exception:  # noqa: BLE001 - contention is best effort
        return None
    return float(total)


def visible_handles(nvml: Any, visible: str | None) -> list[Any]:
    """NVML handles of the GPUs the script can see: ``CUDA_VISIBLE_DEVICES`` when set, else all.

    NVML numbers every GPU of the machine, whatever the process may use: a job given one GPU of
    eight was sampled as the eight together (utilisation averaged, memory summed). Entries are
    indices or ``GPU-`` UUIDs (a prefix is enough, as for CUDA); the list ends at the first
    entry that names no GPU, as CUDA's does. With a MIG entry every GPU is sampled, as before
    (NVML reports no utilisation per MIG instance).
    """
    count = nvml.nvmlDeviceGetCount()
    if visible is None or not visible.strip():
        return [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)] if visible is None else []
    if "MIG-" in visible:
        return [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    uuids: list[str] | None = None
    handles: list[Any] = []
    for entry in (e.strip() for e in visible.split(",")):
        if entry.isdigit() and int(entry) < count:
            handles.append(nvml.nvmlDeviceGetHandleByIndex(int(entry)))
            continue
        if not entry.startswith("GPU-"):
            break
        if uuids is None:
            uuids = [_text(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)]
        match = [i for i, u in enumerate(uuids) if u.startswith(entry)]
        if len(match) != 1:
            break
        handles.append(nvml.nvmlDeviceGetHandleByIndex(match[0]))
    return handles


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
