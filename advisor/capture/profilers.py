"""The child's two profilers behind :class:`~advisor.capture.phases.ProfilerControl`.

torch.profiler for the profiled window (a Chrome trace, gzip-compressed, in TensorBoard's file
layout) and cProfile for its own window (``profile.pstats``); the step recorder starts, steps
and stops them.
"""

from __future__ import annotations

import cProfile
import os
import socket
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from advisor.capture.budget import StepSize, measure_step
from advisor.capture.module_names import ModuleNamer


def _record_always(_step: int) -> Any:
    from torch.profiler import ProfilerAction

    # NOTE: a schedule that always records, rather than no schedule: torch emits the
    # ProfilerStep#N ranges only when a schedule is set.
    return ProfilerAction.RECORD


def new_profile(stacks: bool = True, memory: bool = True) -> Any:
    """Return a torch.profiler (CPU, plus CUDA when available) with shapes and modules, and stacks and memory as asked."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    return profile(
        activities=activities,
        schedule=_record_always,
        record_shapes=True,
        profile_memory=memory,
        with_stack=stacks,
        with_modules=stacks,  # nn.Module frames (advisor.metrics.modules): torch records them with the stacks only
    )


class TorchProfilerControl:
    """torch.profiler for the profiled window, exported in TensorBoard's file layout.

    ``stacks`` and ``memory`` say whether the window records Python stacks and memory events
    (:mod:`advisor.capture.budget` may turn them off to bound the trace); ``exported_bytes`` is
    the last exported trace's uncompressed size.
    """

    def __init__(self, traces_dir: Path, run_dir: Path, files: list[str], notes: list[str]):
        self.traces_dir = traces_dir
        self.run_dir = run_dir
        self.files = files
        self.notes = notes
        self._prof: Any = None
        self.call_sites: Any = None  # hooks.CallSites, set once the hooks are installed
        self.namer = ModuleNamer()  # the model's names for the trace's nn.Module frames
        self.stacks = True
        self.memory = True
        self.exported_bytes: int | None = None

    def start(self) -> None:
        """Start torch.profiler (see :func:`new_profile`)."""
        self._prof = new_profile(self.stacks, self.memory)
        self._prof.start()
        self._hooks(True)

    def _hooks(self, on: bool) -> None:
        """Turn the window's own hooks (module names, call sites) on or off; they add events to the trace."""
        for hook in (self.namer, self.call_sites):
            if hook is not None:
                hook.enable() if on else hook.disable()

    def step(self) -> None:
        """Close ProfilerStep#N and open the next one."""
        if self._prof is not None:
            self._prof.step()

    def stop(self, export: bool) -> None:
        """Stop and, when asked, export ``<host>_<pid>.<ns>.pt.trace.json.gz`` into traces/."""
        prof = self._halt()
        if prof is None or not export:
            return
        path = self._trace_path()
        try:
            prof.export_chrome_trace(str(path))
        except Exception as exc:  # noqa: BLE001 - a failed export is a note, not a lost run
            self.notes.append(f"torch.profiler trace export failed: {exc}")
            return
        self._keep(path)

    def discard(self) -> None:
        """Delete the traces exported so far (their steps were not the run's steps after all)."""
        for rel in self.files:
            try:
                (self.run_dir / rel).unlink()
            except OSError:
                self.notes.append(f"could not remove the superseded trace {rel}")
        self.files.clear()

    def probe_stop(self, scratch: Path) -> StepSize:
        """Stop the window after its first step; export that step to ``scratch`` and measure it.

        The window is then started again by :class:`~advisor.capture.budget.TraceProbe`, with the
        options its plan keeps. ``scratch`` stays until the probe knows whether the new window
        holds a step (:meth:`keep_probe`, or deleted).
        """
        t0 = time.perf_counter()
        prof = self._halt()
        if prof is None:
            raise RuntimeError("no profiled step to measure")
        prof.export_chrome_trace(str(scratch))
        return replace(measure_step(scratch), export_s=time.perf_counter() - t0)

    def keep_probe(self, scratch: Path) -> None:
        """Make the probed step's export the run's trace: the script ended before the window's next step."""
        self._keep(scratch.replace(self._trace_path()))

    def _halt(self) -> Any:
        """Stop the window's profiler and its hooks; return the profiler (None when none was running)."""
        prof, self._prof = self._prof, None
        if prof is not None:
            self._hooks(False)
            prof.stop()
        return prof

    def _trace_path(self) -> Path:
        """Return a new ``<host>_<pid>.<ns>.pt.trace.json`` in traces/ (TensorBoard's file layout)."""
        self.traces_dir.mkdir(parents=True, exist_ok=True)
        return self.traces_dir / f"{socket.gethostname()}_{os.getpid()}.{time.time_ns()}.pt.trace.json"

    def _keep(self, path: Path) -> None:
        """Count an exported trace's size, then compress it and list it among the run's trace files."""
        self.exported_bytes = path.stat().st_size
        self.files.append(gzip_trace(path, self.notes).relative_to(self.run_dir).as_posix())


def gzip_trace(path: Path, notes: list[str]) -> Path:
    """Compress an exported trace to ``<name>.gz`` beside it and drop the plain file; return the kept file.

    Chrome-trace JSON compresses 5-20x, and TensorBoard, Perfetto and advisor read the ``.gz``
    as they are. Level 6, not gzip's 9, because the script waits: measured on a 3.9 MB CPU trace
    of examples/data_loading.py, level 6 gave 13.3x in 0.16 s and level 9 14.4x in 0.56 s. When
    compression fails (a full disk) the plain trace is kept, with a note, never lost.
    """
    import gzip
    import shutil

    gz = path.with_name(path.name + ".gz")
    tmp = gz.with_name(gz.name + ".tmp")
    try:
        with open(path, "rb") as src, gzip.open(tmp, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        tmp.replace(gz)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        notes.append(f"trace kept uncompressed ({exc.strerror or exc})")
        return path
    path.unlink()
    return gz


class CProfileControl:
    """Run cProfile over its own window (it cannot share one with torch's Python stacks)."""

    def __init__(self, path: Path, run_dir: Path, out: dict[str, Any]):
        self.path = path
        self.run_dir = run_dir
        self.out = out
        self._prof: cProfile.Profile | None = None

    def start(self) -> None:
        """Enable cProfile on the main thread."""
        self._prof = cProfile.Profile()
        self._prof.enable()

    def step(self) -> None:
        """CProfile has no notion of steps."""

    def stop(self, export: bool) -> None:
        """Disable it and, when asked, write ``profile.pstats``."""
        prof, self._prof = self._prof, None
        if prof is None:
            return
        prof.disable()
        if export:
            prof.dump_stats(str(self.path))
            self.out["pstats_file"] = self.path.relative_to(self.run_dir).as_posix()
