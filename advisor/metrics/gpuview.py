"""Where GPU time goes, per trace: idle attribution, roofline per operator, modules, collectives.

One entry point, :func:`gpu_views`, runs the analyses of :mod:`advisor.metrics.idle`,
:mod:`advisor.metrics.roofline`, :mod:`advisor.metrics.modules` and
:mod:`advisor.metrics.collectives` over the per-rank analyses and returns what
:func:`advisor.metrics.compute.compute_metrics` adds to :class:`~advisor.metrics.model.Metrics`:
extra step columns, run-level values, JSON-able tables (``Metrics.extra``), source locations
and notes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from advisor.metrics.collectives import collectives_across_ranks
from advisor.metrics.idle import attribute_idle
from advisor.metrics.model import SourceLocation
from advisor.metrics.modules import module_times, top_modules
from advisor.metrics.roofline import TOP_OPS, compute_roofline
from advisor.metrics.sources import UserPredicate, looks_like_user_file
from advisor.metrics.tensorcore import misaligned

if TYPE_CHECKING:
    from advisor.metrics.steps import TraceAnalysis

TOP_FUNCTIONS = 10
"""Rows of the idle-by-function table kept in the report."""

TABLE_KEYS: tuple[str, ...] = ("idle_functions", "roofline", "modules", "collectives", "misaligned_ops")
"""Keys of ``Metrics.extra`` (and ``Report.tables``) this module fills, in display order."""


@dataclass(frozen=True)
class GpuViews:
    """What the GPU-time analyses add to the metrics of a set of ranks."""

    steps: pd.DataFrame
    run: dict[str, float | None] = field(default_factory=dict)
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    locations: tuple[SourceLocation, ...] = ()
    notes: tuple[str, ...] = ()


def _records(frame: pd.DataFrame, limit: int) -> list[dict[str, Any]]:
    out = []
    for row in frame.head(limit).to_dict("records"):
        clean = {}
        for k, v in row.items():
            if isinstance(v, float | np.floating):
                v = float(v)
                clean[k] = v if np.isfinite(v) else None
            elif isinstance(v, np.integer):
                clean[k] = int(v)
            else:
                clean[k] = v
        out.append(clean)
    return out


def gpu_views(analyses: Sequence[TraceAnalysis], is_user: UserPredicate = looks_like_user_file) -> GpuViews:
    """Run the GPU-time analyses over every rank's analysis.

    Returns:
        Step columns aligned with ``pd.concat([a.steps for a in analyses])``, the tables for
        the first rank (ranks of one job run the same code), and every rank's locations.
    """
    step_parts = []
    locations: list[SourceLocation] = []
    tables: dict[str, list[dict[str, Any]]] = {}
    notes: list[str] = []
    for i, a in enumerate(analyses):
        idle = attribute_idle(a, with_functions=i == 0, is_user=is_user)
        roof = compute_roofline(a, str(a.run.get("device_name") or ""), with_table=i == 0)
        tc_steps, tc_table, tc_locations = misaligned(roof.ops, a, is_user)
        cols = idle.steps.assign(step_mfu_frac=roof.step_mfu, sized_gpu_time_frac=roof.sized_time_frac)
        step_parts.append(pd.concat([cols, tc_steps], axis=1))
        if i == 0:
            locations.extend(idle.locations)
            locations.extend(tc_locations)
            if len(tc_table):
                tables["misaligned_ops"] = _records(tc_table, TOP_FUNCTIONS)
            notes.extend(roof.notes)
            if len(idle.functions):
                tables["idle_functions"] = _records(idle.functions, TOP_FUNCTIONS)
            if len(roof.table):
                tables["roofline"] = _records(roof.table, TOP_OPS)
            modules = module_times(a)
            if len(modules):
                ordered = top_modules(modules)
                tables["modules"] = _records(ordered, len(ordered))
    steps = pd.concat(step_parts, ignore_index=True) if step_parts else pd.DataFrame()
    coll, run = collectives_across_ranks(analyses)
    if len(coll):
        tables["collectives"] = _records(coll, len(coll))
    return GpuViews(steps=steps, run=run, tables=tables, locations=tuple(locations), notes=tuple(notes))
