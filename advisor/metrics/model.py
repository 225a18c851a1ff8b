"""The metrics stage's output: :class:`Metrics`, named tables plus a flat scalar summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from advisor._vocab import Vocab


class StepBasis(Vocab):
    """Which steps a step time (or a rate divided by it) comes from."""

    TIMED = "timed"  # the timed steps, run without the profiler: the clean figure
    PROFILED = "profiled"  # the profiled steps, when no timed steps were recorded


@dataclass(frozen=True)
class SourceLocation:
    """A place in the user's code that causes something (a sync, a copy, slow data loading).

    Attributes:
        kind: What happens there: ``sync``, ``item``, ``h2d``, ``d2h``, ``data_loading``, ``hot``,
            ``preprocess`` and ``host`` (GPU idle while that function ran, see
            :mod:`advisor.metrics.idle`), ``misaligned`` (a tensor-core-unfriendly GEMM shape),
            ``memory`` (a line whose allocations are live at the peak; its ``count`` is their
            share of the peak, :mod:`advisor.metrics.memory_lines`), ``periodic`` (work between
            steps every N steps, :mod:`advisor.metrics.periodic`), ``generation`` and
            ``one_sample`` (a line of that work generating without a KV cache, or inferring
            one sample per call, :mod:`advisor.metrics.generation`).
        file: Source file as recorded (absolute or as the profiler saw it).
        line: Line number.
        function: Function name when known.
        count: Occurrences per step (or calls in the pstats window).
        time_ms: Time attributed to it per step, when known.
        source: Where the location came from: ``trace`` (profiler Python stacks), ``pstats``
            or ``capture`` (the capture's own hooks).
    """

    kind: str
    file: str
    line: int
    function: str = ""
    count: float = 0.0
    time_ms: float = 0.0
    source: str = "trace"


@dataclass(frozen=True)
class Metrics:
    """Everything the analysis measured, for one run or trace (all ranks together).

    Attributes:
        source: The trace path or run directory analysed.
        summary: Declared metric name -> value (median over steps for ``step`` metrics;
            None where it cannot be computed). Keys are exactly the registry's names.
        steps: One row per (rank, step): columns ``rank``, ``step``, ``start_us``, ``end_us``
            and the ``step``-scope metric names (including every ``<part>_ms``/``<part>_frac``).
        ranks: One row per rank with its summary (rank, step_time_ms, communication_ms, ...);
            a single row for one-rank inputs.
        locations: Source locations for syncs, copies and data loading, most costly first.
        notes: Remarks about the analysis (no ProfilerStep found, old trace format, ...).
        device: Device names seen in the trace (e.g. ``NVIDIA H100 80GB HBM3``), if any.
        extra: Small JSON-able details for reports (top kernels, dtype mix, the named tables).
        focus_rank: The rank whose trace gave the source locations, time tables and top kernels
            when it is not the first rank (the straggler of a job); None for the first rank's.
    """

    source: str
    summary: dict[str, float | None]
    steps: pd.DataFrame
    ranks: pd.DataFrame
    locations: tuple[SourceLocation, ...] = ()
    notes: tuple[str, ...] = ()
    device: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    focus_rank: int | None = None
