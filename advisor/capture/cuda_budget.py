"""``--memory-budget`` on a GPU: CUDA's per-process memory fraction, set when CUDA starts.

A CUDA process holds 1-3 GB of host memory for the driver and the libraries whatever its model,
so the host watchdog of a CPU run (:func:`advisor.capture.run._wait`) would stop a GPU baseline
under any budget of the size a GPU job is given, and would not see what the budget is about: the
device's memory. Here the child asks torch to cap its caching allocator at the budget
(``torch.cuda.set_per_process_memory_fraction``) on every visible device, from torch's own lazy
CUDA initialisation (``torch.cuda._lazy_call``): a script that never touches CUDA never starts it,
and the cap is in place before the first allocation of one that does. A run over the cap fails
with torch's own out-of-memory error, which the fix loop reads as a memory failure.

Where a GPU is visible the child leaves a marker in the run folder before the script starts, and
the parent's host watchdog stands down when it sees it. Not later, at CUDA's start: starting CUDA
takes seconds while the driver's host memory grows, and the watchdog would stop the run in
between. So a CPU-only script on a GPU machine is not held to the budget; its report says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MARKER = "cuda-budget.json"
"""Left in the run folder by a child whose CUDA memory is capped (the parent's watchdog then stands down)."""


def install(budget_bytes: int, run_dir: Path, torch: Any = None, visible: bool | None = None) -> bool:
    """Cap CUDA's memory at ``budget_bytes`` when (and if) the script starts CUDA.

    Args:
        budget_bytes: The ``--memory-budget``.
        run_dir: The run folder, where the marker goes.
        torch: The torch module (None: import it).
        visible: Whether a GPU is visible (None: look, without starting CUDA).

    Returns:
        False when no GPU is visible to this torch (the host watchdog then applies), else True.
    """
    if torch is None:
        import torch
    if visible is None:
        from advisor.capture.warm_preload import gpu_visible

        visible = gpu_visible() is not None
    if not visible or (getattr(torch.version, "cuda", None) is None and getattr(torch.version, "hip", None) is None):
        return False
    marker = run_dir / MARKER
    marker.write_text(json.dumps({"budget_bytes": budget_bytes, "devices": None}), encoding="utf-8")

    def cap() -> None:
        devices = []
        for index in range(torch.cuda.device_count()):
            total = int(torch.cuda.get_device_properties(index).total_memory)
            fraction = min(1.0, budget_bytes / total)
            torch.cuda.set_per_process_memory_fraction(fraction, index)
            devices.append({"device": index, "total_bytes": total, "fraction": round(fraction, 6)})
        marker.write_text(json.dumps({"budget_bytes": budget_bytes, "devices": devices}), encoding="utf-8")

    torch.cuda._lazy_call(cap)
    return True


def capped(run_dir: Path) -> bool:
    """Whether the run's memory budget is CUDA's (its child saw a GPU; the host is not watched)."""
    return (run_dir / MARKER).is_file()


def devices_capped(run_dir: Path) -> list[dict] | None:
    """Read the devices capped and their fractions (None: CUDA never started, or no GPU was visible)."""
    try:
        return json.loads((run_dir / MARKER).read_text(encoding="utf-8")).get("devices")
    except (OSError, ValueError, AttributeError):
        return None


def note(run_dir: Path) -> str | None:
    """Say how the budget held a run that saw a GPU (None: the host watchdog held it)."""
    if not capped(run_dir):
        return None
    devices = devices_capped(run_dir)
    if not devices:
        return ("the --memory-budget caps CUDA memory where a GPU is visible; this run never started "
                "CUDA, so nothing held it to the budget")
    return "the --memory-budget capped CUDA's allocator at " + ", ".join(
        f"{d['fraction']:.1%} of device {d['device']}" for d in devices)
