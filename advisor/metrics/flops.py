"""FLOPs from operator shapes (the peaks of common GPUs live in :mod:`advisor.metrics.devices`).

Only the matrix engines' work is counted (matmul and convolution), at the lowest aten level
that carries the shapes, so nothing is counted twice: ``aten::mm``, ``aten::addmm``,
``aten::bmm``, ``aten::baddbmm`` (``aten::linear``/``aten::matmul`` dispatch to these) and
``aten::convolution`` / ``aten::convolution_backward``. A trace recorded with ``with_flops``
carries a ``flops`` arg; when present it is used instead of the shapes.

A convolution's FLOPs need its stride/padding, which only newer traces record (``Concrete
Inputs``); when a convolution cannot be sized, :func:`op_flops` reports it so the caller can
say the FLOP count is incomplete instead of reporting a wrong MFU.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from advisor.metrics.devices import peak_tflops
from advisor.metrics.events import broadcast, joint_codes, map_rows, take

MATMUL_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"})
CONV_OPS = frozenset({"aten::convolution", "aten::convolution_backward"})
FLOP_OPS = MATMUL_OPS | CONV_OPS
# ops a `flops` arg may sit on (with_flops annotates conv2d rather than convolution)
FLOPS_ARG_OPS = MATMUL_OPS | frozenset({"aten::conv1d", "aten::conv2d", "aten::conv3d"})
CONV_NAME_HINTS = ("conv",)

_DTYPES = {
    "float": "fp32",
    "c10::BFloat16": "bf16",
    "BFloat16": "bf16",
    "c10::Half": "fp16",
    "Half": "fp16",
    "double": "fp64",
    "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8",
}


__all__ = ["peak_tflops"]  # re-exported: callers import it from here


@lru_cache(maxsize=65536)
def parse_json(text: str | None) -> object:
    """Parse a JSON args fragment (``Input Dims``, ...), cached per distinct text; None if invalid."""
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _prod(values: list[int]) -> int:
    return int(math.prod(int(v) for v in values))


def _int_list(text: object, n: int) -> list[int] | None:
    """Parse a Concrete Inputs entry like "[1, 1]" or "1" -> n ints."""
    if not isinstance(text, str) or not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, int):
        return [value] * n
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return value if len(value) == n else ([value[0]] * n if len(value) == 1 else None)
    return None


def _conv_out(size: int, k: int, stride: int, pad: int, dil: int) -> int:
    return (size + 2 * pad - dil * (k - 1) - 1) // stride + 1


def op_flops(name: str, dims_text: str | None, concrete_text: str | None) -> float | None:
    """FLOPs of one matmul/conv op from its ``Input Dims`` (and ``Concrete Inputs``); None if unknown."""
    dims = parse_json(dims_text)
    if not isinstance(dims, list):
        return None
    try:
        if name == "aten::mm" and len(dims) >= 2:
            (m, k), (_, n) = dims[0], dims[1]
            return 2.0 * m * k * n
        if name == "aten::addmm" and len(dims) >= 3:
            (m, k), (_, n) = dims[1], dims[2]
            return 2.0 * m * k * n
        if name == "aten::bmm" and len(dims) >= 2:
            (b, m, k), (_, _, n) = dims[0], dims[1]
            return 2.0 * b * m * k * n
        if name == "aten::baddbmm" and len(dims) >= 3:
            (b, m, k), (_, _, n) = dims[1], dims[2]
            return 2.0 * b * m * k * n
        if name == "aten::convolution_backward" and len(dims) >= 3:
            # grad_output [N, Co, *out], input, weight [Co, Ci/g, *k]: grad input + grad weight
            # each cost about one forward pass.
            grad_out, weight = dims[0], dims[2]
            if len(grad_out) < 3 or len(weight) < 3:
                return None
            return 2.0 * 2.0 * _prod(grad_out) * _prod(weight[1:])
        if name == "aten::convolution" and len(dims) >= 2:
            inp, weight = dims[0], dims[1]
            spatial = len(inp) - 2
            if spatial < 1 or len(weight) != len(inp):
                return None
            concrete = parse_json(concrete_text)
            if not isinstance(concrete, list) or len(concrete) < 9:
                return None
            stride = _int_list(concrete[3], spatial)
            pad = _int_list(concrete[4], spatial)
            dil = _int_list(concrete[5], spatial)
            transposed = str(concrete[6]).lower() == "true"
            if transposed:
                # Transposed conv (weight [Ci, Co/g, *k]): every input element is scattered
                # through the kernel once, so the work is 2 * N*Ci*prod(in) * Co/g*prod(k),
                # independent of stride and padding.
                return 2.0 * _prod(inp) * _prod(weight[1:])
            if stride is None or pad is None or dil is None:
                return None
            out = [
                _conv_out(inp[2 + i], weight[2 + i], stride[i], pad[i], dil[i]) for i in range(spatial)
            ]
            return 2.0 * inp[0] * weight[0] * _prod(out) * _prod(weight[1:])
    except (TypeError, ValueError, IndexError):
        return None
    return None


def op_dtype(type_text: str | None) -> str | None:
    """Short dtype (fp32, bf16, fp16, ...) of an op's first tensor input, from ``Input type``."""
    types = parse_json(type_text)
    if not isinstance(types, list):
        return None
    for t in types:
        if isinstance(t, str) and t and t != "Scalar":
            return _DTYPES.get(t, t)
    return None


@dataclass(frozen=True)
class FlopsResult:
    """Per-op FLOPs for the matmul/conv ops of one trace."""

    rows: np.ndarray  # row positions (into the events frame) of counted ops
    flops: np.ndarray  # FLOPs per counted op (NaN where unknown)
    dtype: np.ndarray  # object array of short dtypes
    conv_seen: bool
    unsized_conv: bool  # a convolution whose FLOPs could not be computed
    from_flops_arg: bool


def compute_flops(events: pd.DataFrame, cpu_op: np.ndarray) -> FlopsResult:
    """FLOPs and dtype for every counted matmul/conv op of a trace."""
    names = events["name"]
    cats = names.cat.categories
    codes = names.cat.codes.to_numpy()
    conv_cat = np.array(["conv" in str(c).lower() and str(c).startswith("aten::") for c in cats], dtype=bool)
    conv_seen = bool(len(cats)) and bool((cpu_op & np.where(codes >= 0, conv_cat[np.clip(codes, 0, None)], False)).any())
    flops_arg = events["flops"].to_numpy()
    has_arg = cpu_op & np.isfinite(flops_arg) & (flops_arg > 0)
    if has_arg.any():
        wanted = np.array([str(c) in FLOPS_ARG_OPS for c in cats], dtype=bool)
        mask = has_arg & np.where(codes >= 0, wanted[np.clip(codes, 0, None)], False)
        rows = np.flatnonzero(mask)
        dtypes = _object_array(map_rows(events["input_type"], rows, op_dtype))
        return FlopsResult(rows, flops_arg[rows], dtypes, conv_seen, False, True)
    wanted = np.array([str(c) in FLOP_OPS for c in cats], dtype=bool)
    mask = cpu_op & np.where(codes >= 0, wanted[np.clip(codes, 0, None)], False)
    rows = np.flatnonzero(mask)
    # shapes repeat every step: each distinct (name, dims, concrete inputs) is counted once
    columns = [names, events["input_dims"], events["concrete_inputs"]]
    first, group = joint_codes(*(c.cat.codes.to_numpy()[rows] for c in columns))
    reps = rows[first]
    rep_names, rep_dims, rep_concrete = (take(c, reps) for c in columns)
    values = np.array(
        broadcast([op_flops(str(n), _text(d), _text(c)) for n, d, c in zip(rep_names, rep_dims, rep_concrete, strict=True)],
                  group),
        dtype=np.float64,
    ) if len(rows) else np.zeros(0)
    dtypes = _object_array(map_rows(events["input_type"], rows, lambda t: op_dtype(_text(t))))
    is_conv = np.array(map_rows(names, rows, lambda n: str(n) in CONV_OPS), dtype=bool)
    unsized = bool((is_conv & ~np.isfinite(values)).any()) or (conv_seen and not is_conv.any())
    return FlopsResult(rows, values, dtypes, conv_seen, unsized, False)


def _object_array(values: list[object]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
