"""The sweep's frozen models: the cells asked for, and the table of what each measured."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from advisor._serde import load_checked
from advisor._vocab import Vocab
from advisor.capture.vocab import MemoryKind
from advisor.errors import InputError
from advisor.rundir import SWEEP_FILE

SWEEP_SCHEMA_VERSION = 3
"""3: the input-size axis (``Cell.size``, elements per sample and per second)."""


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
    NOT_RUN = "not_run"  # the sweep was interrupted before the cell's first run


class SweepStatus(Vocab):
    """How far the sweep got (the saved ``sweep.json`` says it, like a diagnose report's status)."""

    RUNNING = "running"
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class Cell:
    """One configuration of the table: batch size, precision, micro-batches per optimizer step, input size.

    ``size`` is the value the script's own size option is set to (``--patch-size 64``); None
    leaves the script's as it is.
    """

    batch_size: int
    precision: str = "fp32"
    accumulation: int = 1
    size: int | None = None

    @property
    def label(self) -> str:
        """``bs32-bf16`` (``size64-bs32-acc4-bf16`` with a size and accumulation): the cell's name in progress lines and run folders."""
        acc = f"-acc{self.accumulation}" if self.accumulation != 1 else ""
        size = f"size{self.size}-" if self.size is not None else ""
        return f"{size}bs{self.batch_size}{acc}-{self.precision}"

    @property
    def effective_batch(self) -> int:
        """Samples per optimizer step: the batch times the accumulation."""
        return self.batch_size * self.accumulation


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
        tflops: Achieved TFLOP/s: the FLOPs of one optimizer step (counted in the child with
            torch's FlopCounterMode over one warm-up step) per sample, times ``samples_per_s``.
        flops_per_sample: The counted FLOPs of one step over the samples that step held.
        peak_tflops: The device's peak for the cell's precision (a GPU's datasheet, or the
            matmul rate advisor measured on this CPU); None when none is known.
        peak_source: ``datasheet``, ``measured``, or ``measured_fp32`` (on a CPU whose
            matmul in the cell's precision measured slower than in fp32: fp32's rate).
        mfu: ``tflops / peak_tflops`` (model FLOPs utilisation against that peak).
        not_measured: Why ``tflops`` or ``mfu`` is missing, shown in their place.
        elements_per_sample: Voxels (a 5-D input), pixels (4-D), tokens (an integer 2-D input) or
            elements of one sample of the model's input, read from the input of the counted step's
            first module call; None when no step was counted.
        element_unit: ``voxel``, ``pixel``, ``token`` or ``element``.
        elements_per_s: ``elements_per_sample`` times ``samples_per_s``.
        repeats: Runs that measured it.
        unfinished: The sweep was interrupted before the cell ran all its repeats.
        reason: Why it is not ``ok``, or what changed (a capped batch).
    """

    cell: Cell
    status: str = CellStatus.OK
    batch_size: int | None = None
    samples_per_s: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    peak_memory_bytes: int | None = None
    memory_kind: MemoryKind | None = None
    loss_delta: float | None = None
    tflops: float | None = None
    flops_per_sample: float | None = None
    peak_tflops: float | None = None
    peak_source: str | None = None
    mfu: float | None = None
    not_measured: str = ""
    elements_per_sample: float | None = None
    element_unit: str = ""
    elements_per_s: float | None = None
    repeats: int = 0
    unfinished: bool = False
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
        status: :class:`SweepStatus`: ``complete``, or ``interrupted`` with the cells finished so far.
        diff: The source diff that sets the recommended cell (``# advisor:`` lines lead it for
            what cannot be made mechanical); empty when the recommended cell is the script as it is.
        load_avg: The 1-minute load average at the start and at the end of the sweep.
        device: Where the cells ran (``cpu``, or the GPU's name).
        size_option: The script's option the size axis sets (``patch_size``); None without that axis.
        script_size: Its value in the script as it is.
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
    status: str = SweepStatus.COMPLETE
    diff: str = ""
    load_avg: tuple[float, ...] = ()
    device: str = ""
    size_option: str | None = None
    script_size: int | None = None
    schema_version: int = SWEEP_SCHEMA_VERSION


def load_table(path: Path) -> SweepTable:
    """Read a saved sweep from its run directory or its ``sweep.json`` (complete, running or interrupted).

    Raises:
        InputError: No such file, not JSON, not a sweep, or a schema newer than this advisor reads.
    """
    path = Path(path)
    file = path / SWEEP_FILE if path.is_dir() else path
    if file.exists() and not file.is_file():  # NOTE: a FIFO blocked `sweep --load` forever (issue #30 campaign)
        raise InputError(f"{file} is not a regular file (a FIFO, device or folder); pass a sweep's sweep.json or its folder")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"no {SWEEP_FILE} in {path}; run `advisor sweep` first") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise InputError(f"cannot read {file} as a sweep ({exc}); re-create it with advisor sweep") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if isinstance(version, bool) or not isinstance(version, int) or "results" not in data:
        raise InputError(f"{file} is not an advisor sweep (no schema_version and results)")
    if version > SWEEP_SCHEMA_VERSION:
        raise InputError(
            f"{file} has sweep schema {version}, newer than this advisor reads ({SWEEP_SCHEMA_VERSION}); upgrade advisor"
        )
    return load_checked(SweepTable, data, str(file), "re-create it with advisor sweep")
