"""The sweep's frozen models: the cells asked for, and the table of what each measured."""

from __future__ import annotations

from dataclasses import dataclass

from advisor._vocab import Vocab

SWEEP_SCHEMA_VERSION = 1


class Precision(Vocab):
    """The precisions a cell can run in, each through a fix of the catalog (fp32: none)."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"


PRECISION_FIX: dict[str, str | None] = {"fp32": None, "bf16": "bf16_autocast", "fp16": "fp16_amp"}
"""Precision -> the catalog fix that installs it at run time (autocast)."""


class CellStatus(Vocab):
    """How a cell's runs ended."""

    OK = "ok"
    OOM = "out_of_memory"  # over the device's memory, or over --memory-budget (RSS watchdog on CPU)
    FAILED = "failed"  # crashed, timed out, or its loss went non-finite
    NOT_APPLIED = "not_applied"  # the run-time change could not be made (no CUDA for fp16, ...)


@dataclass(frozen=True)
class Cell:
    """One configuration of the table: a batch size and a precision."""

    batch_size: int
    precision: str = "fp32"

    @property
    def label(self) -> str:
        """``bs32-bf16``: the cell's name in progress lines and run folders."""
        return f"bs{self.batch_size}-{self.precision}"


@dataclass(frozen=True)
class CellResult:
    """What one cell measured over its interleaved repeats.

    Attributes:
        cell: The configuration asked for.
        status: :class:`CellStatus`.
        batch_size: The batch size the DataLoader really had (the data set may cap it).
        samples_per_s: Median steady throughput over the repeats.
        ci_low / ci_high: 95% interval of the throughput (t interval on logs; None under 2 runs).
        peak_memory_bytes: Largest peak memory over the runs (CUDA max allocated, or peak RSS).
        memory_kind: ``cuda`` or ``rss``.
        loss_delta: Largest relative deviation of the first losses from the reference cell's.
        tflops: TFLOP/s, when the FLOPs of a step are known (None: not measured).
        repeats: Runs that measured it.
        reason: Why it is not ``ok``, or what changed (a capped batch).
    """

    cell: Cell
    status: str = CellStatus.OK
    batch_size: int | None = None
    samples_per_s: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    peak_memory_bytes: int | None = None
    memory_kind: str | None = None
    loss_delta: float | None = None
    tflops: float | None = None
    repeats: int = 0
    reason: str = ""


@dataclass(frozen=True)
class SweepTable:
    """The whole sweep: every cell's result, the reference and the recommended cell.

    Attributes:
        script: The script swept; args its arguments.
        results: One result per cell, in the order asked.
        reference: The cell the loss deltas are taken against (the first: smallest batch, fp32).
        recommended: The fastest ``ok`` cell whose loss stays within ``loss_tolerance`` (None when none).
        loss_tolerance: Largest accepted loss delta for the recommendation.
        memory_budget_bytes: ``--memory-budget``, when given.
        script_batch_size: The batch size the script itself uses.
        notes: Remarks (what was not measured, why).
        wall_s: The sweep's wall time; runs: the runs it made.
    """

    script: str
    args: tuple[str, ...] = ()
    results: tuple[CellResult, ...] = ()
    reference: Cell | None = None
    recommended: Cell | None = None
    loss_tolerance: float = 0.5
    memory_budget_bytes: int | None = None
    script_batch_size: int | None = None
    notes: tuple[str, ...] = ()
    wall_s: float | None = None
    runs: int = 0
    schema_version: int = SWEEP_SCHEMA_VERSION
