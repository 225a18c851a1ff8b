"""The capture stage's boundary types: :class:`RunSpec` in, :class:`RunCapture` out.

``RunCapture`` is what ``capture.json`` holds. It is versioned; readers ignore unknown keys and
default missing ones, so every later stage can work from a run directory alone, offline.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from advisor._serde import check_types, dump_json, from_dict
from advisor._vocab import Vocab
from advisor.capture.peak import MatmulPeak
from advisor.capture.usercode import UserCode
from advisor.capture.vocab import MemoryKind, StepSource
from advisor.errors import InputError
from advisor.rundir import CAPTURE_FILE

CAPTURE_SCHEMA_VERSION = 1



class RunStatus(Vocab):
    """How the script's run ended, as recorded in ``RunCapture.status`` (``capture.json``)."""

    COMPLETED = "completed"  # the script ran to its end (--full, or it had few steps)
    STOPPED = "stopped"  # advisor stopped it after the profiled steps (the normal case)
    CRASHED = "crashed"  # the script raised or its process died
    TIMEOUT = "timeout"  # --timeout ended it
    NO_STEPS = "no_steps"  # it ended without a single step being seen
    INTERRUPTED = "interrupted"  # advisor was interrupted (Ctrl-C, SIGTERM, SIGHUP) while it ran


class StartKind(Vocab):
    """How a run's child process started, as recorded in ``RunCapture.start``."""

    COLD = "cold"  # a fresh interpreter: ``python -m advisor.capture.child``, imports and all
    WARM = "warm"  # forked from the warm-start server, torch already imported (advisor.capture.warm)


class WarmStartLost(RuntimeError):
    """The warm-start server died while a run was starting or in flight: run it again cold."""



class NoteState(str, Enum):
    """What became of one run-time fix in the child (``FixNote.state``)."""

    APPLIED = "applied"  # the fix took effect
    SKIPPED = "skipped"  # it could not apply here; the detail says why
    PENDING = "pending"  # installed, waiting for the script to reach it (a DataLoader, the model)

    def __str__(self) -> str:
        return self.value


# How each state reads in one line (and how version-1 child files wrote it).
_NOTE_PREFIXES = {
    NoteState.APPLIED: "applied: ",
    NoteState.SKIPPED: "not applied: ",
    NoteState.PENDING: "installed: ",
}


@dataclass(frozen=True)
class FixNote:
    """What one run-time fix did in the child: a state and a human detail.

    ``str(note)`` reads ``applied: num_workers 0->2``, ``not applied: no CUDA device`` or
    ``installed: waiting for a DataLoader``.
    """

    state: NoteState
    detail: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.state, NoteState):
            object.__setattr__(self, "state", NoteState(self.state))

    def __str__(self) -> str:
        return _NOTE_PREFIXES[self.state] + self.detail

    @classmethod
    def parse(cls, text: str) -> FixNote:
        """Read a one-line note (``applied: ...``), as older child files stored them."""
        for state, prefix in _NOTE_PREFIXES.items():
            if text.startswith(prefix):
                return cls(state, text[len(prefix):])
        return cls(NoteState.APPLIED, text)

    @classmethod
    def of(cls, value: FixNote | str | dict[str, Any] | None) -> FixNote | None:
        """Coerce a stored note (object, old string, JSON object) into a :class:`FixNote`."""
        if value is None or isinstance(value, FixNote):
            return value
        if isinstance(value, dict):
            return cls(NoteState(value.get("state", "applied")), str(value.get("detail", "")))
        return cls.parse(str(value))


@dataclass(frozen=True)
class FixRequest:
    """One run-time intervention the child applies before the script runs."""

    id: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunSpec:
    """Everything needed to run and capture a script once.

    Attributes:
        script: Path to the user's Python file.
        args: Arguments passed to the script unchanged.
        out_dir: The run directory to create and fill.
        warmup_steps: Steps run before anything is measured.
        timed_steps: Steps timed without the profiler.
        profiled_steps: Steps under torch.profiler and cProfile (0 disables profiling).
        full: Let the script run to its end instead of stopping after the profiled steps.
        timeout_s: Wall-clock limit for the script, or None.
        fixes: Interventions to apply at run time (fix trials); empty for a plain capture.
        seed: Seed torch/random/numpy before the script runs (loss parity); None leaves them.
        record_loss_steps: Record the loss of this many first steps (for loss parity).
        quiet: Suppress live progress on stderr.
        cwd: Working directory for the script (default: the caller's).
        env: Extra environment variables for the child.
        nproc_per_node: >1 launches through torchrun with that many ranks.
        nnodes: Node count passed to torchrun.
        cprofile_steps: Steps under cProfile, right after the torch.profiler steps (None: as
            many as ``profiled_steps``; 0: no cProfile). A separate window because cProfile and
            ``with_stack`` share CPython's one profile hook per thread: enabled together,
            cProfile silently removes every Python stack event from the trace.
        module: Run ``script`` as this module, as ``python -m module`` does (``sys.path[0]``
            is the working directory, ``__spec__`` and relative imports work); None runs the
            script as a file.
        min_timed_s: Keep timing past ``timed_steps`` until the timed steps add up to this
            many seconds (0: exactly ``timed_steps``). Fix trials set it: 20 steps of half a
            millisecond are a 10 ms window that one scheduler hiccup can halve, and a speedup is
            a ratio of two such windows.
        fix_installers: Importable module names whose ``install(fixes)`` the child calls for
            ``fixes`` (the fix stage passes its own runtime; capture imports none of it itself).
        memory_budget_bytes: Cap the script's memory: CUDA's per-process memory fraction on a
            GPU, a watchdog on the child's RSS on CPU (None: no cap).
    """

    script: Path
    args: tuple[str, ...] = ()
    out_dir: Path = Path("advisor-runs/run")
    warmup_steps: int = 5
    timed_steps: int = 20
    profiled_steps: int = 10
    full: bool = False
    timeout_s: float | None = None
    fixes: tuple[FixRequest, ...] = ()
    seed: int | None = None
    record_loss_steps: int = 0
    quiet: bool = False
    cwd: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    nproc_per_node: int = 1
    nnodes: int = 1
    cprofile_steps: int | None = None
    min_timed_s: float = 0.0
    fix_installers: tuple[str, ...] = ()
    memory_budget_bytes: int | None = None
    module: str | None = None


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


class ConfigStyle(Vocab):
    """How a script takes its configuration on the command line."""

    ARGPARSE = "argparse"  # argparse (HfArgumentParser too): ``--batch-size 8``
    CONFIGURATOR = "configurator"  # nanoGPT's configurator: ``--batch_size=8`` overrides a global


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


@dataclass(frozen=True)
class RunCapture:
    """Everything one capture recorded; saved as ``capture.json``.

    Attributes:
        schema_version: Version of this layout.
        run_dir: The run directory (absolute when written).
        script: The script that ran; args its arguments.
        status: How the run ended (:class:`RunStatus`).
        exit_code: The child's exit code (the script's ``sys.exit`` code where it called it).
        error: Set when the script raised, crashed or timed out.
        step_source: How steps were found: ``marker``, ``optimizer``, ``backward``, ``module``
            or ``dataloader`` (highest precedence seen; see :mod:`advisor.capture.recorder`).
        step_source_reason: One sentence saying why that source defined the steps.
        steps_seen: Total steps the script completed while captured.
        warmup_steps / timed_steps / profiled_steps: Steps actually spent in each phase.
        timed: The timed phase's measurements.
        losses: Loss of the first steps (for loss parity), when asked for.
        peak_memory_bytes: CUDA max allocated on GPU, peak RSS on CPU.
        memory_kind: ``cuda`` or ``rss``.
        cpu: CPU utilisation (psutil) sampled by the parent.
        gpu: GPU utilisation and memory (NVML) sampled by the parent, or a note why not.
        environment: Versions and hardware.
        dataloaders: Every DataLoader the script created.
        fixes: Interventions applied at run time (empty for a plain capture).
        fix_notes: What each intervention did or why it did not apply, by fix id.
        trace_files: Trace paths relative to run_dir (TensorBoard layout under ``traces/``).
        pstats_file: cProfile output relative to run_dir, or None.
        stdout_log / stderr_log: Log paths relative to run_dir.
        wall_s: Wall time of the whole child run.
        notes: Human-readable remarks (few steps, no GPU, ...).
        ranks: For torchrun launches, the rank run directories relative to run_dir.
        cprofiled_steps: Steps spent under cProfile (after the profiled steps).
        events_file: The child's progress events (JSON lines) relative to run_dir.
        user_code: What counts as the user's code in this run (the interpreter's library roots
            and the user's files), decided once by the child and read by the metrics stage;
            None for old captures.
        script_config: The script's own configuration surface (argparse options, configurator
            globals), for fixes made through its arguments.
        phases_s: Where the run's wall time went, in seconds: ``process`` (interpreter start
            and exit, outside the child's clock), ``imports``, ``setup`` (to the end of the first
            step), ``warmup``, ``timed``, ``profiled``, ``cprofile``, ``finishing`` (see
            :meth:`advisor.capture.recorder.StepRecorder.phase_seconds`). A warm run's
            ``process`` is the fork and the request to the server, its ``imports`` what was
            not imported before the fork.
        start: How the child process started (:class:`StartKind`): ``cold`` (a fresh
            interpreter) or ``warm`` (forked from the warm-start server).
        memory_budget_bytes: The ``--memory-budget`` the run was held to (None: none); the
            metrics read it as the device's memory, the limit the run has.
    """

    schema_version: int = CAPTURE_SCHEMA_VERSION
    run_dir: str = ""
    script: str = ""
    args: tuple[str, ...] = ()
    status: RunStatus = RunStatus.STOPPED
    exit_code: int | None = None
    error: ScriptError | None = None
    step_source: StepSource | None = None
    step_source_reason: str | None = None
    steps_seen: int = 0
    warmup_steps: int = 0
    timed_steps: int = 0
    profiled_steps: int = 0
    timed: TimedPhase = field(default_factory=TimedPhase)
    losses: tuple[float | None, ...] = ()
    peak_memory_bytes: int | None = None
    memory_kind: MemoryKind = MemoryKind.RSS
    cpu: UtilSummary = field(default_factory=UtilSummary)
    gpu: UtilSummary = field(default_factory=UtilSummary)
    environment: Environment = field(default_factory=Environment)
    dataloaders: tuple[DataLoaderInfo, ...] = ()
    fixes: tuple[FixRequest, ...] = ()
    fix_notes: dict[str, FixNote] = field(default_factory=dict)
    trace_files: tuple[str, ...] = ()
    pstats_file: str | None = None
    stdout_log: str = "stdout.log"
    stderr_log: str = "stderr.log"
    wall_s: float | None = None
    notes: tuple[str, ...] = ()
    ranks: tuple[str, ...] = ()
    cprofiled_steps: int = 0
    events_file: str | None = None
    user_code: UserCode | None = None
    phases_s: dict[str, float] = field(default_factory=dict)
    script_config: ScriptConfig = field(default_factory=ScriptConfig)
    start: StartKind = StartKind.COLD
    memory_budget_bytes: int | None = None

    def __post_init__(self) -> None:
        # NOTE: older child files, and fakes, hold one-line notes ("applied: ..."): read them as
        # FixNote so every consumer sees fields, never prefixes.
        if any(not isinstance(v, FixNote) for v in self.fix_notes.values()):
            object.__setattr__(self, "fix_notes", {
                k: FixNote.of(v) for k, v in self.fix_notes.items() if v is not None
            })

    @property
    def ok(self) -> bool:
        """True when the script neither crashed nor timed out and at least one step was seen."""
        return self.status in (RunStatus.COMPLETED, RunStatus.STOPPED)

    def save(self, run_dir: Path) -> Path:
        """Write ``capture.json`` into ``run_dir`` atomically and return its path."""
        path = Path(run_dir) / CAPTURE_FILE
        dump_json(self, path)
        return path

    @classmethod
    def load(cls, run_dir: Path) -> RunCapture:
        """Read ``capture.json`` from a run directory; a clear InputError when it is not one."""
        path = Path(run_dir) / CAPTURE_FILE
        if not path.is_file():
            raise InputError(
                f"{run_dir} is not an advisor run directory (no {CAPTURE_FILE}); "
                "pass the folder `advisor diagnose` printed, or use `advisor analyze` for a trace"
            )
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(f"{path} is not valid JSON ({exc}); re-run `advisor diagnose`") from exc
        except RecursionError:
            raise InputError(f"{path} is nested too deeply to be a capture; re-run `advisor diagnose`") from None
        if not isinstance(data, dict):
            raise InputError(f"{path} does not hold a capture object; re-run `advisor diagnose`")
        version = data.get("schema_version", 1)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise InputError(f"{path}: schema_version {version!r} is not one advisor writes; re-run `advisor diagnose`")
        if version > CAPTURE_SCHEMA_VERSION and isinstance(data.get("notes", []), list):
            data.setdefault("notes", []).append(
                f"capture.json schema {version} is newer than this advisor "
                f"({CAPTURE_SCHEMA_VERSION}); unknown fields were ignored"
            )
        try:
            check_types(cls, data, "capture")
        except TypeError as exc:
            raise InputError(f"{path}: {exc}; re-run `advisor diagnose`") from None
        return from_dict(cls, data)


class Phase(Vocab):
    """Phases a capture goes through, in order, as reported in ``ProgressEvent.phase``."""

    STARTING = "starting"  # child launched, script importing / setting up (no step yet)
    WARMUP = "warmup"
    TIMED = "timed"
    PROFILED = "profiled"  # torch.profiler on
    CPROFILE = "cprofile"  # cProfile on
    FINISHING = "finishing"  # measurements done: exporting, or the script runs on (--full)
    DONE = "done"  # the child has exited




@dataclass(frozen=True)
class ProgressEvent:
    """One live progress update from a capture, passed to ``capture(progress=...)``.

    Attributes:
        phase: The capture's current :class:`Phase`.
        step: Steps completed so far (all phases).
        steps_total: Steps the capture asks for (warm-up + timed + profiled + cProfile).
        phase_step: Steps completed in the current phase.
        phase_steps: Steps the current phase asks for (0 when it has no count).
        elapsed_s: Seconds since the child started.
        message: A short remark (a note, a status), or "".
    """

    phase: Phase
    step: int = 0
    steps_total: int = 0
    phase_step: int = 0
    phase_steps: int = 0
    elapsed_s: float = 0.0
    message: str = ""
