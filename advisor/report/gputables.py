"""The time tables of a report (idle by function, roofline, modules, operators, collectives, shapes), formatted once.

:func:`gpu_sections` turns ``Report.tables`` into :class:`Section` values (title, column
headers, rows of display strings, a note); the text, Markdown and HTML renderers each draw
them with their own table primitive, so a number reads the same in every format. JSON carries
the raw tables (``tables`` in ``report.json``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from advisor.report import style as s
from advisor.report.model import Report

MAX_SHAPES_CHARS = 90


@dataclass(frozen=True)
class Section:
    """One table: its title, headers, right-aligned columns, rows and an explanatory note."""

    key: str
    title: str
    headers: tuple[str, ...]
    numeric: tuple[bool, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""
    detail: tuple[int, ...] = ()
    """Columns narrow layouts (the terminal) show on a second line under the first column."""


def _f(value: Any, fmt: str) -> str:
    if value is None:
        return "—"
    try:
        return format(float(value), fmt)
    except (TypeError, ValueError):
        return str(value)


def _pct(value: Any) -> str:
    return "—" if value is None else s.pct(value, 0)


def _short(text: Any, limit: int = MAX_SHAPES_CHARS) -> str:
    t = str(text or "")
    return t if len(t) <= limit else t[: limit - 1] + "…"


def _shapes(dims: Any) -> str:
    """Tensor shapes of an op as ``512x1024, 1024x4096`` (scalar arguments left out)."""
    try:
        parsed = json.loads(str(dims))
    except ValueError:
        return _short(dims)
    if not isinstance(parsed, list):
        return _short(dims)
    shapes = ["x".join(str(v) for v in d) for d in parsed if isinstance(d, list) and d]
    return _short(", ".join(shapes))


def _op(name: Any) -> str:
    return str(name).removeprefix("aten::")


def _intensity(value: Any) -> str:
    v = s.finite(value)
    return "—" if v is None else (f"{v:.2f}" if v < 10 else f"{v:.0f}")


def _idle(rows: list[dict[str, Any]]) -> Section:
    labels = {"data_loading": "data loading", "host": "host-bound", "launch": "launch-bound"}
    return Section(
        "idle_functions",
        "GPU idle time by function (per step)",
        ("Function", "While the GPU idled", "Idle/step", "Longest gap"),
        (False, False, True, True),
        tuple(
            (str(r["function"]), labels.get(str(r["idle_class"]), str(r["idle_class"])), s.ms(r["idle_ms"]),
             s.ms(r["longest_gap_ms"]))
            for r in rows
        ),
        "Innermost Python frame (without Python stacks: the top-level operator) running while no kernel ran "
        "(self time; nested frames are not counted twice). "
        "Launch-bound: gaps under 1 ms while the CPU queues kernels; host-bound: gaps of 1 ms or more.",
    )


def _roofline(rows: list[dict[str, Any]]) -> Section:
    return Section(
        "roofline",
        "Top GPU operators (roofline)",
        ("Operator", "Shapes", "dtype", "Calls", "GPU time", "TFLOP/s", "TB/s", "FLOP/B", "Bound", "Of peak"),
        (False, False, False, True, True, True, True, True, False, True),
        tuple(
            (_op(r["name"]), _shapes(r["dims"]), str(r["dtype"]), s.number(r["calls"]), s.ms(r["device_ms"]),
             _f(r["tflops"], ".1f"), _f(r["tbps"], ".2f"), _intensity(r["intensity"]), str(r["bound"]),
             _pct(r["peak_frac"]))
            for r in rows
        ),
        "Calls and GPU time over the whole trace. FLOPs and bytes from the recorded shapes; of peak is against the roof at the op's intensity "
        "(min of the dtype's dense peak and intensity x memory bandwidth). Over 100% means the kernel does "
        "less arithmetic than the direct algorithm (Winograd/FFT convolutions) or runs on a faster unit than "
        "the dtype's peak assumes (TF32 for float32).",
        detail=(2, 1),
    )


def _modules(rows: list[dict[str, Any]]) -> Section:
    # NOTE: a CPU-only trace has no kernels, so a GPU column would read 0.000 ms on every row and
    # look like a measurement; it is shown only when some module launched GPU work.
    gpu = any(float(r.get("device_ms") or 0.0) > 0.0 for r in rows)
    ncols = 4 if gpu else 3
    return Section(
        "modules",
        "Time per nn.Module (per step)",
        ("Module", "Calls", "Host time", "GPU time (forward)")[:ncols],
        (False, True, True, True)[:ncols],
        tuple(
            ("· " * int(r["depth"]) + str(r["module"]).rsplit("/", 1)[-1], s.number(r["calls"]), s.ms(r["host_ms"]),
             s.ms(r["device_ms"]))[:ncols]
            for r in rows
        ),
        "Inclusive of child modules. GPU time counts the kernels launched inside the module's forward; "
        "the backward pass runs outside module frames."
        if gpu
        else "Inclusive of child modules. No GPU kernels ran (a CPU run), so there is no GPU column.",
    )


def _memory_lines(rows: list[dict[str, Any]]) -> Section:
    def where(r: dict[str, Any]) -> str:
        return s.location_text(str(r["file"]), r.get("line"), str(r.get("function") or ""))

    def module(r: dict[str, Any]) -> str:
        more = int(r.get("modules") or 0) - 1
        return f"{r['module']} +{more} more" if r.get("module") and more > 0 else str(r.get("module") or "—")

    return Section(
        "memory_lines",
        "Memory live at the peak, by the function that allocated it",
        ("Where", "Module", "MiB", "Share of peak", "Tensors"),
        (False, False, True, True, True),
        tuple((where(r), module(r), _f(r["mib"], ".1f"), _pct(r["share"]), s.number(r["tensors"])) for r in rows),
        "Allocations made by the profiled steps and not yet freed at their highest total (the profiler's "
        "[memory] events), by the user's function running then (its def line, as the profiler's stacks name it); "
        "the module is the block (the module just inside the model) running when most of "
        "a line's bytes were allocated. What a block's forward allocated and still holds at the peak is what "
        "activation checkpointing frees.",
        detail=(1,),
    )


def _operators(rows: list[dict[str, Any]]) -> Section:
    return Section(
        "operators",
        "Time per operator (host, per step)",
        ("Operator", "Calls", "Self time", "Share of op time", "Total time"),
        (False, True, True, True, True),
        tuple(
            (_op(r["operator"]), s.number(r["calls"]), s.ms(r["self_ms"]), _pct(r.get("self_frac")), s.ms(r["total_ms"]))
            for r in rows
        ),
        "Self: the operator's own host time, the operators it called taken out (the self times add up to "
        "the time operators ran); total: with them. The operators with the most self time first.",
    )


def _collectives(rows: list[dict[str, Any]]) -> Section:
    return Section(
        "collectives",
        "Collectives across ranks",
        ("Collective", "Calls/step", "Size", "Wait for slowest", "Transfer", "Bus bandwidth", "Last to arrive"),
        (False, True, True, True, True, True, True),
        tuple(
            (str(r["collective"]), s.number(r["calls"]), s.nbytes(r["bytes"]) if r.get("bytes") else "—",
             s.ms(r["skew_ms"]), s.ms(r["transfer_ms"]), _f(r["busbw_gbps"], ".1f") + " GB/s" if r.get("busbw_gbps") else "—",
             "rank " + str(r["late_rank"]) if r.get("late_rank") is not None else "—")
            for r in rows
        ),
        "Per call: wait = time ranks spend in the collective before the last rank arrives (mean over ranks); "
        "transfer = the last rank's own time in it. Bus bandwidth = size / transfer x the algorithm factor "
        "(all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n).",
    )


def _misaligned(rows: list[dict[str, Any]]) -> Section:
    return Section(
        "misaligned_ops",
        "GEMMs/convolutions with tensor-core-unfriendly shapes",
        ("Operator", "Shapes", "dtype", "Off the multiple", "GPU time/step", "Where"),
        (False, False, False, False, True, False),
        tuple(
            (_op(r["name"]), _shapes(r["dims"]), str(r["dtype"]), f"{r['bad']} (x{r['multiple']})", s.ms(r["device_ms"]),
             str(r.get("where") or "—"))
            for r in rows
        ),
        "Tensor cores run fp16/bf16 GEMMs at full speed when M, N, K (convolution channels) are multiples "
        "of 8, int8/fp8 when multiples of 16.",
        detail=(2, 1),
    )


BUILDERS: dict[str, Callable[[list[dict[str, Any]]], Section]] = {
    "idle_functions": _idle,
    "roofline": _roofline,
    "modules": _modules,
    "memory_lines": _memory_lines,
    "operators": _operators,
    "collectives": _collectives,
    "misaligned_ops": _misaligned,
}


def gpu_sections(report: Report) -> list[Section]:
    """Build the report's GPU-time tables in display order (absent ones skipped).

    Every table but the collectives (matched across ranks) comes from one rank's trace: the
    straggler's, when the report names one (``Report.focus_rank``), and its title says so.
    """
    out = []
    for key, rows in report.tables.items():
        if key not in BUILDERS or not rows:
            continue
        sec = BUILDERS[key](list(rows))
        if key != "collectives":
            sec = replace(sec, title=sec.title + s.rank_suffix(report.focus_rank))
        out.append(sec)
    return out
