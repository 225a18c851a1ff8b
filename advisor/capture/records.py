"""The small records a :class:`~advisor.capture.model.RunCapture` is made of.

The script's DataLoaders, the timed phase's measurements, the parent's utilisation samples, the
environment, the script's own configuration and the error it ended with: each a frozen record
saved inside ``capture.json``, kept apart from the boundary types that hold them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from advisor.capture.peak import MatmulPeak
from advisor.capture.vocab import ConfigStyle


@dataclass(frozen=True)
class DataLoaderInfo:
    """The settings of one DataLoader the script created."""

    batch_size: int | None = None
    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None
    dataset_type: str = ""
    iterable_dataset: bool = False
    file: str | None = None
    line: int | None = None
    batches: int | None = None  # len(loader): batches per epoch (None: an iterable data set, no length)
    # an IterableDataset's stream split by worker (advisor.capture.sharding): None when not iterable or unknown
    worker_split: bool | None = None


@dataclass(frozen=True)
class TimedPhase:
    """Measurements from the timed (unprofiled) steps.

    Attributes:
        step_times_ms: Wall time of each timed step.
        samples: Samples per timed step, counted from the batches the DataLoader yielded
            (None where no DataLoader batch was seen in that step).
        samples_per_s: Throughput over the timed steps' steady part (:mod:`advisor._steady`:
            without the first steps when they were still warming up; None without sample counts).
        steps_per_s: Steps per second over the same steps.
        time_to_first_step_s: From the script's start to the end of its first step
            (includes imports, data set-up and any compile).
        batches: DataLoader batches fetched in each timed step (more than 1 per optimizer
            step means gradient accumulation; 0 where no DataLoader batch was seen).
        backwards: ``backward()`` calls in each timed step, outside optimizer steps (more than
            1 per optimizer step means gradient accumulation in the loop itself, with or
            without a DataLoader; an LBFGS closure's calls are not counted).
        optimizers_per_step: Distinct optimizers that step in one iteration when steps are
            optimizer steps (2 in a GAN), else 0: the backward calls of one optimizer step are
            ``backwards / optimizers_per_step``.
        warmup_step_times_ms: Wall time of each warm-up step (the fix loop reads from them
            how many warm-up steps this script needs before its step time is stable).
        epoch_ends: DataLoader epochs that ended while the timed steps ran. At 0, nothing that
            happens between epochs (loader workers starting again) was inside the measurement.
        compiles: Graphs ``torch.compile`` compiled while the timed steps ran (0 without
            compile). Any is a recompile inside the measurement: those steps timed the compiler,
            not the compiled code.
    """

    step_times_ms: tuple[float, ...] = ()
    samples: tuple[int | None, ...] = ()
    samples_per_s: float | None = None
    steps_per_s: float | None = None
    time_to_first_step_s: float | None = None
    batches: tuple[int, ...] = ()
    backwards: tuple[int, ...] = ()
    optimizers_per_step: int = 0
    warmup_step_times_ms: tuple[float, ...] = ()
    epoch_ends: int = 0
    compiles: int = 0

    @property
    def backwards_per_step(self) -> float | None:
        """Median ``backward()`` calls per timed step (None when none was counted)."""
        if not self.backwards or not any(self.backwards):
            return None
        return float(statistics.median(self.backwards))

    @property
    def micro_batch_samples(self) -> float | None:
        """Median samples per ``backward()`` call: the micro-batch size (None when unknown)."""
        pairs = [
            s / b for s, b in zip(self.samples, self.backwards, strict=False) if s is not None and b > 0
        ]
        return float(statistics.median(pairs)) if pairs else None

    @property
    def accumulation(self) -> int | None:
        """Micro-batches per optimizer step seen in the loop itself, or None when it does not accumulate.

        Gradient accumulation is several ``backward()`` calls per ``optimizer.step()``: with
        optimizer steps as the step source, the median backward calls per step divided by the
        optimizers stepping in it. A GAN (3 backward calls, 2 optimizers) does not divide
        evenly and is not accumulation; neither is one backward call per optimizer step.
        """
        per_step = self.backwards_per_step
        if per_step is None or self.optimizers_per_step < 1 or per_step != int(per_step):
            return None
        k, rest = divmod(int(per_step), self.optimizers_per_step)
        return k if rest == 0 and k >= 2 else None


@dataclass(frozen=True)
class UtilSummary:
    """Utilisation samples from the parent (psutil for CPU, NVML for GPU).

    The CPU summary also says what else ran on the machine meanwhile (contention):
    ``load_avg_mean``/``load_avg_max`` (1-minute load average), ``other_util_frac`` (share of
    the machine's CPU time used by processes outside the run's process tree), and the run's own
    ``max_processes``/``max_threads`` (its process tree: DataLoader workers and their threads).
    """

    mean_util_frac: float | None = None
    max_util_frac: float | None = None
    samples: int = 0
    peak_memory_bytes: int | None = None
    total_memory_bytes: int | None = None
    note: str | None = None
    load_avg_mean: float | None = None
    load_avg_max: float | None = None
    other_util_frac: float | None = None
    max_processes: int | None = None
    max_threads: int | None = None


@dataclass(frozen=True)
class Environment:
    """Where the run happened.

    ``intra_op_threads`` (torch's thread count when the script ended), ``cpu_model`` and
    ``matmul_peaks`` (the measured matmul rate of a CPU run, :mod:`advisor.capture.peak`) say
    how fast the arithmetic could have been.
    """

    python: str = ""
    torch: str = ""
    cuda: str | None = None
    device: str = "cpu"
    device_name: str = ""
    gpu_count: int = 0
    cpu_count: int = 0
    platform: str = ""
    hostname: str = ""
    git_commit: str | None = None
    intra_op_threads: int | None = None
    cpu_model: str = ""
    matmul_peaks: tuple[MatmulPeak, ...] = ()


@dataclass(frozen=True)
class ScriptOption:
    """One setting of the script's own configuration, as the script parsed it.

    Attributes:
        name: The setting's name: argparse's ``dest``, or the global's name.
        value: The value the script ran with (a JSON scalar: int, float, bool, str or None).
        style: Where it comes from (:class:`ConfigStyle`).
        flag: The option string to set it with: ``--batch-size`` (argparse's first long
            option), ``--batch_size`` (configurator); None when it has no option string.
        action: ``store`` (takes a value), ``store_true`` or ``store_false`` (a switch).
        default: The default it had before the command line (argparse only).
    """

    name: str
    value: Any = None
    style: ConfigStyle = ConfigStyle.ARGPARSE
    flag: str | None = None
    action: str = "store"
    default: Any = None


@dataclass(frozen=True)
class ScriptConfig:
    """The script's configuration surface: what can be changed through its own arguments.

    Recorded in the child (:mod:`advisor.capture.scriptconfig`) so that a fix can be tried, and
    handed to the user, as a new command line rather than a run-time patch.

    Attributes:
        options: Every recognisable setting (scalar values only), in the order declared.
        notes: What could not be recorded, one line each.
    """

    options: tuple[ScriptOption, ...] = ()
    notes: tuple[str, ...] = ()

    def get(self, name: str) -> ScriptOption | None:
        """Return the option named ``name`` (None when the script has none)."""
        return next((o for o in self.options if o.name == name), None)


OUT_OF_MEMORY = "OutOfMemory"
"""``ScriptError.type`` of a run stopped for going over ``RunSpec.memory_budget_bytes``."""


@dataclass(frozen=True)
class ScriptError:
    """What went wrong in the script, when something did.

    Attributes:
        type: The exception's type name (``SystemExit`` for a non-zero exit before any step).
        message: One line: the exception's message, or what advisor saw.
        log: The script's stderr log, relative to the run directory.
        step: The step it failed in (1: before its first step ended).
        last_line: The last line the script wrote to stderr (its own words: argparse's
            ``error:`` line, the traceback's last line), when it failed before its first step.
    """

    type: str
    message: str
    log: str = "stderr.log"
    step: int | None = None
    last_line: str | None = None
