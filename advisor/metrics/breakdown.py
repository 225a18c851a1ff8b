"""The step-time breakdown: every microsecond of a step assigned to exactly one part.

A step is the wall-clock span of ``ProfilerStep#N`` (the CPU-side annotation). Many things
happen at once inside it (the GPU runs kernels while the CPU loads the next batch, several
streams overlap, ops nest), so the parts are assigned by *priority*: an instant goes to the
highest-priority activity in progress at that instant. The parts therefore add up to the
step's wall time exactly (``<part>_ms`` sum to ``step_time_ms``, ``<part>_frac`` to 1).

torch-tb-profiler's order was Kernel > Memcpy > Memset > Communication > Runtime >
DataLoader > CPU Exec > Other. advisor keeps its spirit -- *device time first* -- and keeps the
two timelines apart:

GPU traces (any kernel, memcpy or memset in the trace). While the GPU is busy, the step is
GPU-bound, whatever the CPU does at the same moment:

1. ``gpu_compute``: a non-communication kernel, a memset or a device-to-device copy runs;
2. ``communication``: only collective kernels (NCCL/RCCL) run;
3. ``h2d_copy``: only host-to-device copies run;
4. ``d2h_copy``: only device-to-host copies run.

While the GPU is idle, the CPU's activity explains why:

5. ``sync_wait``: the CPU waits in a sync call (``cuda*Synchronize``) or in
   ``aten::item`` / ``_local_scalar_dense``;
6. ``communication``: a CPU-side collective (``nccl:``/``gloo:``/``c10d::``) is in progress;
7. ``data_loading``: inside ``enumerate(DataLoader)#...__next__``, or in a user function that
   assembles batches in the training process (:mod:`advisor.metrics.input_work`);
8. ``optimizer``: inside ``Optimizer.step#...``;
9. ``cpu_ops``: inside any operator or CUDA runtime call (host overhead, launches);
10. ``gpu_idle``: the GPU is idle and the CPU is in none of the above (Python between ops,
    unprofiled work). ``other`` is 0 on GPU traces.

So on GPU, data loading that overlaps running kernels is GPU-busy time (it costs nothing
while the device has work); ``data_loading`` is only the part that leaves the GPU idle, and
``dataloader_wait_ms`` reports the full time in ``__next__`` next to it.

CPU-only traces (our own CPU captures): there is no device timeline, so the parts describe the
main process's CPU time: ``sync_wait`` (``aten::item``; nearly free on CPU), ``communication``
(gloo collectives), ``data_loading``, ``optimizer``, ``cpu_ops`` (inside any top-level aten
op), ``other`` (Python between ops). ``gpu_compute``, ``h2d_copy``, ``d2h_copy`` and
``gpu_idle`` are 0.

CPU events of every thread of the trace count (the autograd engine runs backward on its own
thread on GPU). Each part is computed as the growth of the covered time when its intervals are
added to the union of all higher-priority ones, per step, with vectorised interval unions.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from advisor.metrics.events import Classified
from advisor.metrics.intervals import Pieces, Windows, clip_to_steps, concat, merge, union_per_step
from advisor.metrics.registry import BREAKDOWN_PARTS


def _pieces(events: pd.DataFrame, mask: np.ndarray, windows: Windows) -> Pieces:
    rows = np.flatnonzero(mask)
    return clip_to_steps(events["ts"].to_numpy()[rows], events["end"].to_numpy()[rows], windows)


def priority_layers(
    events: pd.DataFrame, cls: Classified, windows: Windows, input_work: np.ndarray | None = None,
) -> list[tuple[str, Pieces]]:
    """Return the (part, clipped intervals) layers in priority order for this trace.

    ``input_work``: rows of the user's batch-assembling calls (:mod:`advisor.metrics.input_work`),
    counted as data loading beside the DataLoader's ``__next__``.
    """
    loading = cls.dataloader if input_work is None else cls.dataloader | input_work
    layers: list[tuple[str, np.ndarray]] = []
    if cls.has_gpu:
        other_copy = cls.memcpy & ~cls.h2d & ~cls.d2h
        layers += [
            ("gpu_compute", (cls.kernel & ~cls.comm_kernel) | cls.memset | other_copy),
            ("communication", cls.comm_kernel),
            ("h2d_copy", cls.h2d),
            ("d2h_copy", cls.d2h),
        ]
    layers += [
        ("sync_wait", cls.sync_call | cls.item),
        ("communication", cls.comm_op),
        ("data_loading", loading),
        ("optimizer", cls.optimizer),
        ("cpu_ops", cls.cpu_op | cls.runtime),
    ]
    return [(part, _pieces(events, mask, windows)) for part, mask in layers]


def breakdown(
    events: pd.DataFrame, cls: Classified, windows: Windows, input_work: np.ndarray | None = None,
) -> pd.DataFrame:
    """Per-step ``<part>_ms`` and ``<part>_frac`` columns (one row per window).

    Args:
        events: The trace's events table.
        cls: Its classification masks.
        windows: Its step windows.
        input_work: Rows that assemble batches in the training process (data loading too).

    Returns:
        A frame with ``step_time_ms`` and, for every part of ``BREAKDOWN_PARTS``, ``<part>_ms``
        and ``<part>_frac``; the parts of each row add up to its step time.
    """
    n = len(windows)
    step_us = windows.duration
    part_us = {part: np.zeros(n) for part in BREAKDOWN_PARTS}
    covered = np.zeros(n)
    acc = merge(concat())
    for part, pieces in priority_layers(events, cls, windows, input_work):
        # the layer's own union first: sorting the two sorted sets together is then one merge
        # pass, where the running union was re-sorted among each layer's unsorted pieces
        acc = merge(concat(acc, merge(pieces)))
        now = np.bincount(acc.window, weights=acc.length, minlength=n) if len(acc.start) else np.zeros(n)
        part_us[part] += now - covered
        covered = now
    rest = np.clip(step_us - covered, 0.0, None)
    part_us["gpu_idle" if cls.has_gpu else "other"] += rest
    out: dict[str, np.ndarray] = {"step_time_ms": step_us / 1e3}
    safe = np.where(step_us > 0, step_us, 1.0)
    for part in BREAKDOWN_PARTS:
        out[f"{part}_ms"] = part_us[part] / 1e3
    for part in BREAKDOWN_PARTS:
        out[f"{part}_frac"] = part_us[part] / safe
    return pd.DataFrame(out)


__all__ = ["breakdown", "priority_layers", "union_per_step"]
