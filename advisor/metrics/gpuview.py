"""Where GPU time goes, per trace: idle attribution, roofline per operator, modules, operators, collectives.

Per rank, :func:`gpu_view` runs the analyses of :mod:`advisor.metrics.idle`,
:mod:`advisor.metrics.roofline`, :mod:`advisor.metrics.modules`, :mod:`advisor.metrics.operators` and
:mod:`advisor.metrics.collectives` and :func:`merge_views` merges the ranks' views into what
:func:`advisor.metrics.compute.compute_metrics` adds to :class:`~advisor.metrics.model.Metrics`:
extra step columns, run-level values, JSON-able tables (``Metrics.extra``), source locations
and notes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from advisor.metrics.collectives import merge_collectives
from advisor.metrics.idle import attribute_idle
from advisor.metrics.memory_lines import TOP_LINES, memory_by_line
from advisor.metrics.model import SourceLocation
from advisor.metrics.modules import module_times, top_modules
from advisor.metrics.operators import operator_times
from advisor.metrics.roofline import TOP_OPS, compute_roofline
from advisor.metrics.tensorcore import misaligned
from advisor.metrics.userframes import UserPredicate, looks_like_user_file

if TYPE_CHECKING:
    from advisor.metrics.steps import TraceAnalysis

TOP_FUNCTIONS = 10
"""Rows of the idle-by-function table kept in the report."""

TABLE_KEYS: tuple[str, ...] = (
    "idle_functions", "roofline", "modules", "memory_lines", "operators", "collectives", "misaligned_ops",
)
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


@dataclass(frozen=True)
class RankView:
    """What the GPU-time analyses yield for one rank (small: no event rows).

    Attributes:
        steps: Step columns aligned with the rank's ``TraceAnalysis.steps``.
        locations / tables / notes / run: Filled for the lead rank only (ranks of one job run
            the same code), empty otherwise; ``run`` holds run-level values (the activations'
            share of the peak).
    """

    steps: pd.DataFrame
    locations: tuple[SourceLocation, ...] = ()
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    run: dict[str, float | None] = field(default_factory=dict)


LeadTables = tuple[dict[str, list[dict[str, Any]]], float | None]
"""The lead's tables that no step column needs, and the activations' share of the peak."""


def lead_tables(a: TraceAnalysis, is_user: UserPredicate = looks_like_user_file) -> LeadTables:
    """Compute the lead rank's modules, memory-line and operator tables (:func:`with_lead` adds them to its view)."""
    tables: dict[str, list[dict[str, Any]]] = {}
    modules = module_times(a)
    if len(modules):
        ordered = top_modules(modules)
        tables["modules"] = _records(ordered, len(ordered))
    memory = memory_by_line(a, is_user)
    if len(memory.table):
        tables["memory_lines"] = _records(memory.table, TOP_LINES)
    operators = operator_times(a)
    if len(operators):
        tables["operators"] = _records(operators, len(operators))
    return tables, memory.activation_frac


def with_lead(view: RankView, lead: LeadTables) -> RankView:
    """Add the lead's tables (after the view's own) and the activations' share of the peak to ``view``."""
    more, activation_frac = lead
    return replace(view, tables={**view.tables, **more}, run={"peak_activation_frac": activation_frac})


def gpu_view(a: TraceAnalysis, is_user: UserPredicate = looks_like_user_file, lead: bool = True) -> RankView:
    """Run the GPU-time analyses over one rank, without the lead's tables (:func:`with_lead` adds them).

    It reads the trace, its classification, step windows and ``run["device_name"]`` only, so
    the trace's outline is enough (:func:`advisor.metrics.steps.analyze_trace`'s ``early``).
    """
    idle = attribute_idle(a, with_functions=lead, is_user=is_user)
    roof = compute_roofline(a, str(a.run.get("device_name") or ""), with_table=lead)
    tc_steps, tc_table, tc_locations = misaligned(roof.ops, a, is_user)
    cols = idle.steps.assign(step_mfu_frac=roof.step_mfu, sized_gpu_time_frac=roof.sized_time_frac)
    steps = pd.concat([cols, tc_steps], axis=1)
    if not lead:
        return RankView(steps=steps)
    tables: dict[str, list[dict[str, Any]]] = {}
    if len(tc_table):
        tables["misaligned_ops"] = _records(tc_table, TOP_FUNCTIONS)
    if len(idle.functions):
        tables["idle_functions"] = _records(idle.functions, TOP_FUNCTIONS)
    if len(roof.table):
        tables["roofline"] = _records(roof.table, TOP_OPS)
    return RankView(steps=steps, locations=(*idle.locations, *tc_locations), tables=tables, notes=tuple(roof.notes))


def merge_views(
    views: Sequence[RankView], collectives: Sequence[pd.DataFrame], steps_per_rank: int,
    lead_view: RankView | None = None,
) -> GpuViews:
    """Merge the ranks' views (the first is the lead) with the collectives matched across ranks.

    Args:
        views: One per rank, in rank order.
        collectives: Each rank's :func:`~advisor.metrics.collectives.rank_collectives` frame.
        steps_per_rank: The most profiler steps any rank has.
        lead_view: Where the tables and locations come from instead of the first view (the
            straggler's, analysed as a lead: see :func:`advisor.metrics.compute.straggler_focus`).
    """
    steps = pd.concat([v.steps for v in views], ignore_index=True) if views else pd.DataFrame()
    lead = lead_view or (views[0] if views else RankView(steps=pd.DataFrame()))
    tables = dict(lead.tables)
    coll, run = merge_collectives(collectives, steps_per_rank)
    if len(coll):
        tables["collectives"] = _records(coll, len(coll))
    return GpuViews(steps=steps, run={**lead.run, **run}, tables=tables, locations=lead.locations, notes=lead.notes)
