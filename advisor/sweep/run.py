"""Run the sweep: every cell of batch size x precision, at run time, interleaved and repeated.

Each cell is the user's unmodified script with fixes of the catalog installed in the child:
the batch size through ``larger_batch`` (the DataLoader's ``batch_size`` multiplied by
``cell / script``, so a cell's batch must be a multiple of the script's own), the precision
through ``bf16_autocast`` or ``fp16_amp`` (autocast). Runs go through the fix loop's
:class:`~advisor.fixes.trials.Measurer`, so a cell run is exactly a trial run: timed steps
without the profiler, a fixed seed, the first losses recorded, fewer steps for big batches,
and ``RunSpec.memory_budget_bytes`` enforced by the capture (an RSS watchdog on CPU).

Order: a plain first run tells the script's batch size (and is the first repeat of the
``script batch, fp32`` cell when that cell is asked for); then every round runs each live cell
once, the order reversed on alternate rounds, so drift of the machine spreads over all cells.
A cell that runs out of memory or fails is not run again.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from advisor._num import median
from advisor.capture.model import OUT_OF_MEMORY, FixRequest, NoteState, RunCapture, RunSpec
from advisor.errors import UsageError
from advisor.fixes import catalog
from advisor.fixes.fix import context_from_capture, ladder_steps
from advisor.fixes.stats import loss_parity, t_quantile
from advisor.fixes.trials import Measurer, Runner, default_runner
from advisor.sweep.model import PRECISION_FIX, Cell, CellResult, CellStatus, Precision, SweepTable

LOSS_STEPS = 5


@dataclass
class _Tally:
    """One cell's runs so far (mutable bookkeeping)."""

    cell: Cell
    requests: tuple[FixRequest, ...] = ()
    overrides: dict[str, Any] = field(default_factory=dict)
    loss_rtol: float = 0.0
    rates: list[float] = field(default_factory=list)
    peaks: list[int] = field(default_factory=list)
    batch: int | None = None
    memory_kind: str | None = None
    losses: tuple[float | None, ...] = ()
    status: str = CellStatus.OK
    reason: str = ""


def parse_cells(batch_sizes: Sequence[int], precisions: Sequence[str]) -> list[Cell]:
    """Every batch size x precision, smallest batch first, in the precisions' order.

    Raises:
        UsageError: An empty list, a batch size below 1, or an unknown precision.
    """
    if not batch_sizes or not precisions:
        raise UsageError("give at least one --batch-sizes value and one --precisions value")
    bad = [b for b in batch_sizes if b < 1]
    if bad:
        raise UsageError(f"batch sizes must be 1 or more, not {bad[0]}")
    known = Precision.values()
    unknown = [p for p in precisions if p not in known]
    if unknown:
        raise UsageError(f"unknown precision {unknown[0]!r}; choose from {', '.join(known)}")
    return [Cell(b, p) for b in sorted(dict.fromkeys(batch_sizes)) for p in dict.fromkeys(precisions)]


def run_sweep(
    spec: RunSpec,
    cells: Sequence[Cell],
    *,
    repeats: int = 2,
    runner: Runner = default_runner,
    progress: Callable[[str], None] | None = None,
) -> SweepTable:
    """Measure every cell (see the module doc) and return the table.

    Args:
        spec: The script and its phases; ``memory_budget_bytes`` caps every cell's run.
        cells: The configurations (from :func:`parse_cells`); the first is the reference.
        repeats: Runs per cell (at least 1; 2 or more give an interval).
        runner: Runs one capture (tests pass a fake).
        progress: Called with one line after every run.
    """
    if repeats < 1:
        raise UsageError(f"--repeats must be at least 1, not {repeats}")
    started = time.perf_counter()
    loop = Measurer(spec, runner, None, repeats, 0.03, LOSS_STEPS)
    notes: list[str] = []
    probe = loop.run("probe", ())
    if not probe.ok or loop.rate(probe) is None:
        why = probe.error.message if probe.error else f"status {probe.status}"
        raise UsageError(f"the plain run of the script failed ({why}); fix the script before sweeping it")
    ctx = context_from_capture(probe)
    base = ctx.batch_size
    step_ms = median(probe.timed.step_times_ms)
    tallies = [_plan(c, base, ctx, spec, step_ms) for c in cells]
    for t in tallies:
        if t.status == CellStatus.OK and not t.requests:
            _record(t, probe, loop)  # the plain run is this cell's first repeat
            break
    else:
        notes.append("the first, plain run only read the script's batch size: no cell is the script as it is")
    for r in range(repeats):
        order = tallies if r % 2 == 0 else list(reversed(tallies))
        for t in order:
            if t.status != CellStatus.OK or len(t.rates) > r:
                continue
            cap = loop.run(f"{t.cell.label}-{r + 1}", t.requests, t.overrides)
            _record(t, cap, loop)
            if progress is not None:
                rate = f"{t.rates[-1]:.1f} samples/s" if t.status == CellStatus.OK and t.rates else t.status
                progress(f"[run {loop.runs}] {t.cell.label} {r + 1}/{repeats}: {rate}")
    reference = tallies[0]
    results = tuple(_result(t, reference) for t in tallies)
    fitting = [
        x for x, t in zip(results, tallies, strict=True)
        if x.status == CellStatus.OK and x.samples_per_s
        and (x.loss_delta is None or x.loss_delta <= t.loss_rtol or x.cell == reference.cell)
    ]
    best = max(fitting, key=lambda x: x.samples_per_s or 0.0, default=None)
    notes.append("TFLOP/s is not measured: cell runs are unprofiled, so their FLOPs are unknown")
    return SweepTable(
        script=str(spec.script), args=tuple(spec.args), results=results, reference=reference.cell,
        recommended=best.cell if best else None,
        loss_tolerance=max((t.loss_rtol for t in tallies), default=0.0),
        memory_budget_bytes=spec.memory_budget_bytes, script_batch_size=base, notes=tuple(notes),
        wall_s=round(time.perf_counter() - started, 3), runs=loop.runs,
    )


def _plan(cell: Cell, base: int | None, ctx: Any, spec: RunSpec, step_ms: float | None) -> _Tally:
    """Plan the fix requests and step overrides that make ``cell`` at run time."""
    t = _Tally(cell)
    requests: list[FixRequest] = []
    rtols = [0.0]
    if base is None:
        t.status, t.reason = CellStatus.NOT_APPLIED, "the script's DataLoader has no batch_size to change"
        return t
    if cell.batch_size != base:
        if cell.batch_size < base or cell.batch_size % base:
            t.status = CellStatus.NOT_APPLIED
            t.reason = (f"batch sizes are set at run time by multiplying the script's own ({base}): "
                        f"{cell.batch_size} is not a multiple of it")
            return t
        k = cell.batch_size // base
        requests.append(FixRequest("larger_batch", {"factor": k, "max_batch": cell.batch_size}))
        rtols.append(catalog.get("larger_batch").loss_rtol)
        t.overrides = ladder_steps(spec, k, 1, step_ms)
    fix_id = PRECISION_FIX.get(str(cell.precision))
    if fix_id is not None:
        fix = catalog.get(fix_id)
        params = dict(fix.plan_variants(ctx, spec, step_ms)[0].params)
        requests.append(FixRequest(fix_id, params))
        rtols.append(fix.loss_rtol)
    t.requests, t.loss_rtol = tuple(requests), max(rtols)
    return t


def _record(t: _Tally, cap: RunCapture, loop: Measurer) -> None:
    """Add one run to a cell: its throughput, or why the cell stops."""
    skipped = [n.detail for n in cap.fix_notes.values() if n.state is NoteState.SKIPPED]
    if not cap.ok:
        err = cap.error
        text = f"{err.type}: {err.message}" if err else f"status {cap.status}"
        oom = err is not None and (err.type == OUT_OF_MEMORY or "out of memory" in err.message.lower())
        t.status = CellStatus.OOM if oom else CellStatus.FAILED
        t.reason = text
        return
    if skipped:
        t.status, t.reason = CellStatus.NOT_APPLIED, "; ".join(skipped)
        return
    rate = loop.rate(cap)
    if rate is None:
        t.status, t.reason = CellStatus.FAILED, "the run recorded no timed steps"
        return
    if any(v is not None and not math.isfinite(v) for v in cap.losses):
        t.status, t.reason = CellStatus.FAILED, "the loss is not finite"
        return
    t.rates.append(rate)
    if cap.peak_memory_bytes:
        t.peaks.append(int(cap.peak_memory_bytes))
        t.memory_kind = cap.memory_kind
    if cap.dataloaders and cap.dataloaders[0].batch_size:
        t.batch = cap.dataloaders[0].batch_size
    if not t.losses:
        t.losses = tuple(cap.losses)


def _result(t: _Tally, reference: _Tally) -> CellResult:
    """Turn a cell's runs into its row: median throughput with its interval, memory, loss delta."""
    lo = hi = None
    if len(t.rates) >= 2:
        logs = [math.log(r) for r in t.rates]
        half = t_quantile(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
        mean = statistics.fmean(logs)
        lo, hi = math.exp(mean - half), math.exp(mean + half)
    delta = None
    if t.losses and reference.losses:
        delta = loss_parity(reference.losses, t.losses, math.inf).max_rel_diff
    reason = t.reason
    if t.status == CellStatus.OK and t.batch is not None and t.batch != t.cell.batch_size:
        reason = f"the DataLoader ran with batch {t.batch} (the data set caps it)"
    return CellResult(
        cell=t.cell, status=t.status, batch_size=t.batch, samples_per_s=median(t.rates),
        ci_low=lo, ci_high=hi, peak_memory_bytes=max(t.peaks) if t.peaks else None,
        memory_kind=t.memory_kind, loss_delta=delta, repeats=len(t.rates), reason=reason,
    )
