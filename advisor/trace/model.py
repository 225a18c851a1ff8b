"""The trace stage's output: one rank's trace as a table, and the vocabulary its columns use."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

# Old Kineto category names -> the current ones (Kineto renamed them around torch 1.10).
CATEGORY_ALIASES: dict[str, str] = {
    "Operator": "cpu_op",
    "Runtime": "cuda_runtime",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
}

MISSING = -1
"""Value of integer columns (ids, bytes, stream, ...) where the event has no such field."""


@dataclass(frozen=True)
class Trace:
    """One rank's trace as a table.

    Attributes:
        path: The file it came from.
        rank: ``distributedInfo.rank`` when present, else the file's position in its folder.
        events: One row per event, flow events (``ph`` ``s``/``t``/``f``: the launch arrows,
            which the correlation ids already give) left out. Columns: ``name``, ``cat``, ``ph``, ``pid``, ``tid``
            (categoricals; pid/tid as strings), ``ts``, ``dur``, ``end`` (float us; ``dur``
            is 0 for instants), the integer args ``ext_id``, ``correlation``, ``bytes``,
            ``stream``, ``device``, ``total_allocated``, ``mem_bytes``, ``mem_addr``, ``device_type``,
            ``device_id``, ``py_id``, ``py_parent``, ``seq_nr`` (an operator's autograd sequence
            number: it recorded an autograd node) (``MISSING`` = -1 when absent), ``flops``
            (float, NaN when absent) and the categoricals ``input_dims``, ``input_type``,
            ``concrete_inputs`` (JSON text; kept for the matmul/conv ops of ``SHAPE_OPS``) and
            ``call_stack`` (str; every operator), NaN when absent.
        metadata: ``deviceProperties``, ``distributedInfo``, ``baseTimeNanoseconds``,
            ``schemaVersion`` and the profiler flags (``with_stack``, ...), where present.
    """

    path: Path
    rank: int
    events: pd.DataFrame = field(repr=False)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def device_properties(self) -> list[dict[str, Any]]:
        """The trace's ``deviceProperties`` list (empty for CPU-only traces)."""
        return list(self.metadata.get("deviceProperties") or [])


REPAIRED_KEY = "advisor_repaired_names"
"""``Trace.metadata`` key: how many event names were re-escaped because torch wrote them unescaped."""
