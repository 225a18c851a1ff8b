"""advisor: a profiler-driven performance advisor for PyTorch training.

The one public function a training script may call is :func:`step`, which marks a step boundary
in custom loops. Outside ``advisor diagnose`` it does nothing, so scripts keep working unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["__version__", "step"]
__version__ = "0.1.0"

# NOTE: the capture child installs its step callback here. Kept as a module attribute (not an
# import of the capture package) so `import advisor` stays free of torch for plain scripts.
_step_callback: Callable[[], None] | None = None


def step() -> None:
    """Mark the end of one training step in a custom loop.

    ``advisor diagnose`` finds steps from optimizer steps or DataLoader batches on its own; call
    this when neither applies (a loop without ``torch.optim``, or several optimizers per step).
    Outside advisor this is a no-op.
    """
    callback = _step_callback
    if callback is not None:
        callback()
