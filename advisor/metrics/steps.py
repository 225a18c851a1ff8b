"""Per-step metrics of one trace (one rank): breakdown, counts, copies, memory, FLOPs.

Every event is attributed to its ``ProfilerStep#N`` window with ``searchsorted`` (instants by
their timestamp; GPU work by the timestamp of the runtime call that launched it; intervals are
clipped at window edges). The result is one row per step with the ``step``-scope metric names
of :mod:`advisor.metrics.registry` as columns, plus a few run-level values.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from advisor.metrics.aside import aside
from advisor.metrics.attention import hand_attention_count
from advisor.metrics.breakdown import breakdown
from advisor.metrics.devices import GpuSpec, conv_peak_dtype, find_gpu
from advisor.metrics.events import (
    Classified,
    classify,
    find_windows,
    launch_ts,
    name_mask,
)
from advisor.metrics.flops import FlopsResult, compute_flops
from advisor.metrics.input_work import assembly_calls, outermost_calls
from advisor.metrics.intervals import (
    Pieces,
    Windows,
    clip_to_steps,
    concat,
    max_gap_per_step,
    merge,
    point_step,
    union_per_step,
)
from advisor.metrics.optimizer_ops import optimizer_columns
from advisor.metrics.registry import FAMILIES
from advisor.metrics.tiny_ops import TinyRuns, tiny_run_frac, tiny_runs
from advisor.trace.load import Trace

SMALL_KERNEL_US = 10.0
SMALL_CPU_OP_US = 20.0
SYNC_MEMCPY_CALLS = frozenset({"cudaMemcpy", "cuMemcpyHtoD_v2", "cuMemcpyHtoD", "hipMemcpy", "cudaMemcpy2D"})


@dataclass(frozen=True)
class TraceAnalysis:
    """What one trace yields: its step rows and run-level values, plus reusable intermediates."""

    trace: Trace
    windows: Windows
    real_steps: bool
    cls: Classified
    steps: pd.DataFrame
    run: dict[str, Any]
    notes: tuple[str, ...] = ()
    flops: FlopsResult | None = field(default=None, repr=False)
    assembly_calls: np.ndarray | None = field(default=None, repr=False)  # rows of batch-assembling user calls
    tiny: TinyRuns | None = field(default=None, repr=False)  # runs of tiny operators (advisor.metrics.tiny_ops)


def _clip(events: pd.DataFrame, mask: np.ndarray, windows: Windows) -> Pieces:
    return clip_to_steps(events["ts"].to_numpy()[mask], events["end"].to_numpy()[mask], windows)


def _count(step_idx: np.ndarray, n: int, weights: np.ndarray | None = None) -> np.ndarray:
    ok = step_idx >= 0
    w = None if weights is None else weights[ok]
    return np.bincount(step_idx[ok], weights=w, minlength=n).astype(np.float64)


def _median(step_idx: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    ok = step_idx >= 0
    out = np.full(n, np.nan)
    if ok.any():
        med = pd.Series(values[ok]).groupby(step_idx[ok]).median()
        out[med.index.to_numpy()] = med.to_numpy()
    return out


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def top_level_ops(events: pd.DataFrame, cls: Classified) -> np.ndarray:
    """Row positions of CPU operators not nested inside another operator on the same thread.

    ``cls`` must be the classification of ``events`` (it holds the rows, computed once, read-only).
    """
    return cls.top_ops


def _h2d_blocking(events: pd.DataFrame, cls: Classified, h2d_rows: np.ndarray) -> np.ndarray:
    """Flag the HtoD copies that block the CPU.

    Blocking: a pageable source, a synchronous memcpy call, or a sync call right after the
    launching call on the same thread.
    """
    sync_memcpy = cls.runtime & name_mask(events["name"], lambda n: n in SYNC_MEMCPY_CALLS)
    blocking = cls.pageable[h2d_rows].copy()
    rt_rows = np.flatnonzero(cls.runtime)
    if len(rt_rows) == 0 or len(h2d_rows) == 0:
        return blocking
    tid = events["tid"].cat.codes.to_numpy()[rt_rows]
    ts = events["ts"].to_numpy()[rt_rows]
    order = np.lexsort((ts, tid))
    rt_sorted = rt_rows[order]
    same_next = np.r_[tid[order][1:] == tid[order][:-1], False]
    next_sync = np.r_[cls.sync_call[rt_sorted[1:]], False] & same_next
    corr = events["correlation"].to_numpy()
    rt_corr = corr[rt_sorted]
    valid = rt_corr >= 0
    keys, first = np.unique(rt_corr[valid], return_index=True)
    if len(keys) == 0:
        return blocking
    pos_in_valid = np.flatnonzero(valid)[first]
    c = corr[h2d_rows]
    p = np.clip(np.searchsorted(keys, c), 0, len(keys) - 1)
    found = keys[p] == c
    launcher = pos_in_valid[p]
    sync_call = sync_memcpy[rt_sorted[launcher]]
    return blocking | (found & (sync_call | next_sync[launcher]))


def _peak_memory(events: pd.DataFrame, cls: Classified, gpu: bool) -> tuple[float | None, str | None]:
    """Return the peak allocated bytes from [memory] events, and a caveat if any.

    Uses the max 'Total Allocated', else the max running sum of 'Bytes' (a lower bound:
    allocations made before profiling started are not in the trace).
    """
    if not cls.memory.any():
        return None, None
    mem = events.loc[cls.memory, ["ts", "total_allocated", "mem_bytes", "device_type", "device_id"]]
    wanted = 1 if gpu else 0  # Kineto Device Type: 0 = CPU, 1 = CUDA
    sub = mem[mem["device_type"] == wanted]
    if sub.empty:
        return None, None
    if (sub["total_allocated"] >= 0).any():
        return float(sub.loc[sub["total_allocated"] >= 0, "total_allocated"].max()), None
    sub = sub[sub["mem_bytes"] != -1].sort_values("ts", kind="stable")
    running = sub.groupby("device_id")["mem_bytes"].cumsum()
    peak = float(running.max()) if len(running) else None
    return peak, (
        "peak memory from [memory] events is the growth during the trace (no 'Total Allocated' "
        "in this trace): memory allocated before profiling started is not included"
    )


def _main_device(trace: Trace, events: pd.DataFrame, cls: Classified) -> dict[str, Any] | None:
    props = trace.device_properties
    if not props:
        return None
    devices = events["device"].to_numpy()[cls.gpu]
    devices = devices[devices >= 0]
    wanted = int(np.bincount(devices).argmax()) if len(devices) else None
    for p in props:
        if wanted is not None and p.get("id") == wanted:
            return p
    return props[0]


@dataclass(frozen=True)
class _Scan:
    """One trace's events, classification and step windows, shared by the metric families."""

    ev: pd.DataFrame
    cls: Classified
    windows: Windows
    ts: np.ndarray
    dur: np.ndarray
    lts: np.ndarray  # GPU work at the timestamp of the runtime call that launched it

    @property
    def n(self) -> int:
        return len(self.windows)

    @property
    def step_us(self) -> np.ndarray:
        return self.windows.duration

    def nan(self) -> np.ndarray:
        return np.full(self.n, np.nan)

    def busy_frac(self, mask: np.ndarray) -> np.ndarray:
        """Share of each step covered by the union of the ``mask`` events."""
        return self.covered_frac(_clip(self.ev, mask, self.windows))

    def covered_frac(self, pieces: Pieces) -> np.ndarray:
        """Share of each step covered by the union of ``pieces`` (clipped to the steps)."""
        return union_per_step(pieces, self.n) / np.where(self.step_us > 0, self.step_us, 1.0)


def analyze_trace(trace: Trace, early: Callable[[TraceAnalysis], int] | None = None) -> TraceAnalysis:
    """Compute per-step metrics and run-level values for one trace.

    Each metric family (:data:`advisor.metrics.registry.FAMILIES`) is one function below; the
    GPU-only families are NaN on a trace without GPU work.

    ``early`` is called with the trace's outline before any step column is computed: a
    ``TraceAnalysis`` whose ``steps`` hold the step windows only and whose ``run`` holds only
    ``device_name``, without FLOPs (what the GPU-time views and the lead's tables read:
    :func:`advisor.metrics.digest.digest_trace` starts them there on other cores). It returns
    how many cores it took, so that the breakdown is forked only onto a core still free.
    """
    ev = trace.events
    cls = classify(ev)
    windows, real_steps = find_windows(trace)
    notes: list[str] = []
    if not real_steps:
        notes.append(
            f"{trace.path.name}: no ProfilerStep#N found; the whole trace was analysed as one window "
            "(call prof.step() once per iteration to get per-step figures)"
        )
    top = top_level_ops(ev, cls)
    calls = assembly_calls(ev, cls, top)
    assembly = outermost_calls(ev, calls)
    tiny = tiny_runs(ev, cls, top, assembly)
    dev = _main_device(trace, ev, cls) if cls.has_gpu else None
    steps = pd.DataFrame({"rank": trace.rank, "step": windows.step, "start_us": windows.start, "end_us": windows.end})
    outline = {"device_name": str(dev.get("name", "")) if dev else ""}
    busy = early(TraceAnalysis(trace, windows, real_steps, cls, steps, outline, assembly_calls=calls, tiny=tiny)) if early else 0
    # the breakdown needs no other column: on a large trace a free core computes it meanwhile
    with aside(lambda: breakdown(ev, cls, windows, assembly), len(ev), busy=busy) as parts:
        # the launch times are the step columns' alone: computed once the branches have started
        ts = ev["ts"].to_numpy()
        scan = _Scan(ev, cls, windows, ts, ev["dur"].to_numpy(), launch_ts(ev, cls) if cls.has_gpu else ts)
        cols, run, fl = _columns(trace, scan, top, assembly, tiny, dev, notes)
        steps = pd.concat([steps, parts.result(), pd.DataFrame(cols)], axis=1)
    return TraceAnalysis(trace, windows, real_steps, cls, steps, run, tuple(notes), fl, calls, tiny)


def _columns(
    trace: Trace, scan: _Scan, top: np.ndarray, assembly: np.ndarray, tiny: TinyRuns, dev: dict[str, Any] | None,
    notes: list[str],
) -> tuple[dict[str, np.ndarray], dict[str, Any], FlopsResult]:
    """Every step column but the breakdown, and the run-level values (appends to ``notes``)."""
    ev, cls, windows = scan.ev, scan.cls, scan.windows
    gpu = cls.has_gpu
    cols: dict[str, np.ndarray] = {}
    cols.update(_kernel_columns(scan) if gpu else _nan_family(scan, "kernels"))
    cols.update(_sync_columns(scan))
    cols.update(_copy_columns(scan) if gpu else _nan_family(scan, "copies"))
    cols.update(_cpu_op_columns(scan, top))
    cols["dataloader_wait_ms"] = union_per_step(_clip(ev, cls.dataloader, windows), scan.n) / 1e3
    cols["input_assembly_ms"] = union_per_step(_clip(ev, assembly, windows), scan.n) / 1e3
    cols["hand_attention_count"] = hand_attention_count(ev, cls.cpu_op, windows, scan.n)
    cols["tiny_op_run_frac"] = tiny_run_frac(tiny, windows, scan.n, ev)
    cols.update(optimizer_columns(ev, cls, windows, scan.n))
    cols.update(_comm_columns(scan))
    fl = compute_flops(ev, cls.cpu_op)
    flops_cols, flops_note = _flops_columns(scan, fl)
    cols.update(flops_cols)
    if flops_note:
        notes.append(f"{trace.path.name}: {flops_note}")
    run, mem_note = _run_values(dev, scan, fl, cols["achieved_tflops"])
    if mem_note:
        notes.append(f"{trace.path.name}: {mem_note}")
    return cols, run, fl


def _nan_family(scan: _Scan, family: str) -> dict[str, np.ndarray]:
    """Every column of a GPU-only family, NaN (a CPU trace has no kernels or device copies)."""
    return {name: scan.nan() for name in FAMILIES[family]}


def _kernel_columns(scan: _Scan) -> dict[str, np.ndarray]:
    """Compute the ``kernels`` family: counts, small kernels, GPU busy share, gaps, launches."""
    ev, cls, windows, n = scan.ev, scan.cls, scan.windows, scan.n
    k_rows = np.flatnonzero(cls.kernel)
    k_step = point_step(scan.lts[k_rows], windows)
    k_dur = scan.dur[k_rows]
    small = k_dur < SMALL_KERNEL_US
    count = _count(k_step, n)
    # merged once: the busy share and the longest gap read the same union (merging it again is one pass)
    gpu = merge(_clip(ev, cls.gpu, windows))
    small_count = _count(k_step[small], n)
    return {
        "kernel_count": count,
        "small_kernel_count": small_count,
        "small_kernel_frac": _ratio(small_count, count),
        "small_kernel_time_frac": _ratio(_count(k_step, n, np.where(small, k_dur, 0.0)), _count(k_step, n, k_dur)),
        "kernel_median_us": _median(k_step, k_dur, n),
        "gpu_busy_frac": scan.covered_frac(gpu),
        "gpu_max_gap_ms": max_gap_per_step(gpu, windows) / 1e3,
        "launch_count": _count(point_step(scan.ts[np.flatnonzero(cls.launch)], windows), n),
        "launch_overhead_frac": scan.busy_frac(cls.launch),
    }


def _sync_columns(scan: _Scan) -> dict[str, np.ndarray]:
    """Compute the ``syncs`` family: sync calls, ``.item()`` calls and the time spent waiting in them."""
    ev, cls, windows, n = scan.ev, scan.cls, scan.windows, scan.n
    lsd = cls.item & (ev["name"] == "aten::_local_scalar_dense").to_numpy()
    item_rows = lsd if lsd.any() else cls.item
    return {
        "sync_count": _count(point_step(scan.ts[cls.sync_call], windows), n),
        "item_count": _count(point_step(scan.ts[item_rows], windows), n),
        "sync_ms": union_per_step(_clip(ev, cls.sync_call | cls.item, windows), n) / 1e3,
    }


def _copy_columns(scan: _Scan) -> dict[str, np.ndarray]:
    """Compute the ``copies`` family: host-to-device and device-to-host copies, bytes, pageable share."""
    ev, cls, windows, n, lts = scan.ev, scan.cls, scan.windows, scan.n, scan.lts
    byts = ev["bytes"].to_numpy().astype(np.float64)
    byts = np.where(byts >= 0, byts, 0.0)
    h_rows = np.flatnonzero(cls.h2d)
    h_step = point_step(lts[h_rows], windows)
    hb = byts[h_rows]
    h2d_bytes = _count(h_step, n, hb)
    pageable = _count(h_step, n, np.where(cls.pageable[h_rows], hb, 0.0))
    d_rows = np.flatnonzero(cls.d2h)
    d_step = point_step(lts[d_rows], windows)
    return {
        "memcpy_count": _count(point_step(lts[cls.memcpy], windows), n),
        "h2d_count": _count(h_step, n),
        "h2d_bytes": h2d_bytes,
        "h2d_pageable_bytes": pageable,
        "h2d_pinned_bytes": _count(h_step, n, np.where(cls.pinned[h_rows], hb, 0.0)),
        "h2d_pageable_frac": _ratio(pageable, h2d_bytes),
        "h2d_bandwidth_gbps": _ratio(h2d_bytes, _count(h_step, n, scan.dur[h_rows]) * 1e3),  # bytes/ns = GB/s
        "h2d_blocking_count": _count(h_step[_h2d_blocking(ev, cls, h_rows)], n),
        "d2h_count": _count(d_step, n),
        "d2h_bytes": _count(d_step, n, byts[d_rows]),
    }


_NODE = re.compile(r"[A-Z][A-Za-z0-9]*Backward\d*")
"""An autograd node's class name (``CudnnConvolutionBackward``, ``AddmmBackward0``)."""


def _is_backward_function(name: str) -> bool:
    """Whether an operator is an autograd backward function.

    Current profilers wrap each in ``autograd::engine::evaluate_function: AddmmBackward0``;
    older ones (the 2021 kineto ResNet-50 sample: 318 ``CudnnConvolutionBackward``) record the
    node's class name as the operator itself.
    """
    return name.startswith("autograd::engine::evaluate_function") or _NODE.fullmatch(name) is not None


def _cpu_op_columns(scan: _Scan, top: np.ndarray) -> dict[str, np.ndarray]:
    """Compute the ``cpu_ops`` family from the ``top``-level CPU operators: their count, median length, the short ones' share."""
    t_step = point_step(scan.ts[top], scan.windows)
    t_dur = scan.dur[top]
    count = _count(t_step, scan.n)
    # NOTE: an operator carries an autograd sequence number whenever grad mode is on, whether or
    # not an input requires grad (measured: `a @ a` of plain tensors gets one, under no_grad
    # none); backward runs as autograd::engine functions.
    cpu_op = scan.cls.cpu_op
    if "seq_nr" in scan.ev.columns:
        graph = cpu_op & (scan.ev["seq_nr"].to_numpy() >= 0)
        autograd = _count(point_step(scan.ts[graph], scan.windows), scan.n)
    else:
        autograd = scan.nan()
    backward = cpu_op & name_mask(scan.ev["name"], _is_backward_function)
    return {
        "cpu_op_count": count,
        "cpu_op_median_us": _median(t_step, t_dur, scan.n),
        "cpu_op_small_frac": _ratio(_count(t_step[t_dur < SMALL_CPU_OP_US], scan.n), count),
        "autograd_op_count": autograd,
        "backward_op_count": _count(point_step(scan.ts[backward], scan.windows), scan.n),
    }


def _comm_columns(scan: _Scan) -> dict[str, np.ndarray]:
    """Compute the ``communication`` family: collective time per step and the share overlapping compute.

    On GPU, collective kernels against the other kernels. Without them (a CPU job on gloo) the
    collectives are ``gloo:*``/``c10d::*`` ranges, possibly on gloo's own threads, and compute is
    every top-level operator that is not a collective: DDP's bucketed all-reduce during the
    backward pass overlaps; the tail of the all-reduce the step waits for does not.
    """
    ev, cls, windows, n = scan.ev, scan.cls, scan.windows, scan.n
    if cls.comm_kernel.any():
        comm = _clip(ev, cls.comm_kernel, windows)
        compute = _clip(ev, cls.kernel & ~cls.comm_kernel, windows)
    elif cls.comm_op.any():
        comm = _clip(ev, cls.comm_op, windows)
        top = top_level_ops(ev, cls)
        top = top[~cls.comm_op[top]]
        compute = clip_to_steps(scan.ts[top], ev["end"].to_numpy()[top], windows)
    else:
        return {"comm_overlap_frac": scan.nan(), "comm_time_ms": np.zeros(n)}
    c_len = union_per_step(comm, n)
    overlap = c_len + union_per_step(compute, n) - union_per_step(concat(comm, compute), n)
    return {"comm_overlap_frac": _ratio(overlap, c_len), "comm_time_ms": c_len / 1e3}


def _flops_columns(scan: _Scan, fl: FlopsResult) -> tuple[dict[str, np.ndarray], str | None]:
    """Compute the ``flops`` family from op shapes, and a note when convolutions cannot be sized."""
    if len(fl.rows) and not fl.unsized_conv:
        f_step = point_step(scan.ts[fl.rows], scan.windows)
        vals = fl.flops
        per_step = _count(f_step, scan.n, np.where(np.isfinite(vals), vals, 0.0))
        unknown = _count(f_step, scan.n, (~np.isfinite(vals)).astype(np.float64))
        flops = np.where(unknown > 0, np.nan, per_step)
        return {"flops_per_step": flops, "achieved_tflops": _ratio(flops, scan.step_us * 1e6)}, None  # flops/us*1e-6 = TFLOP/s
    note = None
    if fl.unsized_conv:
        note = (
            "convolution FLOPs cannot be sized from this trace (no Concrete "
            "Inputs or flops args), so FLOPs and MFU are not reported"
        )
    return {"flops_per_step": scan.nan(), "achieved_tflops": scan.nan()}, note


def _run_values(
    dev: dict[str, Any] | None, scan: _Scan, fl: FlopsResult, achieved_tflops: np.ndarray
) -> tuple[dict[str, Any], str | None]:
    """Run-level values: precision, device (``dev``), memory peak, MFU, DataParallel; and a memory caveat."""
    ev, cls, gpu = scan.ev, scan.cls, scan.cls.has_gpu
    run: dict[str, Any] = _dtype_metrics(fl, ev)
    run["has_gpu_flag"] = 1.0 if gpu else 0.0
    run["device_name"] = str(dev.get("name", "")) if dev else ""
    run["device_memory_bytes"] = float(dev["totalGlobalMem"]) if dev and "totalGlobalMem" in dev else None
    run["tensor_cores_flag"] = (1.0 if int(dev.get("computeMajor", 0)) >= 7 else 0.0) if dev else None
    peak, mem_note = _peak_memory(ev, cls, gpu)
    run["peak_memory_bytes"] = peak
    dtype = run.pop("_dominant_dtype", None)
    spec = find_gpu(run["device_name"]) if (gpu and dtype and run["device_name"]) else None
    peak_tf = spec.tflops.get(_peak_dtype(dtype, run, spec)) if spec else None
    has_rate = np.isfinite(achieved_tflops).any()
    run["mfu_frac"] = float(np.nanmedian(achieved_tflops) / peak_tf) if peak_tf and has_rate else None
    run["peak_tflops"] = peak_tf
    run["dominant_dtype"] = dtype
    run["dataparallel_flag"] = _dataparallel(ev, cls)
    return run, (mem_note if mem_note and peak is not None else None)


def _dtype_metrics(fl: FlopsResult, ev: pd.DataFrame) -> dict[str, Any]:
    """fp32_matmul_frac, autocast_flag, conv_flag and the dominant matmul dtype."""
    out: dict[str, Any] = {"conv_flag": 1.0 if fl.conv_seen else 0.0}
    known = np.array([d is not None for d in fl.dtype], dtype=bool)
    if not known.any():
        out.update(fp32_matmul_frac=None, autocast_flag=None, _dominant_dtype=None)
        return out
    weights = np.where(np.isfinite(fl.flops), fl.flops, np.nan)
    if not np.isfinite(weights[known]).any():
        # no sizes at all: weigh by op time instead
        weights = ev["dur"].to_numpy()[fl.rows]
    weights = np.where(np.isfinite(weights), weights, 0.0)
    dtypes = pd.Series(weights[known]).groupby(fl.dtype[known].astype(str)).sum()
    total = float(dtypes.sum())
    out["fp32_matmul_frac"] = float(dtypes.get("fp32", 0.0) / total) if total > 0 else None
    reduced = {"bf16", "fp16", "fp8"}
    out["autocast_flag"] = 1.0 if any(d in reduced for d in dtypes.index) else 0.0
    out["_dominant_dtype"] = str(dtypes.idxmax()) if total > 0 else None
    return out


def _dataparallel(ev: pd.DataFrame, cls: Classified) -> float | None:
    """1 when torch.nn.DataParallel shows in the Python stacks; None without stacks."""
    stacks = ev["call_stack"]
    has_old = bool(stacks.notna().any())
    if not cls.python.any() and not has_old:
        return None
    found = bool((cls.python & name_mask(ev["name"], lambda n: "data_parallel.py" in n)).any())
    if has_old and not found:
        found = any("data_parallel.py" in str(c) for c in stacks.cat.categories)
    return 1.0 if found else 0.0


def _peak_dtype(dtype: str, run: dict[str, Any], gpu: GpuSpec | None) -> str:
    """Name the peak the run's dominant dtype runs against: a conv net's fp32 is TF32's (cuDNN's default)."""
    return conv_peak_dtype(dtype, gpu) if run.get("conv_flag") else dtype
