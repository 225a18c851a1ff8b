"""GEMMs and convolutions whose shapes keep them off the tensor cores' fast path.

Tensor cores work on tiles: cuBLAS and cuDNN reach full speed in fp16/bf16 when the GEMM's M,
N and K (a convolution's input and output channels) are multiples of 8, and in int8 when they
are multiples of 16 (NVIDIA's "Matrix Multiplication Background" and "Convolutional Layers"
performance guides); otherwise they pad internally or fall back to slower kernels. A vocabulary
of 30,522 (BERT) or an odd hidden size is the classic case. This module lists such calls with their
shapes, GPU time and the user's source line, from the roofline's per-call table.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from advisor.metrics.events import plain_strings
from advisor.metrics.model import SourceLocation
from advisor.metrics.userframes import (  # the one (thread, time) -> user frame resolver
    UserPredicate,
    _resolver,
    looks_like_user_file,
)

if TYPE_CHECKING:
    from advisor.metrics.steps import TraceAnalysis

MULTIPLE = {"fp16": 8, "bf16": 8, "fp8": 16, "signed char": 16, "int8": 16}
"""Dimension multiple each dtype needs for full-speed tensor-core kernels."""


def gemm_dims(name: str, dims: Any) -> dict[str, int] | None:
    """Return the tensor-core dimensions of a GEMM/convolution call (``M``, ``N``, ``K`` or ``C_in``, ``C_out``)."""
    try:
        if name in ("aten::mm", "aten::bmm"):
            a, b = dims[0], dims[1]
            return {"M": a[-2], "K": a[-1], "N": b[-1]}
        if name in ("aten::addmm", "aten::baddbmm"):
            a, b = dims[1], dims[2]
            return {"M": a[-2], "K": a[-1], "N": b[-1]}
        if name == "aten::convolution":
            return {"C_in": dims[0][1], "C_out": dims[1][0]}
        if name == "aten::convolution_backward":  # grad_output, input, weight
            return {"C_in": dims[1][1], "C_out": dims[2][0]}
        if name == "aten::cudnn_convolution_backward":  # input, grad_output, weight
            return {"C_in": dims[0][1], "C_out": dims[2][0]}
    except (TypeError, IndexError, KeyError):
        return None
    return None


def misaligned(
    ops: pd.DataFrame, analysis: TraceAnalysis, is_user: UserPredicate = looks_like_user_file
) -> tuple[pd.DataFrame, pd.DataFrame, tuple[SourceLocation, ...]]:
    """Find reduced-precision GEMM/convolution calls with dimensions off the tensor-core multiple.

    Args:
        ops: The roofline's per-call table (:attr:`advisor.metrics.roofline.RooflineResult.ops`).
        analysis: The trace's analysis (for steps and source lines).
        is_user: The run's user-code policy (:func:`advisor.metrics.userframes.user_predicate`).

    Returns:
        Per-step columns ``tc_misaligned_op_count`` and ``tc_misaligned_time_frac``, the table
        (name, dims, dtype, multiple, bad, device_ms per step, where) and source locations.
    """
    n = len(analysis.windows)
    empty = pd.DataFrame(columns=["name", "dims", "dtype", "multiple", "bad", "device_ms", "where"])
    steps = pd.DataFrame({"tc_misaligned_op_count": np.full(n, np.nan), "tc_misaligned_time_frac": np.full(n, np.nan)})
    if not len(ops):
        return steps, empty, ()
    mm = ops[ops["kind"].isin(("gemm", "conv"))]
    reduced = mm[mm["dtype"].isin(tuple(MULTIPLE))]
    if not len(mm):
        return steps, empty, ()
    bad_text = []
    for row in reduced.itertuples(index=False):
        try:
            d = gemm_dims(str(row.name), json.loads(str(row.dims)))
        except ValueError:
            d = None
        m = MULTIPLE[str(row.dtype)]
        bad_text.append(", ".join(f"{k}={v}" for k, v in (d or {}).items() if int(v) % m))
    reduced = reduced.assign(bad=bad_text, multiple=[MULTIPLE[str(t)] for t in reduced["dtype"]])
    off = reduced[reduced["bad"] != ""]
    step = mm["step"].to_numpy()
    ok = step >= 0
    all_t = np.bincount(step[ok], weights=mm["device_us"].to_numpy(dtype=np.float64)[ok], minlength=n)
    o_step = off["step"].to_numpy()
    o_ok = o_step >= 0
    off_t = np.bincount(o_step[o_ok], weights=off["device_us"].to_numpy(dtype=np.float64)[o_ok], minlength=n)
    with np.errstate(divide="ignore", invalid="ignore"):
        steps = pd.DataFrame(
            {
                "tc_misaligned_op_count": np.bincount(o_step[o_ok], minlength=n).astype(np.float64),
                "tc_misaligned_time_frac": np.where(all_t > 0, off_t / all_t, np.nan),
            }
        )
    if not len(off):
        return steps, empty, ()
    resolver = _resolver(analysis, is_user)
    ev = analysis.trace.events
    tid = ev["tid"].cat.codes.to_numpy()
    ts = ev["ts"].to_numpy()
    frames = [resolver.resolve(int(tid[r]), float(ts[r])) for r in off["row"].to_numpy()]
    off = off.assign(where=[f"{f[0]}:{f[1]} ({f[2]})" if f else "" for f in frames], frame=frames)
    per_step = max(n, 1)
    g = off.groupby(["name", "dims", "dtype", "multiple", "bad", "where"], sort=False, observed=True).agg(
        device_us=("device_us", "sum"), calls=("row", "size"), frame=("frame", "first")
    ).reset_index()
    g = plain_strings(g, ("name", "dims", "dtype"))
    g["device_ms"] = g["device_us"] / 1e3 / per_step
    g = g.sort_values(["device_ms", "name"], ascending=[False, True], kind="stable").reset_index(drop=True)
    locations = tuple(
        SourceLocation("misaligned", f[0], int(f[1]), f[2], count=float(c) / per_step, time_ms=float(t))
        for f, c, t in zip(g["frame"], g["calls"], g["device_ms"], strict=True)
        if f
    )
    return steps, g[["name", "dims", "dtype", "multiple", "bad", "device_ms", "where"]], locations
