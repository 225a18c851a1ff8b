"""The capture stage's boundary types: :class:`RunSpec` in, :class:`RunCapture` out.

``RunCapture`` is what ``capture.json`` holds. It is versioned; readers ignore unknown keys and
default missing ones, so every later stage can work from a run directory alone, offline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from advisor._serde import check_types, dump_json, from_dict
from advisor.capture.between import BetweenWork, EpochGap
from advisor.capture.budget import DEFAULT_TRACE_BUDGET_BYTES, TraceBound
from advisor.capture.kernel_use import AfterWork, KernelUse
from advisor.capture.records import (
    DataLoaderInfo,
    Environment,
    ScriptConfig,
    ScriptError,
    TimedPhase,
    UtilSummary,
)
from advisor.capture.usercode import UserCode
from advisor.capture.vocab import MemoryKind, Phase, RunStatus, StartKind, StepSource
from advisor.errors import InputError
from advisor.rundir import CAPTURE_FILE

CAPTURE_SCHEMA_VERSION = 1


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
        trace_budget_bytes: Keep the exported torch.profiler trace (uncompressed) under this
            size: fewer profiled steps, then no memory events or Python stacks
            (:mod:`advisor.capture.budget`; None: no bound).
        trace_export_s: Profile fewer steps (down to 3) when the probed step says the window's
            stop and export would take longer than this (None: as many as asked). The command
            line and :func:`advisor.api.diagnose` set :data:`~advisor.capture.budget.DEFAULT_TRACE_EXPORT_S`
            when the profiled steps were not given.
        startup_reported: The run's start-up (its time to first step) describes the user's, so
            a profiled run starts cold. False for a run whose trace alone is read (the kept
            fixes' profiled run), which may then be forked from the warm-start server.
        fresh_process: Start cold, never forked from the warm-start server: the fix measured
            depends on state a forked process inherits (glibc's malloc state).
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
    trace_budget_bytes: int | None = DEFAULT_TRACE_BUDGET_BYTES
    trace_export_s: float | None = None
    startup_reported: bool = True
    fresh_process: bool = False

    @property
    def multi_process(self) -> bool:
        """Whether the job runs as several processes under torchrun (more than one rank or node)."""
        return self.nproc_per_node > 1 or self.nnodes > 1


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
            or ``dataloader`` (highest precedence seen; see :mod:`advisor.capture.phases`).
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
            step), ``warmup``, ``timed``, ``profiled``, ``cprofile`` (their counted steps
            alone), ``export`` (advisor's own work between those steps: the trace-budget
            probe, the profiled windows' export, the last one's too), ``finishing`` (see
            :meth:`advisor.capture.recorder.StepRecorder.phase_seconds`). A warm run's
            ``process`` is the fork and the request to the server, its ``imports`` what was
            not imported before the fork.
        start: How the child process started (:class:`StartKind`): ``cold`` (a fresh
            interpreter) or ``warm`` (forked from the warm-start server).
        memory_budget_bytes: The ``--memory-budget`` the run was held to (None: none); the
            metrics read it as the device's memory, the limit the run has.
        module_names: torch.profiler's module labels (``Conv2d_5``) -> the model's qualified
            names (``layers.1.short.0``), from the profiled window (:mod:`advisor.capture.module_names`).
        between_steps: Evaluation and sampling between training steps, one record per
            occurrence (:mod:`advisor.capture.between`).
        run_hints: Integers the training loop names like its length or a period
            (``max_iters``, ``eval_interval``), read from its frames at its first optimizer step.
        epoch_batches: Batches per epoch of the DataLoader the training steps iterate
            (``len()`` of its iterator at its first batch with grad enabled); None when unknown.
        trace_bound: How the profiled window was sized to the trace budget, from one probed
            step (:mod:`advisor.capture.budget`); None when no step was probed.
        lazy_imports: Which of the modules a script imports only by what it does
            (:data:`~advisor.capture.warm_preload.LAZY_MODULES`, :data:`~advisor.capture.warm_preload.ON_SIGHT_MODULES`) it had imported by the end of
            its first step; None when unknown (no step, an older capture).
        kernel: The main process's page faults and CPU time in the kernel over its timed steps
            (:mod:`advisor.capture.kernel_use`); None without a timed step, or from an older capture.
        faults_after_work: The page faults of the first whole step after each occurrence of work
            between steps (:class:`~advisor.capture.kernel_use.AfterWork`); none in an older capture.
        epoch_gaps: Each change of the training loader's epoch the run saw, one step included
            (:class:`~advisor.capture.between.EpochGap`); none in an older capture.
        end_s: A plain run's exit after its last step (CPython's shutdown of what the script
            imported), which no capture pays: timed by the warm-start server beside the capture
            (:mod:`advisor.capture.end_probe`); None when no server ran beside the capture
            (``--no-fix``, ``--cold-start``, a visible GPU, no free core) or it could not be timed.
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
    module_names: dict[str, str] = field(default_factory=dict)
    between_steps: tuple[BetweenWork, ...] = ()
    run_hints: dict[str, int] = field(default_factory=dict)
    trace_bound: TraceBound | None = None
    epoch_batches: int | None = None
    lazy_imports: tuple[str, ...] | None = None
    kernel: KernelUse | None = None
    faults_after_work: tuple[AfterWork, ...] = ()
    end_s: float | None = None
    epoch_gaps: tuple[EpochGap, ...] = ()

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

    @property
    def time_to_first_step_s(self) -> float | None:
        """The script's start to the end of its first step, as a user's run would take it.

        None for a run forked from the warm-start server: torch was imported before it began, so
        its first step came seconds earlier than the script's would.
        """
        return None if self.start == StartKind.WARM else self.timed.time_to_first_step_s

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
        except OSError as exc:  # NOTE: unreadable is not invalid: "not valid JSON ([Errno 13])" misled
            raise InputError(f"cannot read {path} ({exc.strerror or exc}); check its permissions") from exc
        except ValueError as exc:
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
        _check_times(path, data.get("timed") or {})
        return from_dict(cls, data)


MAX_STEP_MS = 7 * 24 * 3600 * 1e3
"""A week: no one training step the capture times lasts longer."""


def _check_times(path: Path, timed: dict[str, Any]) -> None:
    """Refuse step times no clock measured: NaN, negative, over a week (issue #30 campaign).

    ``advisor analyze`` printed "Step time 1e308 ms" with exit 0 from a crafted capture.json;
    the capture never writes NaN (it writes null), so such a value is bad input, not a report.
    """
    import math

    for key in ("step_times_ms", "warmup_step_times_ms"):
        for i, value in enumerate(timed.get(key) or ()):
            if isinstance(value, (int, float)) and not (math.isfinite(value) and 0 <= value <= MAX_STEP_MS):
                raise InputError(
                    f"{path}: capture.timed.{key}[{i}] is {value!r} ms, a time no step takes "
                    "(negative, not a number or over a week); re-run `advisor diagnose`"
                )


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
