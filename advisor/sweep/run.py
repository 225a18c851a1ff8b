"""Run the sweep: every cell of input size x batch size x precision x accumulation, at run time, interleaved and repeated.

Each cell is the user's unmodified script with changes installed in the child:

- the batch size through the catalog's ``larger_batch`` (the DataLoader's ``batch_size``
  multiplied by ``cell / script``, so a cell's batch must be a multiple of the script's own);
- the precision through ``bf16_autocast`` or ``fp16_amp`` (autocast);
- the accumulation (micro-batches per optimizer step) as the catalog changes it: through the
  script's own accumulation option when it has one (``script_args``' recognised names, set on
  a new command line), else at run time by :mod:`advisor.sweep.child` (optimizer steps on every
  k-th call, gradients averaged), for a script that does not accumulate already;
- the input size through the script's own size option on a new command line
  (:mod:`advisor.sweep.plan`); the counted step's model input gives each cell's voxels, pixels
  or tokens per sample, so the table has elements/s next to samples/s.

Runs go through the fix loop's :class:`~advisor.fixes.loop.measure.Measurer`, so a cell run is
exactly a trial run: timed steps without the profiler, a fixed seed, the first losses recorded,
fewer steps for big batches, and ``RunSpec.memory_budget_bytes`` enforced by the capture (an
RSS watchdog on CPU). The first run of each cell also counts the FLOPs of its last warm-up
step (:data:`advisor.sweep.child.COUNT_FLOPS`), which gives TFLOP/s and MFU.

Order: a plain first run tells the script's batch size (and is the first repeat of the
``script batch, fp32, accumulation 1`` cell when that cell is asked for); then every round runs
each live cell once, the order reversed on alternate rounds, so drift of the machine spreads
over all cells. A cell that runs out of memory or fails is not run again. After every run the
table so far goes to ``checkpoint`` (status ``running``), so an interrupted sweep keeps what it
finished.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advisor._num import median
from advisor.capture.model import Environment, FixRequest, NoteState, RunCapture, RunSpec
from advisor.capture.records import OUT_OF_MEMORY, ScriptOption
from advisor.capture.vocab import StepSource
from advisor.errors import UsageError
from advisor.fixes.fix import FixContext, context_from_capture
from advisor.fixes.loop.measure import Measurer
from advisor.fixes.loop.options import Runner, default_runner
from advisor.fixes.stats import loss_parity, t_quantile
from advisor.rundir import SWEEP_FLOPS_FILE as FLOPS_FILE
from advisor.sweep import child
from advisor.sweep.diff import cell_diff
from advisor.sweep.model import (
    Cell,
    CellResult,
    CellStatus,
    Precision,
    SweepStatus,
    SweepTable,
)
from advisor.sweep.plan import RUNTIME_SIZE, Tally, elements, plan_cell, size_option

LOSS_STEPS = 5
CHILD_INSTALLER = "advisor.sweep.child"
"""The installer module cell runs name (``RunSpec.fix_installers``): the catalog's runtime plus the sweep's own."""
MIN_COUNT_WARMUP = 3
"""Warm-up steps of a run that counts FLOPs: step ``warmup - 1`` is counted, so the counter's
own cost (it slows the step it counts) stays out of the timed steps, and it is not the first step."""


@dataclass(frozen=True)
class SweepProgress:
    """One progress event: a run starting or finished, with counts that only go forward.

    Attributes:
        run: Runs finished so far (never decreases).
        runs_total: Finished runs plus the runs still planned (drops when a cell stops early).
        cell: The cell's label; repeat / repeats: which of its runs.
        started: True when the run is starting, False when it finished.
        result: The finished run's throughput or status.
        eta_s: Runs left times the median run's wall time (None before the first timed run).
    """

    run: int
    runs_total: int
    cell: str
    repeat: int
    repeats: int
    started: bool
    result: str = ""
    eta_s: float | None = None

    def line(self) -> str:
        """``[run 3/13] bs32-bf16 2/2: 118.2 samples/s · about 1 min 20 s left``."""
        what = "running" if self.started else self.result
        eta = "" if self.eta_s is None else f" · about {_duration(self.eta_s)} left"
        n = self.run + 1 if self.started else self.run
        return f"[run {n}/{self.runs_total}] {self.cell} {self.repeat}/{self.repeats}: {what}{eta}"


def _duration(seconds: float) -> str:
    s = max(0, round(seconds))
    return f"{s // 60} min {s % 60} s" if s >= 60 else f"{s} s"


def parse_cells(
    batch_sizes: Sequence[int], precisions: Sequence[str], accumulations: Sequence[int] = (1,),
    sizes: Sequence[int | None] = (None,),
) -> list[Cell]:
    """Every input size x batch size x accumulation x precision, smallest first, precisions in the given order.

    Raises:
        UsageError: An empty list, a batch size, accumulation or size below 1, or an unknown precision.
    """
    if not batch_sizes or not precisions or not accumulations:
        raise UsageError("give at least one --batch-sizes value, one --precisions value and one --accumulation value")
    bad = [b for b in batch_sizes if b < 1]
    if bad:
        raise UsageError(f"batch sizes must be 1 or more, not {bad[0]}")
    bad = [a for a in accumulations if a < 1]
    if bad:
        raise UsageError(f"--accumulation values must be 1 or more, not {bad[0]}")
    bad = [z for z in sizes if z is not None and z < 1]
    if bad or not sizes:
        raise UsageError(f"--sizes values must be 1 or more, not {bad[0] if bad else 'none'}")
    known = Precision.values()
    unknown = [p for p in precisions if p not in known]
    if unknown:
        raise UsageError(f"unknown precision {unknown[0]!r}; choose from {', '.join(known)}")
    return [
        Cell(b, p, a, z)
        for z in sorted(dict.fromkeys(sizes), key=lambda z: -1 if z is None else z)
        for b in sorted(dict.fromkeys(batch_sizes))
        for a in sorted(dict.fromkeys(accumulations))
        for p in dict.fromkeys(precisions)
    ]


def run_sweep(
    spec: RunSpec,
    cells: Sequence[Cell],
    *,
    repeats: int = 2,
    runner: Runner = default_runner,
    progress: Callable[[SweepProgress], None] | None = None,
    checkpoint: Callable[[SweepTable], None] | None = None,
    size_name: str | None = None,
) -> SweepTable:
    """Measure every cell (see the module doc) and return the table.

    Args:
        spec: The script and its phases; ``memory_budget_bytes`` caps every cell's run.
        cells: The configurations (from :func:`parse_cells`); the first is the reference.
        repeats: Runs per cell (at least 1; 2 or more give an interval).
        runner: Runs one capture (tests pass a fake).
        progress: Called when each run starts and when it ends.
        checkpoint: Called with the table so far (status ``running``) after every run.
        size_name: The script's option that cells' ``size`` sets (default: the first of
            :data:`~advisor.fixes.catalog.script_args.SIZE_NAMES` the script has).
    """
    if repeats < 1:
        raise UsageError(f"--repeats must be at least 1, not {repeats}")
    started = time.perf_counter()
    load_start = _load()
    loop = Measurer(spec, runner, None, repeats, 0.03, LOSS_STEPS)
    probe_req, probe_over = _counting((), {}, spec, loop.root / "probe")
    planned = len(cells) * repeats  # until the probe tells which cell it stands for
    if progress is not None:
        progress(SweepProgress(0, planned, "probe (the script as it is)", 1, 1, started=True))
    probe = loop.run("probe", probe_req, probe_over)
    if progress is not None:
        rate = loop.rate(probe)
        done = f"{rate:,.1f} samples/s" if rate else f"failed ({probe.status})"
        typical = median(loop.walls)
        progress(SweepProgress(1, max(planned, 1), "probe (the script as it is)", 1, 1, started=False, result=done,
                               eta_s=None if typical is None else (planned - 1) * typical))
    if not probe.ok or loop.rate(probe) is None:
        why = probe.error.message if probe.error else f"status {probe.status}"
        raise UsageError(f"the plain run of the script failed ({why}); fix the script before sweeping it")
    ctx = context_from_capture(probe)
    step_ms = median(probe.timed.step_times_ms)
    tallies = [plan_cell(c, ctx, spec, step_ms, size_name) for c in cells]
    sized: ScriptOption | str | None = None
    if any(c.size is not None for c in cells):
        sized = size_option(ctx, size_name) or RUNTIME_SIZE
    notes: list[str] = []
    for t in tallies:
        if t.status == CellStatus.OK and not t.requests:
            _record(t, probe, loop, loop.root / "probe")  # the plain run is this cell's first repeat
            break
    else:
        notes.append("the first, plain run only read the script's batch size: no cell is the script as it is")
    env = probe.environment

    def table(status: str, final: bool = False) -> SweepTable:
        return _table(spec, tallies, repeats, ctx, env, notes, status, loop.runs,
                      time.perf_counter() - started, (load_start, _load()), final, sized)

    if checkpoint is not None:
        checkpoint(table(SweepStatus.RUNNING))
    for r in range(repeats):
        order = tallies if r % 2 == 0 else list(reversed(tallies))
        for t in order:
            if t.status != CellStatus.OK or len(t.rates) > r:
                continue
            name = f"{t.cell.label}-{r + 1}"
            requests, overrides = t.requests, dict(t.overrides)
            if not t.rates:  # the cell's first run also counts the FLOPs of a step
                requests, overrides = _counting(requests, overrides, spec, loop.root / name)
            elif requests:
                overrides["fix_installers"] = (CHILD_INSTALLER,)
            if progress is not None:
                progress(_event(loop, tallies, repeats, t, r, started=True))
            cap = loop.run(name, requests, overrides)
            _record(t, cap, loop, loop.root / name)
            if progress is not None:
                progress(_event(loop, tallies, repeats, t, r, started=False))
            if checkpoint is not None:
                checkpoint(table(SweepStatus.RUNNING))
    return table(SweepStatus.COMPLETE, final=True)


def _load() -> float:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover - not available on this platform
        return math.nan


def _event(loop: Measurer, tallies: list[Tally], repeats: int, t: Tally, r: int, started: bool) -> SweepProgress:
    left = sum(x.runs_left(repeats) for x in tallies)
    typical = median(loop.walls)
    result = ""
    if not started:
        result = f"{t.rates[-1]:,.1f} samples/s" if t.status == CellStatus.OK and t.rates else str(t.status)
    return SweepProgress(
        run=loop.runs, runs_total=loop.runs + left, cell=t.cell.label, repeat=r + 1, repeats=repeats,
        started=started, result=result, eta_s=None if typical is None else left * typical,
    )


def _counting(
    requests: tuple[FixRequest, ...], overrides: dict[str, Any], spec: RunSpec, run_dir: Path
) -> tuple[tuple[FixRequest, ...], dict[str, Any]]:
    """Add the FLOP count to a run: the sweep's installer, and enough warm-up to count a step inside it."""
    warmup = max(int(overrides.get("warmup_steps", spec.warmup_steps)), MIN_COUNT_WARMUP)
    count = FixRequest(child.COUNT_FLOPS, {"path": str(run_dir / FLOPS_FILE), "step": warmup - 1})
    return (*requests, count), {**overrides, "warmup_steps": warmup, "fix_installers": (CHILD_INSTALLER,)}


def _record(t: Tally, cap: RunCapture, loop: Measurer, run_dir: Path) -> None:
    """Add one run to a cell: its throughput, or why the cell stops; its FLOPs when counted."""
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
        k = t.cell.accumulation if any(r.id == child.ACCUMULATE for r in t.requests) else 1
        # NOTE: the capture sums the losses of a step's micro-batches (a script that accumulates
        # divides each by k itself); the run-time accumulation divides the gradients instead,
        # so its step's loss sum is k times the mean the reference cell's step records.
        t.losses = tuple(None if v is None else v / k for v in cap.losses)
    if t.flops_per_sample is None and not t.flops_why:
        t.flops_per_sample, t.flops_why = _flops_per_sample(cap, run_dir / FLOPS_FILE)
    if t.elements_per_sample is None:
        t.elements_per_sample, t.element_unit = _input_elements(run_dir / FLOPS_FILE)


def _input_elements(path: Path) -> tuple[float | None, str]:
    """Return the voxels, pixels or tokens of a sample of the counted step's model input, and their unit."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        shape = [int(d) for d in data["input_shape"]]
    except (OSError, ValueError, TypeError, KeyError):
        return None, ""
    return elements(shape, bool(data.get("input_integer")))


def _flops_per_sample(cap: RunCapture, path: Path) -> tuple[float | None, str]:
    """Return the counted step's FLOPs per sample (the run's median samples per step), or why there are none."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        if cap.step_source not in (None, StepSource.OPTIMIZER):
            return None, f"steps are counted from {cap.step_source}, not optimizer steps: no step was counted"
        return None, "no FLOP count was written (the run ended before its counted step)"
    if not isinstance(data, dict) or "flops" not in data:
        return None, f"the FLOP count failed ({data.get('error', 'no result') if isinstance(data, dict) else 'bad file'})"
    samples = median(s for s in cap.timed.samples if s)
    flops = float(data["flops"])
    if not samples:
        return None, "the run counted no samples per step"
    if flops <= 0:
        return None, "FlopCounterMode counted no matmul or convolution in a step"
    return flops / samples, ""


MEASURED_FP32 = "measured_fp32"
"""``peak_source`` of a cell whose precision ran torch.mm slower than fp32 here: fp32's rate is its peak."""


def _peak(env: Environment, precision: str) -> tuple[float | None, str | None, str]:
    """Return the device's peak TFLOP/s for a precision, its source, or why none is known."""
    from advisor.capture.peak import peak_for
    from advisor.metrics.devices import peak_tflops

    dtype = str(precision)
    if env.device.startswith("cuda"):
        peak = peak_tflops(env.device_name, dtype)
        if peak:
            return peak, "datasheet", ""
        return None, None, f"no datasheet peak is known for {env.device_name or 'this GPU'} in {dtype}"
    peak, measured_in = peak_for(env.matmul_peaks, dtype)
    if peak:
        return peak, MEASURED_FP32 if measured_in != dtype else "measured", ""
    return None, None, f"no {dtype} matmul peak was measured on this CPU"


def _result(t: Tally, reference: Tally, repeats: int, env: Environment) -> CellResult:
    """Turn a cell's runs into its row: median throughput with its interval, memory, loss delta, FLOP rates."""
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
    status = t.status
    if status == CellStatus.OK and not t.rates:
        status, reason = CellStatus.NOT_RUN, "the sweep was interrupted before this cell ran"
    elif status == CellStatus.OK and t.batch is not None and t.batch != t.cell.batch_size:
        reason = f"the DataLoader ran with batch {t.batch} (the data set caps it)"
    rate = median(t.rates)
    tflops = mfu = peak = None
    source = None
    why = ""
    if status == CellStatus.OK:
        why = t.flops_why
        if t.flops_per_sample is not None and rate:
            tflops = t.flops_per_sample * rate / 1e12
            peak, source, why = _peak(env, str(t.cell.precision))
            mfu = tflops / peak if peak else None
            if mfu is not None and mfu > 1.0:
                # NOTE: no cell can beat a peak. On CPU the "peak" is torch.mm's rate measured here,
                # and other operators can outrun it (MONAI's 3D UNet in bf16 ran at 2.3x the bf16
                # mm rate: oneDNN convolutions, not the slow bf16 GEMM): a utilisation of 233% would
                # only mislead, so the column says why there is none.
                why = (f"{tflops:.3g} TFLOP/s is above the {t.cell.precision} peak it would be measured against "
                       f"({peak:.3g} TFLOP/s, {source}): that figure is no peak for this model's operators")
                mfu = peak = source = None
    return CellResult(
        cell=t.cell, status=status, batch_size=t.batch, samples_per_s=rate,
        ci_low=lo, ci_high=hi, peak_memory_bytes=max(t.peaks) if t.peaks else None,
        memory_kind=t.memory_kind, loss_delta=delta, tflops=tflops, flops_per_sample=t.flops_per_sample,
        peak_tflops=peak, peak_source=source, mfu=mfu, not_measured=why,
        elements_per_sample=t.elements_per_sample, element_unit=t.element_unit,
        elements_per_s=t.elements_per_sample * rate if t.elements_per_sample and rate and status == CellStatus.OK else None,
        repeats=len(t.rates),
        unfinished=status == CellStatus.OK and len(t.rates) < repeats, reason=reason,
    )


def _table(
    spec: RunSpec, tallies: list[Tally], repeats: int, ctx: FixContext, env: Environment, notes: list[str],
    status: str, runs: int, wall_s: float, load: tuple[float, float], final: bool,
    sized: ScriptOption | str | None = None,
) -> SweepTable:
    """Build the table so far: every cell's row, the recommended cell among the finished ones, its diff when ``final``.

    With an input-size axis, each size's first cell is the loss reference of that size's cells
    (another size is other data), and only cells of the script's own size are recommended: the
    size is the task's, not a speed setting, and samples/s across sizes compare different work.
    ``sized`` is the script's size option, or :data:`~advisor.sweep.plan.RUNTIME_SIZE` when MONAI's
    crops are resized at run time (the script's own size is then not known: no size cell is recommended).
    """
    reference = tallies[0]
    first_of = {}
    for t in tallies:
        first_of.setdefault(t.cell.size, t)
    results = tuple(_result(t, first_of[t.cell.size], repeats, env) for t in tallies)
    own = sized.value if isinstance(sized, ScriptOption) else None
    fitting = [
        (x, t) for x, t in zip(results, tallies, strict=True)
        if x.status == CellStatus.OK and x.samples_per_s and not x.unfinished
        and (x.loss_delta is None or x.loss_delta <= t.loss_rtol or x.cell == first_of[t.cell.size].cell)
        and t.cell.size in (None, own)
    ]
    best = max(fitting, key=lambda xt: xt[0].samples_per_s or 0.0, default=None)
    diff = cell_diff(spec, best[1].cell, best[1].requests, best[1].params, ctx) if final and best is not None else ""
    device = env.device_name if env.device.startswith("cuda") and env.device_name else env.device
    return SweepTable(
        script=str(spec.script), args=tuple(spec.args), results=results, reference=reference.cell,
        recommended=best[0].cell if best else None,
        loss_tolerance=max((t.loss_rtol for t in tallies), default=0.0),
        memory_budget_bytes=spec.memory_budget_bytes, script_batch_size=ctx.batch_size, notes=tuple(notes),
        wall_s=round(wall_s, 3), runs=runs, status=status, diff=diff,
        load_avg=tuple(x for x in load if math.isfinite(x)), device=device,
        size_option=(sized.flag or sized.name) if isinstance(sized, ScriptOption) else sized, script_size=own,
    )
