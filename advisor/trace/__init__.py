"""Trace stage: read torch.profiler / Kineto Chrome traces into tables (never imports torch)."""

from advisor.trace.load import Trace, load_trace, load_traces

__all__ = ["Trace", "load_trace", "load_traces"]
