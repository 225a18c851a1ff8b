"""Trace stage: read torch.profiler / Kineto Chrome traces into tables (never imports torch).

The names below load on first use: a decode can start (:mod:`advisor.trace.early`) before
pandas, which only the finished table needs, is imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from advisor.trace.load import Trace, load_trace, load_traces

__all__ = ["Trace", "load_trace", "load_traces"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from advisor.trace import load  # noqa: PLC0415 - lazy on purpose (above)

        return getattr(load, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
