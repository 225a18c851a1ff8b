"""Roofline per operator: FLOPs and bytes from recorded shapes, against the device's peaks.

For each operator whose shapes and dtypes the trace records (``record_shapes``) this module
computes the work it does and the memory it must move at least once:

* GEMM (``aten::mm``/``addmm``/``bmm``/``baddbmm``): ``2*M*K*N`` FLOPs (per batch); bytes are the
  operands plus the result (plus the added input for ``addmm``/``baddbmm``);
* convolution (``aten::convolution`` with ``Concrete Inputs``; ``aten::convolution_backward`` and
  the old ``aten::cudnn_convolution_backward``): FLOPs from :func:`advisor.metrics.flops.op_flops`;
  bytes are input, weight and output (forward) or grad-output, input and weight read plus the
  two gradients written (backward);
* attention (``aten::_scaled_dot_product_{flash,efficient,cudnn}_attention``): ``4*B*H*L*S*E``
  FLOPs (QK^T and PV; half when causal), backward 2.5 times that (five matmuls of that size,
  flash attention recomputes the scores); bytes are Q, K, V and the output (backward: those read,
  plus their gradients written). Hand-written attention shows up as its ``bmm``/softmax ops;
* elementwise, normalisation, softmax and reductions: one FLOP per element of the largest input
  (a lower bound; these are memory-bound either way), bytes = inputs read + one output written
  (none for reductions).

Each GPU kernel is charged to the innermost such operator whose span contains the runtime call
that launched it, on the same CPU thread, so nested ops never share a kernel. Achieved TFLOP/s
and TB/s are the op's FLOPs and bytes over its kernels' time; arithmetic intensity (FLOP/byte)
against the device's ridge point (peak FLOP/s / peak bandwidth, :mod:`advisor.metrics.devices`)
says compute- or memory-bound, and ``peak_frac`` is the achieved rate over the roof at that
intensity, ``min(peak, intensity * bandwidth)``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from advisor.metrics.devices import conv_peak_dtype, find_gpu
from advisor.metrics.events import broadcast, joint_codes, map_categorical, plain_strings, take
from advisor.metrics.flops import op_dtype, op_flops
from advisor.metrics.flops import parse_json as _json
from advisor.metrics.intervals import point_step
from advisor.trace.load import ROOFLINE_SHAPE_OPS

if TYPE_CHECKING:
    from advisor.metrics.steps import TraceAnalysis

GEMM_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"})
CONV_OPS = frozenset({"aten::convolution", "aten::convolution_backward", "aten::cudnn_convolution_backward"})
ATTENTION_FWD = {  # op -> index of is_causal in Concrete Inputs
    "aten::_scaled_dot_product_flash_attention": 4,
    "aten::_scaled_dot_product_efficient_attention": 6,
    "aten::_scaled_dot_product_cudnn_attention": 6,
}
ATTENTION_BWD = {
    "aten::_scaled_dot_product_flash_attention_backward": 1,  # grad_out, q, k, v, ...
    "aten::_scaled_dot_product_efficient_attention_backward": 1,
    "aten::_scaled_dot_product_cudnn_attention_backward": 1,
}
REDUCTION_OPS = frozenset({"aten::sum", "aten::mean", "aten::amax", "aten::norm"})
# every other aten op whose shapes the loader keeps for the roofline is elementwise-like
ELEMENTWISE_OPS = frozenset(
    n for n in ROOFLINE_SHAPE_OPS
    if n.startswith("aten::") and n not in CONV_OPS | REDUCTION_OPS | set(ATTENTION_FWD) | set(ATTENTION_BWD)
    and "convolution" not in n
)
ROOFLINE_OPS = GEMM_OPS | CONV_OPS | frozenset(ATTENTION_FWD) | frozenset(ATTENTION_BWD) | REDUCTION_OPS | ELEMENTWISE_OPS
MODEL_FLOP_KINDS = ("gemm", "conv", "attention")
"""Kinds whose FLOPs count towards MFU (the model's matrix work)."""

TOP_OPS = 15
"""Rows of the top-operators table kept in the report."""

# Bytes per element of the ``Input type`` names Kineto records.
DTYPE_BYTES = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "Half": 2, "BFloat16": 2, "long int": 8,
    "int": 4, "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1, "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1, "c10::complex<float>": 8,
}


def op_kind(name: str) -> str | None:
    """Return the roofline family of an operator name (gemm, conv, attention, elementwise, reduction)."""
    if name in GEMM_OPS:
        return "gemm"
    if name in CONV_OPS:
        return "conv"
    if name in ATTENTION_FWD or name in ATTENTION_BWD:
        return "attention"
    if name in REDUCTION_OPS:
        return "reduction"
    if name in ELEMENTWISE_OPS:
        return "elementwise"
    return None


def _numel(shape: Any) -> int:
    return int(math.prod(int(v) for v in shape)) if isinstance(shape, list) else 0


def _tensors(dims: list[Any], types: list[Any]) -> list[tuple[int, int]]:
    """(numel, element size) of each tensor argument with a known dtype."""
    out = []
    for shape, t in zip(dims, types, strict=False):
        size = DTYPE_BYTES.get(t) if isinstance(t, str) else None
        # a 0-d tensor has shape [] and a dtype; non-tensor arguments have no known dtype
        if size and isinstance(shape, list) and all(isinstance(v, int) for v in shape):
            out.append((_numel(shape), size))
    return out


@lru_cache(maxsize=65536)
def _compact(text: object) -> str:
    """Shapes as compact JSON (traces indent them differently)."""
    parsed = _json(text) if isinstance(text, str) else None
    return json.dumps(parsed, separators=(",", ":")) if parsed is not None else ""


@lru_cache(maxsize=65536)
def op_cost(name: str, dims_text: str | None, types_text: str | None, concrete_text: str | None) -> tuple[float, float] | None:
    """(FLOPs, bytes) of one operator call from its recorded shapes, or None when it cannot be sized."""
    kind = op_kind(name)
    dims, types = _json(dims_text), _json(types_text)
    if kind is None or not isinstance(dims, list) or not isinstance(types, list):
        return None
    tensors = _tensors(dims, types)
    if not tensors:
        return None
    try:
        if kind == "gemm":
            flops = op_flops(name, dims_text, concrete_text)
            if flops is None:
                return None
            size = tensors[0][1]
            a, b = (dims[0], dims[1]) if name in ("aten::mm", "aten::bmm") else (dims[1], dims[2])
            out = flops / 2.0 / a[-1]  # elements of the result: M*N (per batch)
            extra = _numel(dims[0]) if name in ("aten::addmm", "aten::baddbmm") else 0
            return flops, float((_numel(a) + _numel(b) + out + extra) * size)
        if kind == "conv":
            if name == "aten::cudnn_convolution_backward":
                # old traces: (input, grad_output, weight, ...) -> same cost as convolution_backward
                dims_text = json.dumps([dims[1], dims[0], dims[2]])
                name = "aten::convolution_backward"
            flops = op_flops(name, dims_text, concrete_text)
            if flops is None:
                return None
            size = tensors[0][1]
            if name == "aten::convolution_backward":
                d = _json(dims_text)
                grad_out, inp, weight = _numel(d[0]), _numel(d[1]), _numel(d[2])
                return flops, float((grad_out + 2 * inp + 2 * weight) * size)
            inp, weight = dims[0], dims[1]
            out_elems = flops / 2.0 / _numel(weight[1:])
            return flops, float((_numel(inp) + _numel(weight) + out_elems) * size)
        if kind == "attention":
            if name in ATTENTION_FWD:
                q, k, v = dims[0], dims[1], dims[2]
                causal_at = ATTENTION_FWD[name]
            else:
                q, k, v = dims[1], dims[2], dims[3]
                causal_at = None
            if min(len(q), len(k), len(v)) != 4:
                return None
            b, h, lq, e = q
            s, ev = k[2], v[3]
            flops = 2.0 * b * h * lq * s * (e + ev)
            concrete = _json(concrete_text)
            if causal_at is not None and isinstance(concrete, list) and len(concrete) > causal_at:
                if str(concrete[causal_at]).lower() == "true":
                    flops /= 2.0
            size = tensors[0][1]
            io = _numel(q) + _numel(k) + _numel(v) + b * h * lq * ev
            if name in ATTENTION_BWD:
                return 2.5 * flops, float(2 * io * size)
            return flops, float(io * size)
        largest = max(n for n, _ in tensors)
        read = sum(n * sz for n, sz in tensors)
        if kind == "reduction":
            return float(largest), float(read)
        return float(largest), float(read + largest * tensors[0][1])
    except (TypeError, ValueError, IndexError, ZeroDivisionError):
        return None


@dataclass(frozen=True)
class RooflineResult:
    """The roofline of one trace.

    Attributes:
        ops: One row per operator call with device time: ``row``, ``name``, ``kind``, ``dims``,
            ``dtype``, ``flops``, ``bytes`` (NaN when unsized), ``device_us``, ``kernels``,
            ``step`` (window index or -1).
        table: Calls grouped by (name, dims, dtype), most device time first, with achieved
            ``tflops``, ``tbps``, ``intensity``, ``bound`` and ``peak_frac``.
        step_mfu: Per step window: model FLOPs (GEMM/conv/attention) / step time / peak.
        has_shapes: Whether the trace records operator shapes at all.
        notes: What could not be sized, said plainly.
    """

    ops: pd.DataFrame
    table: pd.DataFrame
    step_mfu: np.ndarray
    sized_time_frac: np.ndarray
    has_shapes: bool
    notes: tuple[str, ...]


def kernel_owner(ev: pd.DataFrame, analysis: TraceAnalysis, op_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each kernel row: the position (into ``op_rows``) of the innermost op that launched it, or -1.

    The op is the innermost of ``op_rows`` whose span holds the kernel's launching runtime call
    (matched by correlation id) on the same CPU thread.
    """
    cls = analysis.cls
    k_rows = np.flatnonzero(cls.kernel)
    owner = np.full(len(k_rows), -1, dtype=np.int64)
    if not len(k_rows) or not len(op_rows):
        return k_rows, owner
    corr = ev["correlation"].to_numpy()
    rt = np.flatnonzero(cls.runtime & (corr >= 0))
    if not len(rt):
        return k_rows, owner
    rt_corr = corr[rt]
    order = np.argsort(rt_corr, kind="stable")
    keys = rt_corr[order]
    pos = np.clip(np.searchsorted(keys, corr[k_rows]), 0, len(keys) - 1)
    found = keys[pos] == corr[k_rows]
    launch = np.where(found, rt[order][pos], -1)
    tid = ev["tid"].cat.codes.to_numpy()
    ts, end = ev["ts"].to_numpy(), ev["end"].to_numpy()
    o_tid, o_ts, o_end = tid[op_rows], ts[op_rows], end[op_rows]
    for t in np.unique(o_tid):
        mine = np.flatnonzero(o_tid == t)
        mine = mine[np.argsort(o_ts[mine], kind="stable")]
        starts = o_ts[mine]
        ks = np.flatnonzero((launch >= 0) & (tid[np.clip(launch, 0, None)] == t))
        if not len(ks):
            continue
        lt = ts[launch[ks]]
        idx = np.searchsorted(starts, lt, side="right") - 1
        # innermost containing op: the latest-started op that still covers the launch (nested
        # ops start after their parent, so walk back a few siblings at most)
        result = np.full(len(ks), -1, dtype=np.int64)
        for back in range(4):
            j = idx - back
            ok = (result < 0) & (j >= 0)
            jj = np.clip(j, 0, None)
            hit = ok & (o_end[mine[jj]] >= lt)
            result = np.where(hit, mine[jj], result)
        owner[ks] = result
    return k_rows, owner


def compute_roofline(analysis: TraceAnalysis, device_name: str, with_table: bool = True) -> RooflineResult:
    """Size every roofline operator of one trace and compare it with the device's peaks.

    ``with_table=False`` skips the grouped table (other ranks of a job need only the per-step values).
    """
    ev, cls, win = analysis.trace.events, analysis.cls, analysis.windows
    n = len(win)
    names = ev["name"]
    cats = names.cat.categories
    wanted = np.array([str(c) in ROOFLINE_OPS for c in cats], dtype=bool)
    codes = names.cat.codes.to_numpy()
    mask = cls.cpu_op & np.where(codes >= 0, wanted[np.clip(codes, 0, None)], False)
    op_rows = np.flatnonzero(mask)
    has_shapes = bool(ev["input_dims"].notna().any())
    empty = pd.DataFrame(columns=["name", "kind", "dims", "dtype", "calls", "device_ms", "tflops", "tbps",
                                  "intensity", "bound", "peak_frac"])
    nan = np.full(n, np.nan)
    if not cls.has_gpu or not len(op_rows):
        return RooflineResult(pd.DataFrame(), empty, nan, nan, has_shapes, ())

    k_rows, owner = kernel_owner(ev, analysis, op_rows)
    dur = ev["dur"].to_numpy()
    charged = owner >= 0
    op_pos = owner[charged]
    device_us = np.bincount(op_pos, weights=dur[k_rows][charged], minlength=len(op_rows))
    kernels = np.bincount(op_pos, minlength=len(op_rows))

    # only ops that launched kernels get a row (shapes repeat every step: costs are cached)
    launched = kernels > 0
    op_rows, device_us, kernels = op_rows[launched], device_us[launched], kernels[launched]
    name_codes = names.cat.codes.to_numpy()[op_rows]
    # shapes repeat every step: each distinct (name, dims, types, concrete) is sized once
    columns = [ev[c] for c in ("input_dims", "input_type", "concrete_inputs")]
    first, group = joint_codes(name_codes, *(c.cat.codes.to_numpy()[op_rows] for c in columns))
    reps = op_rows[first]
    rep_name = take(names, reps)
    rep_dims, rep_types, rep_concrete = (take(c, reps) for c in columns)
    costs = [
        op_cost(str(nm), d if isinstance(d, str) else None, t if isinstance(t, str) else None,
                c if isinstance(c, str) else None)
        for nm, d, t, c in zip(rep_name, rep_dims, rep_types, rep_concrete, strict=True)
    ]
    ops = pd.DataFrame(
        {
            "row": op_rows,
            # categoricals: 10^5 rows of a few hundred distinct strings, grouped by below
            "name": map_categorical(names, op_rows, lambda nm: None if nm is None else str(nm)),
            "kind": map_categorical(names, op_rows, lambda nm: op_kind(str(nm))),
            "dims": map_categorical(ev["input_dims"], op_rows, _compact),
            "dtype": map_categorical(ev["input_type"], op_rows, lambda t: op_dtype(t if isinstance(t, str) else None) or ""),
            "flops": broadcast([c[0] if c else np.nan for c in costs], group),
            "bytes": broadcast([c[1] if c else np.nan for c in costs], group),
            "device_us": device_us,
            "kernels": kernels,
            "step": point_step(ev["ts"].to_numpy()[op_rows], win),
        }
    )
    gpu = find_gpu(device_name) if device_name else None
    table = _table(ops, gpu) if with_table else empty
    step_mfu, sized_frac = _per_step(ops, analysis, gpu, n)
    if not has_shapes:  # nothing could be sized: unknown, not 0%
        sized_frac = nan
    notes = _notes(ops, analysis, has_shapes, gpu, device_name)
    return RooflineResult(ops, table, step_mfu, sized_frac, has_shapes, notes)


def _roof(gpu: Any, dtype: str, kind: str = "") -> tuple[float | None, float | None]:
    if gpu is None:
        return None, None
    return gpu.tflops.get(_peak_dtype(gpu, kind, dtype)), gpu.mem_tbps


def _peak_dtype(gpu: Any, kind: str, dtype: str) -> str:
    return conv_peak_dtype(dtype, gpu) if kind == "conv" else dtype


def _table(ops: pd.DataFrame, gpu: Any) -> pd.DataFrame:
    sized = ops[np.isfinite(ops["flops"].to_numpy(dtype=np.float64))]
    if not len(sized):
        return pd.DataFrame(columns=["name", "kind", "dims", "dtype", "calls", "device_ms", "tflops", "tbps",
                                     "intensity", "bound", "peak_frac"])
    g = sized.groupby(["name", "kind", "dims", "dtype"], sort=False, observed=True).agg(
        calls=("row", "size"), device_us=("device_us", "sum"), flops=("flops", "sum"), bytes=("bytes", "sum")
    ).reset_index()
    g = plain_strings(g, ("name", "kind", "dims", "dtype"))
    t_us = g["device_us"].to_numpy(dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        g["tflops"] = np.where(t_us > 0, g["flops"] / t_us / 1e6, np.nan)  # flop/us * 1e-6 = TFLOP/s
        g["tbps"] = np.where(t_us > 0, g["bytes"] / t_us / 1e6, np.nan)
        g["intensity"] = np.where(g["bytes"] > 0, g["flops"] / g["bytes"], np.nan)
    bound, frac = [], []
    for row in g.itertuples(index=False):
        peak, bw = _roof(gpu, str(row.dtype), str(row.kind))
        if peak and bw:
            ridge = peak * 1e12 / (bw * 1e12)  # FLOP per byte
            compute = row.intensity >= ridge
            roof = min(peak, row.intensity * bw)
            bound.append("compute" if compute else "memory")
            frac.append(row.tflops / roof if roof > 0 else np.nan)
        elif bw and not peak:
            bound.append("unknown")
            frac.append(row.tbps / bw)
        else:
            bound.append("unknown")
            frac.append(np.nan)
    g["bound"] = bound
    g["peak_frac"] = frac
    g["device_ms"] = g["device_us"] / 1e3
    g = g.sort_values(["device_ms", "name"], ascending=[False, True], kind="stable")
    return g[["name", "kind", "dims", "dtype", "calls", "device_ms", "tflops", "tbps", "intensity", "bound",
              "peak_frac"]].reset_index(drop=True)


def _per_step(ops: pd.DataFrame, analysis: TraceAnalysis, gpu: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """MFU per step (model FLOPs / step time / peak for their dtype) and the sized share of kernel time."""
    mfu = np.full(n, np.nan)
    sized_frac = np.full(n, np.nan)
    if not len(ops):
        return mfu, sized_frac
    step = ops["step"].to_numpy()
    ok = step >= 0
    finite = np.isfinite(ops["flops"].to_numpy(dtype=np.float64))
    t = ops["device_us"].to_numpy(dtype=np.float64)
    all_t = np.bincount(step[ok], weights=t[ok], minlength=n)
    sized_t = np.bincount(step[ok & finite], weights=t[ok & finite], minlength=n)
    with np.errstate(divide="ignore", invalid="ignore"):
        sized_frac = np.where(all_t > 0, sized_t / all_t, np.nan)
    model = ops["kind"].isin(MODEL_FLOP_KINDS).to_numpy()
    if gpu is None or not (model & finite).any():
        return mfu, sized_frac
    # peak time each op's FLOPs need at its dtype's peak; MFU = that time / step time
    # per distinct (kind, dtype), not per op: a large trace has ~10^5 ops and a handful of pairs
    kind_codes, kinds = _factorized(ops["kind"])
    dtype_codes, dtypes = _factorized(ops["dtype"])
    width = max(len(dtypes), 1)
    pairs, pair_of_op = np.unique(kind_codes.astype(np.int64) * width + dtype_codes, return_inverse=True)
    pair_peaks = np.array(
        [gpu.tflops.get(_peak_dtype(gpu, kinds[p // width], dtypes[p % width])) or np.nan for p in pairs.tolist()],
        dtype=np.float64,
    )
    peaks = np.where(ops["dtype"].notna().to_numpy(), pair_peaks[pair_of_op.reshape(-1)], np.nan)
    need_us = np.where(model & finite, ops["flops"].to_numpy(dtype=np.float64) / (peaks * 1e6), 0.0)
    unknown_peak = model & finite & ~np.isfinite(peaks)
    need = np.bincount(step[ok], weights=np.nan_to_num(need_us[ok]), minlength=n)
    # a step with an unsized model op (or one without a peak for its dtype) has no MFU: a
    # partial count would understate it
    missing = unknown_peak | (model & ~finite)
    bad = np.bincount(step[ok], weights=missing[ok].astype(float), minlength=n) > 0
    dur = analysis.windows.duration
    mfu = np.where((dur > 0) & ~bad, need / np.where(dur > 0, dur, 1.0), np.nan)
    return mfu, sized_frac


def _factorized(column: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Codes and values of a categorical column as ``pd.factorize(column.astype(str))`` would give them (missing: "nan")."""
    if not isinstance(column.dtype, pd.CategoricalDtype):
        column = column.astype("category")
    values = [*map(str, column.cat.categories), "nan"]
    codes = column.cat.codes.to_numpy().astype(np.int64)
    return np.where(codes >= 0, codes, len(values) - 1), values


def _notes(ops: pd.DataFrame, analysis: TraceAnalysis, has_shapes: bool, gpu: Any, device_name: str) -> tuple[str, ...]:
    name = analysis.trace.path.name
    if not has_shapes:
        return (
            f"{name}: the trace records no operator shapes (captured without record_shapes=True), "
            "so no operator can be sized: FLOPs, bytes, the roofline table and MFU are not available",
        )
    notes = []
    unsized = ops[~np.isfinite(ops["flops"].to_numpy(dtype=np.float64))]
    if len(unsized):
        by_name = unsized.groupby("name", observed=True)["device_us"].sum()
        by_name.index = by_name.index.astype("str")
        top = by_name.sort_index().sort_values(ascending=False)
        listed = ", ".join(f"{k} ({v / 1e3:.1f} ms)" for k, v in top.head(3).items())
        why = " (convolutions need stride/padding, which only traces with 'Concrete Inputs' record)" if any(
            "conv" in str(k) for k in top.index) else ""
        notes.append(
            f"{name}: {len(unsized)} operator calls with {unsized['device_us'].sum() / 1e3:.1f} ms of GPU time "
            f"could not be sized from their recorded shapes{why}: {listed}"
        )
    if device_name and gpu is None:
        notes.append(f"{name}: no peak figures for device {device_name!r}: the roofline shows achieved rates only")
    return tuple(notes)
