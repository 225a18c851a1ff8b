"""One rank's analysis reduced to what the cross-rank merge needs: small, picklable, no event rows.

:func:`digest` runs every per-rank analysis on a :class:`~advisor.metrics.steps.TraceAnalysis`
(the per-step rows, the GPU-time views, the collective calls) and keeps only their results:
tables of one row per step or per collective call, run-level values and notes. The lead rank
(the lowest rank: ranks of one job run the same code) also keeps the report's tables, its
source locations and its top kernels. :func:`advisor.metrics.compute.merge_digests` turns a
job's digests into :class:`~advisor.metrics.model.Metrics`.

This is what lets ranks be analysed in separate processes (``advisor analyze --jobs N``): each
process holds one rank's events at a time and sends back only its digest, so the parent never
holds more than the digests.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from advisor.metrics.aside import Aside, aside
from advisor.metrics.collectives import rank_collectives
from advisor.metrics.gpuview import (
    LeadTables,
    RankView,
    gpu_view,
    lead_tables,
    with_lead,
)
from advisor.metrics.model import SourceLocation
from advisor.metrics.sources import lead_locations
from advisor.metrics.steps import TraceAnalysis, analyze_trace
from advisor.metrics.timeline import step_timeline
from advisor.metrics.userframes import UserPredicate, looks_like_user_file
from advisor.trace.load import REPAIRED_KEY, Trace


@dataclass(frozen=True)
class LeadExtras:
    """What only the lead rank contributes to a report.

    Attributes:
        locations: Source locations found in its trace (syncs, copies, data loading).
        has_stacks: Its trace has Python stacks (``python_function`` events or ``Call stack``).
        old_format: Its trace uses the old Kineto format (``Call stack`` args).
        top_kernels: The kernels with the most total time.
        timeline: Events of one representative step, for the HTML timeline (when the digest
            was asked for it; empty otherwise).
    """

    locations: tuple[SourceLocation, ...] = ()
    has_stacks: bool = False
    old_format: bool = False
    top_kernels: tuple[dict[str, Any], ...] = ()
    timeline: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class RankDigest:
    """One rank's analysis without its events.

    Attributes:
        rank: The rank (``distributedInfo.rank``, else the file's position).
        path: The trace file.
        repaired: Event names re-escaped while loading it.
        steps: One row per profiler step (the ``step``-scope metrics).
        view: The GPU-time analyses' step columns (and, for the lead, tables and locations).
        run: Run-level values (device, dtype, FLOPs, memory peak, ...).
        notes: The analysis' notes.
        real_steps: The trace has ``ProfilerStep#N`` markers (not one whole-trace window).
        has_gpu: The trace has device events.
        windows: Its number of step windows.
        collectives: Its collective kernel calls (one row each).
        lead: The lead rank's extras (None for the other ranks).
    """

    rank: int
    path: Path
    repaired: int
    steps: pd.DataFrame = field(repr=False)
    view: RankView = field(repr=False)
    run: dict[str, Any]
    notes: tuple[str, ...]
    real_steps: bool
    has_gpu: bool
    windows: int
    collectives: pd.DataFrame = field(repr=False)
    lead: LeadExtras | None = None

    def relabel(self, rank: int) -> RankDigest:
        """Return the same digest under another rank number (several files claimed the same rank)."""
        if rank == self.rank:
            return self
        return replace(
            self,
            rank=rank,
            steps=self.steps.assign(rank=rank),
            collectives=self.collectives.assign(rank=rank) if len(self.collectives) else self.collectives,
        )


def top_kernels(analysis: TraceAnalysis, limit: int = 10) -> list[dict[str, Any]]:
    """List the kernels with the most total time in the analysed steps (name, count, total_ms)."""
    ev = analysis.trace.events
    mask = analysis.cls.kernel
    if not mask.any():
        return []
    sub = ev.loc[mask, ["name", "dur"]]
    grouped = sub.groupby("name", observed=True)["dur"].agg(["count", "sum"]).sort_values("sum", ascending=False)
    return [
        {"name": str(name)[:200], "count": int(row["count"]), "total_ms": round(float(row["sum"]) / 1e3, 3)}
        for name, row in grouped.head(limit).iterrows()
    ]


def lead_extras(analysis: TraceAnalysis, is_user: UserPredicate, timeline: bool = False) -> LeadExtras:
    """Compute the lead rank's extras (see :class:`LeadExtras`), the timeline only when ``timeline``."""
    locations, has_stacks = lead_locations(analysis, is_user)
    return LeadExtras(
        locations=tuple(locations),
        has_stacks=has_stacks,
        old_format=bool(analysis.trace.events["call_stack"].notna().any()),
        top_kernels=tuple(top_kernels(analysis)),
        timeline=_timeline(analysis) if timeline else (),
    )


def _timeline(analysis: TraceAnalysis) -> tuple[dict[str, Any], ...]:
    try:
        return tuple(step_timeline(analysis.trace))
    except Exception:  # noqa: BLE001 - the timeline is decoration; never fail an analysis over it
        return ()


def digest(
    analysis: TraceAnalysis, is_user: UserPredicate = looks_like_user_file, lead: bool = False, timeline: bool = False,
) -> RankDigest:
    """Reduce one rank's analysis to its :class:`RankDigest` (with the lead's extras when ``lead``).

    ``timeline``: the lead's extras hold one step's events for the HTML timeline.
    The lead's tables and extras need no step column: on a large trace a second core computes
    them while this process attributes the idle time and sizes the operators (:mod:`advisor.metrics.aside`).
    """
    if not lead:
        return _digest(analysis, gpu_view(analysis, is_user, lead=False), None)
    with aside(lambda: _lead_work(analysis, is_user, timeline), len(analysis.trace.events)) as branch:
        view = gpu_view(analysis, is_user)
        tables, extras = branch.result()
        return _digest(analysis, with_lead(view, tables), extras)


def digest_trace(
    trace: Trace, is_user: UserPredicate = looks_like_user_file, lead: bool = False, timeline: bool = False,
) -> RankDigest:
    """Analyse one rank's trace and reduce it as :func:`digest` does, its branches started early.

    Neither the GPU-time views nor the lead's tables and extras read a step column: on a large
    trace each starts in a forked child from the trace's outline (its windows, classification,
    assembly calls and tiny-operator runs) while this process computes the step columns, and
    the breakdown too unless they took every core. On this project's 2-core machine, analysing
    a 385 MB trace again and again in one process, two children were 1.26x faster than one (the
    lead's work in this process) and 1.13x faster than three (the breakdown forked as well); a
    first analysis in a fresh process, where 2 cores bound it by CPU either way, 1.03x faster than
    the earlier layout (the GPU-time views in this process after the step columns).
    """
    with contextlib.ExitStack() as stack:
        view: list[Aside[RankView]] = []
        more: list[Aside[tuple[LeadTables, LeadExtras]]] = []

        def early(outline: TraceAnalysis) -> int:
            rows = len(trace.events)
            view.append(stack.enter_context(aside(lambda: gpu_view(outline, is_user, lead), rows)))
            if lead:
                more.append(stack.enter_context(aside(lambda: _lead_work(outline, is_user, timeline), rows)))
            return sum(branch.pid != 0 for branch in (*view, *more))

        analysis = analyze_trace(trace, early=early)
        if not lead:
            return _digest(analysis, view[0].result(), None)
        tables, extras = more[0].result()
        return _digest(analysis, with_lead(view[0].result(), tables), extras)


def _lead_work(analysis: TraceAnalysis, is_user: UserPredicate, timeline: bool) -> tuple[LeadTables, LeadExtras]:
    return lead_tables(analysis, is_user), lead_extras(analysis, is_user, timeline)


def _digest(analysis: TraceAnalysis, view: RankView, extras: LeadExtras | None) -> RankDigest:
    trace = analysis.trace
    return RankDigest(
        rank=trace.rank,
        path=trace.path,
        repaired=int(trace.metadata.get(REPAIRED_KEY) or 0),
        steps=analysis.steps,
        view=view,
        run=dict(analysis.run),
        notes=tuple(analysis.notes),
        real_steps=bool(analysis.real_steps),
        has_gpu=bool(analysis.cls.has_gpu),
        windows=len(analysis.windows),
        collectives=rank_collectives(analysis),
        lead=extras,
    )
