"""Wait for the GPU at the timed window's edges, so the window times the GPU's work too.

Step times come from the CPU's clock at each step boundary (the optimizer hook). On a GPU the
CPU runs ahead of the device by as much as its launch queue holds: where nothing in the step
waits for the GPU (the data already on the device, or copies made non-blocking by a fix), a
window of CPU times measures how fast kernels are queued, not run, and overstates the rate.
Waiting for the device at the boundary that opens the window and at the one that closes it
makes the window's total the GPU's time; the steps inside keep their overlap, as in the script.

Only where the script started CUDA, and through torch's raw binding: ``torch.cuda.synchronize``
itself is wrapped by the capture's hooks, which count the script's syncs (rules SY001/SY002).
"""

from __future__ import annotations

import sys
from typing import Any

from advisor.capture.model import Phase


def at_window_edge(rec: Any) -> bool:
    """Whether the boundary about to be counted opens or closes the timed window."""
    ends = rec.phases.ends()
    nxt = rec.steps + 1
    if rec.phase == Phase.WARMUP:
        return nxt >= ends[Phase.WARMUP] and rec.phases.timed > 0
    return rec.phase == Phase.TIMED and nxt >= ends[Phase.TIMED]


def sync_at_window_edges(rec: Any) -> bool:
    """Wait for the GPU when this boundary is an edge of the timed window (True: it waited)."""
    if not at_window_edge(rec):
        return False
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return False
    torch._C._cuda_synchronize()
    return True
