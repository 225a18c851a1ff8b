"""advisor: a profiler-driven performance advisor for PyTorch training.

The Python API (the same pipeline as the ``advisor`` command)::

    import advisor

    report = advisor.diagnose("train.py", args=["--epochs", "1"], steps=30, unsafe_fixes=True)
    report = advisor.analyze("traces/")              # traces you already have
    report = advisor.load("advisor-runs/train-...")  # a saved run
    advisor.frames.trials(report)                    # report tables as pandas DataFrames
    advisor.report_schema()                          # JSON Schema of report.json

A training script may call :func:`step`, which marks a step boundary in custom loops. Outside
``advisor diagnose`` it does nothing, so scripts keep working unchanged.

``import advisor`` stays cheap and free of torch and pandas: everything but :func:`step` is
imported on first use (:func:`__getattr__`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from advisor import api as _api
    from advisor.report import frames
    from advisor.report.model import Report

    diagnose = _api.diagnose
    analyze = _api.analyze
    load = _api.load
    report_schema = _api.report_schema

__all__ = ["Report", "__version__", "analyze", "diagnose", "frames", "load", "report_schema", "step"]
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


def __getattr__(name: str) -> Any:
    """Import the Python API on first use (PEP 562), so ``import advisor`` stays light."""
    # NOTE: the only imports of the stages from the root, and only here: tests/test_layers.py
    # lists them as the public facade's exceptions.
    if name in ("diagnose", "analyze", "load", "report_schema"):
        from advisor import api

        return getattr(api, name)
    if name == "frames":
        from advisor.report import frames

        return frames
    if name == "Report":
        from advisor.report.model import Report

        return Report
    raise AttributeError(f"module 'advisor' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
