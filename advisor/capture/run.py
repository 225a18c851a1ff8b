"""Run a script under capture: :func:`capture` takes a :class:`RunSpec`, returns a :class:`RunCapture`.

The parent side, shared with the torchrun launcher (:mod:`advisor.distributed.launch`), which uses
its public pieces (:func:`validate_spec`, :func:`started`, :class:`EventRelay`, :func:`kill_group`,
:func:`steps_total`, :func:`report_done`). It validates the script, prepares the run directory,
starts ``python -m advisor.capture.child config.json`` in its own process group (stdout and stderr
to ``stdout.log`` / ``stderr.log``, readable while it runs), samples CPU and GPU utilisation (the
GPU's in the timed steps the relayed progress events mark), enforces the timeout, then merges
``child.json`` into ``capture.json``. The script's failures are statuses, never exceptions:

* ``stopped``: advisor stopped it after the profiled steps (the normal case);
* ``completed``: it ran to its end (``--full``, few steps, or ``sys.exit(n)``: exit_code n);
* ``crashed``: it raised (``error`` names the exception and step) or its process died;
* ``timeout``: ``timeout_s`` passed; the process group was ended, measurements kept;
* ``no_steps``: it ended without a step being seen (a note says how to mark steps);
* ``interrupted``: advisor itself was interrupted (Ctrl-C, SIGTERM, SIGHUP): the child was asked
  to save, ``capture.json`` is still written with what was measured, then the interrupt goes on.

Whatever ends the capture, no process of the script's tree is left: the child leads its own process
group (swept at the end), descendants that leave it are remembered while it runs
(:class:`advisor._proc.ProcessTree`), and every process advisor starts gets the parent-death signal.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from advisor import rundir
from advisor._listeners import remove as remove_listener_dirs
from advisor._proc import Interrupted, ProcessTree, kill_group, own_group, stop_child
from advisor._serde import dump_json, from_dict, to_jsonable
from advisor.capture import cuda_budget
from advisor.capture.budget import PROBE_STEPS
from advisor.capture.environment import environment, git_commit
from advisor.capture.model import (
    Phase,
    ProgressEvent,
    RunCapture,
    RunSpec,
    RunStatus,
    ScriptError,
    StartKind,
    WarmStartLost,
)
from advisor.capture.phases import Phases
from advisor.capture.records import OUT_OF_MEMORY
from advisor.capture.sampler import UtilSampler
from advisor.capture.stderr_tail import last_stderr_line
from advisor.capture.syspath import PYTHON_FLAGS
from advisor.capture.vocab import MemoryKind
from advisor.errors import InputError, UsageError
from advisor.rundir import CONFIG_FILE, EVENTS_FILE, STDERR_LOG, STDOUT_LOG

TERM_GRACE_S = 10.0
"""After a timeout, how long the child may take to write what it measured before it is killed."""
SAMPLE_INTERVAL_S = 0.5
_POLL_S = 0.1

ProgressCallback = Callable[[ProgressEvent], None]


def validate_script(script: Path) -> Path:
    """Check that ``script`` is an existing Python file; return it resolved.

    Raises:
        UsageError: It is missing, a folder, not Python (no ``.py`` suffix and no python
            shebang), or its path is not UTF-8.
    """
    path = Path(script)
    try:
        str(path.absolute()).encode("utf-8")
    except UnicodeEncodeError:
        # NOTE: torch.profiler fails on the first profiled step ("error unpacking string as utf-8")
        # when a Python frame's file name is not UTF-8: say so before anything runs.
        raise UsageError(
            f"{path}: the path is not valid UTF-8, which torch.profiler cannot record; rename the script or its folder"
        ) from None
    if not path.exists():
        raise UsageError(f"script not found: {path}; pass the path of a Python file")
    if not path.is_file():
        raise UsageError(f"{path} is not a file; pass the path of a Python script")
    if path.suffix not in (".py", ".pyw"):
        try:
            with path.open("rb") as fh:
                first = fh.readline(200)
        except OSError as exc:
            raise UsageError(f"cannot read {path} ({exc.strerror})") from exc
        if not (first.startswith(b"#!") and b"python" in first):
            raise UsageError(
                f"{path} is not a Python script (expected a .py file); "
                "advisor runs Python training scripts"
            )
    return path.resolve()


def validate_spec(spec: RunSpec) -> None:
    """Raise UsageError for a spec no capture can run (negative counts, bad timeout or cwd)."""
    for name in ("warmup_steps", "timed_steps", "profiled_steps", "record_loss_steps"):
        if getattr(spec, name) < 0:
            raise UsageError(f"{name.replace('_', '-')} must be 0 or more, got {getattr(spec, name)}")
    if spec.cprofile_steps is not None and spec.cprofile_steps < 0:
        raise UsageError(f"cprofile-steps must be 0 or more, got {spec.cprofile_steps}")
    for name, budget in (("--memory-budget", spec.memory_budget_bytes), ("--trace-budget", spec.trace_budget_bytes)):
        if budget is not None and budget <= 0:
            raise UsageError(f"{name} must be a positive size (e.g. 500MB), got {budget} bytes")
    if spec.timeout_s is not None and not (math.isfinite(spec.timeout_s) and spec.timeout_s > 0):
        raise UsageError(f"--timeout must be a positive number of seconds, got {spec.timeout_s}")
    if spec.cwd is not None and not Path(spec.cwd).is_dir():
        raise UsageError(f"working directory {spec.cwd} does not exist")


def prepare_run_dir(out_dir: Path) -> Path:
    """Make the run directory ready (see :func:`advisor.rundir.prepare`); return it absolute."""
    return rundir.prepare(out_dir)


def child_env(spec: RunSpec) -> dict[str, str]:
    """Return the run child's environment: advisor's, the spec's extra variables, advisor importable."""
    env = dict(os.environ)
    env.update(spec.env)
    try:
        metadata.distribution("advisor")
    except metadata.PackageNotFoundError:
        # NOTE: running from a source tree without an install: the child must still import us.
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), root) if p)
    return env


class EventRelay:
    """Tails the child's ``events.jsonl`` on a thread and hands each event to ``progress``."""

    def __init__(self, path: Path, progress: ProgressCallback | None) -> None:
        self.path = path
        self.progress = progress
        self.last: ProgressEvent | None = None
        self.on_phase: Callable[[Phase], None] | None = None  # each event's phase, first (the GPU sampler's window)
        self._stop = threading.Event()
        self._offset = 0
        self._thread = threading.Thread(target=self._loop, name="advisor-events", daemon=True)

    def start(self) -> None:
        """Start tailing."""
        self._thread.start()

    def stop(self) -> None:
        """Stop, after relaying whatever the child wrote last."""
        self._stop.set()
        self._thread.join(timeout=5)
        self._read()

    def _loop(self) -> None:
        while not self._stop.wait(_POLL_S):
            self._read()

    def _read(self) -> None:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except OSError:
            return
        end = data.rfind(b"\n")
        if end < 0:
            return
        self._offset += end + 1  # a half-written last line waits for the next read
        for line in data[: end + 1].splitlines():
            try:
                event = from_dict(ProgressEvent, json.loads(line))
            except (ValueError, TypeError):
                continue
            if event.phase == Phase.DONE:
                continue  # the parent sends the final event itself, with the final status
            self.last = event
            if self.on_phase is not None:
                self.on_phase(event.phase)
            if self.progress is not None:
                try:
                    self.progress(event)
                except Exception:  # noqa: BLE001 - a broken display must not end the capture
                    self.progress = None


Spawn = Callable[[list[str], RunSpec, Any, Any], Any]
"""Starts the child instead of Popen: ``(cmd, spec, stdout, stderr) -> a Popen-like process`` (the warm start)."""


@contextlib.contextmanager
def started(
    cmd: list[str], spec: RunSpec, run_dir: Path, spawn: Spawn | None = None,
) -> Iterator[tuple[subprocess.Popen[bytes], ProcessTree]]:
    """Start the child in its own process group; whatever happens, leave no process of it behind.

    Yields the process and its :class:`ProcessTree`, which the caller refreshes while waiting.
    ``spawn`` starts it instead of Popen (a fork from the warm-start server), with the same logs.
    """
    try:
        logs = (run_dir / STDOUT_LOG).open("wb"), (run_dir / STDERR_LOG).open("wb")
    except OSError as exc:
        raise InputError(f"cannot create the logs in {run_dir} ({exc.strerror or exc}); choose another --out") from exc
    with logs[0] as out, logs[1] as err:
        proc = spawn(cmd, spec, out, err) if spawn is not None else subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=str(spec.cwd) if spec.cwd is not None else None,
            env=child_env(spec),
            # NOTE: its own process group (we end it whole; the terminal's ^C is ours) in the
            # user's session, never a session of its own (advisor._proc: Linux autogroup ran a
            # two-thread script 25x slower so); SIGTERM if advisor dies outright (torchrun too).
            preexec_fn=own_group,  # noqa: PLW1509 - setpgid and prctl only
        )
    tree = ProcessTree(proc.pid)
    try:
        yield proc, tree
    finally:
        tree.refresh()
        # NOTE: DataLoader workers (or anything the script started) may outlive the child; what
        # their exit would have removed goes with them (advisor._listeners).
        left = tree.listener_dirs()
        if proc.poll() is None:
            kill_group(proc.pid)
            proc.wait()
        kill_group(proc.pid)
        tree.kill_all()
        remove_listener_dirs(left)


def capture(spec: RunSpec, progress: ProgressCallback | None = None, warm: Any = None) -> RunCapture:
    """Run ``spec.script`` in a child process, measured, and return (and save) its capture.

    Args:
        spec: What to run and how (phases, timeout, fixes, seed, output folder).
        progress: Called from a background thread with each :class:`ProgressEvent` (phase,
            steps, elapsed); the first has phase ``starting``, the last ``done``.
        warm: A running :class:`advisor.capture.warm.WarmServer` to fork the child from
            instead of starting a fresh interpreter (the caller checked it accepts ``spec``).

    Returns:
        The :class:`RunCapture`, also saved as ``<spec.out_dir>/capture.json``. Script failures
        (crash, timeout, no steps) are its ``status``, never an exception.

    Raises:
        UsageError: The script is missing or not Python, or the spec is invalid.
        WarmStartLost: The warm-start server died before the run ended (run it again cold).
    """
    script = validate_script(spec.script)
    validate_spec(spec)
    run_dir = prepare_run_dir(spec.out_dir)
    spec_for_child = {**to_jsonable(spec), "script": str(script)}
    # NOTE: the pid tells `advisor runs` whether a run without capture.json is still capturing
    # or was killed outright (SIGKILL, OOM) before it could save anything.
    dump_json({"spec": spec_for_child, "run_dir": str(run_dir), "pid": os.getpid()}, run_dir / CONFIG_FILE)
    cmd = [sys.executable, *PYTHON_FLAGS, "-m", "advisor.capture.child", str(run_dir / CONFIG_FILE)]

    if progress is not None:
        progress(ProgressEvent(phase=Phase.STARTING, steps_total=steps_total(spec)))
    relay = EventRelay(run_dir / EVENTS_FILE, progress)
    timed_out = False
    ended_by: str | None = None
    interrupt: KeyboardInterrupt | None = None
    start = time.perf_counter()
    with started(cmd, spec, run_dir, warm.popen if warm is not None else None) as (proc, tree):
        sampler = UtilSampler(proc.pid, SAMPLE_INTERVAL_S)
        relay.on_phase = lambda phase: sampler.timing(phase == Phase.TIMED)
        sampler.start()
        relay.start()
        try:
            ended_by = _wait(proc, spec.timeout_s, start, tree, spec.memory_budget_bytes, run_dir)
            timed_out = ended_by == "timeout"
        except KeyboardInterrupt as exc:  # ^C, or SIGTERM/SIGHUP (advisor._proc.interrupt_once)
            interrupt = exc
            _ask_to_save(proc, tree)
        finally:
            wall_s = time.perf_counter() - start
            cpu, gpu = sampler.stop()
            relay.stop()
    if getattr(proc, "lost", False):
        raise WarmStartLost(f"the warm-start server died during the run in {run_dir}")
    result = _merge(spec, script, run_dir, proc.returncode, timed_out, wall_s, cpu, gpu, interrupt,
                    over_memory=tree.over_budget if ended_by == "memory" else None, warm=warm)
    result.save(run_dir)
    if interrupt is not None:
        raise interrupt
    report_done(progress, relay, spec, result, wall_s)
    return result


def interrupted_error(interrupt: KeyboardInterrupt, steps_seen: int) -> ScriptError:
    """Build the error recorded for a capture advisor was interrupted in (also used by advisor.distributed.launch)."""
    how = f"by {interrupt.args[0]}" if isinstance(interrupt, Interrupted) else "by Ctrl-C (SIGINT)"
    return ScriptError(
        type="Interrupted",
        message=f"advisor was interrupted {how} after {steps_seen} steps; the capture holds what was measured",
        step=steps_seen + 1,
    )


def report_done(
    progress: ProgressCallback | None, relay: EventRelay, spec: RunSpec, result: RunCapture, wall_s: float
) -> None:
    """Send the final ``done`` event (also used by the torchrun launcher, advisor.distributed.launch)."""
    if progress is None:
        return
    last = relay.last
    bound = result.trace_bound
    cut = bound.asked_steps - bound.steps if bound is not None else 0  # steps the trace's budget dropped
    progress(
        ProgressEvent(
            phase=Phase.DONE,
            step=result.steps_seen,
            steps_total=steps_total(spec) - max(0, cut),
            phase_step=last.phase_step if last else 0,
            phase_steps=last.phase_steps if last else 0,
            elapsed_s=round(wall_s, 3),
            message=result.status,
        )
    )


def steps_total(spec: RunSpec) -> int:
    """Count the steps the capture asks for, with the two the trace budget's probe takes (advisor.capture.budget)."""
    return Phases.for_spec(spec).total + PROBE_STEPS * int(spec.trace_budget_bytes is not None and spec.profiled_steps > 0)


def _wait(
    proc: subprocess.Popen[bytes], timeout_s: float | None, start: float, tree: ProcessTree,
    memory_budget: int | None = None, run_dir: Path | None = None,
) -> str | None:
    """Wait for the child; on timeout, or memory over budget, ask it to save (SIGTERM), then kill.

    Returns:
        None when the child ended by itself, ``"timeout"`` or ``"memory"`` when it was stopped
        (the process tree's memory over ``memory_budget``, checked every poll: the
        ``--memory-budget`` watchdog of a CPU run; the memory seen, shared pages counted once
        (:meth:`ProcessTree.memory_bytes`), is left in ``tree.over_budget``). A run whose child
        capped CUDA's memory instead (:mod:`advisor.capture.cuda_budget`) is not watched.
    """
    deadline = None if timeout_s is None else start + timeout_s
    while True:
        tree.refresh()
        if memory_budget is not None and run_dir is not None and cuda_budget.capped(run_dir):
            memory_budget = None
        if memory_budget is not None:
            # NOTE: the RSS sum bounds memory_bytes from above: only a tree whose RSS is over the
            # budget pays for reading USS (~3 ms per process a poll, against ~20 us for RSS).
            if tree.rss_bytes() > memory_budget and (held := tree.memory_bytes()) > memory_budget:
                tree.over_budget = held
                _ask_to_save(proc, tree)
                return "memory"
        remaining = _POLL_S if deadline is None else min(_POLL_S, deadline - time.perf_counter())
        if remaining <= 0:
            break
        try:
            proc.wait(timeout=remaining)
            return None
        except subprocess.TimeoutExpired:
            continue
    _ask_to_save(proc, tree)
    return "timeout"


def _ask_to_save(proc: subprocess.Popen[bytes], tree: ProcessTree) -> None:
    """SIGTERM the child alone (its handler closes the profiler and writes child.json), then kill.

    The process group (DataLoader workers included) is killed afterwards by :func:`started`. A
    second ^C while waiting shortens the grace to a last moment for the save (:func:`stop_child`).
    """
    tree.refresh()
    stop_child(proc, TERM_GRACE_S)


def _merge(
    spec: RunSpec,
    script: Path,
    run_dir: Path,
    returncode: int | None,
    timed_out: bool,
    wall_s: float,
    cpu: Any,
    gpu: Any,
    interrupt: KeyboardInterrupt | None = None,
    over_memory: int | None = None,
    warm: Any = None,
) -> RunCapture:
    """Combine what the child wrote with what only the parent knows into one RunCapture."""
    child = rundir.read_child(run_dir) or {}
    notes: list[str] = list(child.get("notes") or [])
    steps_seen = int(child.get("steps_seen") or 0)
    status = child.get("status")
    error = child.get("error")
    exit_code = child.get("exit_code")
    if interrupt is not None:
        status = RunStatus.INTERRUPTED
        exit_code = returncode
        error = to_jsonable(interrupted_error(interrupt, steps_seen))
    elif over_memory is not None:
        status = RunStatus.CRASHED
        exit_code = returncode
        error = to_jsonable(ScriptError(
            type=OUT_OF_MEMORY,
            message=f"the script's processes held {over_memory / 2**20:.0f} MiB, over the memory budget of "
            f"{(spec.memory_budget_bytes or 0) / 2**20:.0f} MiB, and were stopped after {steps_seen} steps",
            step=steps_seen + 1,
        ))
    elif timed_out:
        status = RunStatus.TIMEOUT
        exit_code = returncode
        error = to_jsonable(
            ScriptError(
                type="Timeout",
                message=f"the script was still running after --timeout {spec.timeout_s:g} s "
                f"and was stopped after {steps_seen} steps",
                step=steps_seen + 1,
            )
        )
        if not child.get("finished"):
            notes.append(
                "the script did not respond to the stop request; the capture holds what was "
                "saved at the last phase change"
            )
    elif not child.get("finished"):
        status = RunStatus.CRASHED
        exit_code = returncode
        if returncode is not None and returncode < 0:
            name = signal.Signals(-returncode).name
            message = f"the script's process was killed by {name}"
            if -returncode == signal.SIGKILL:
                message += " (out of memory?)"
            error_type = "ProcessKilled"
        else:
            message = f"the capture process exited with code {returncode} before saving results"
            error_type = "ProcessDied"
        error = to_jsonable(ScriptError(type=error_type, message=message, step=steps_seen + 1))
    if status == RunStatus.CRASHED and steps_seen == 0 and isinstance(error, dict):
        error = {**error, "last_line": last_stderr_line(run_dir / STDERR_LOG)}
    env = child.get("environment") or to_jsonable(environment())
    if gpu.note and env.get("device") != "cpu":
        # NOTE: a CPU run has no GPU to sample; "GPU not sampled: NVML Shared Library Not Found"
        # on every CPU run was noise (issue #32). On a GPU run it says why utilisation is missing.
        notes.append(gpu.note)
    if spec.memory_budget_bytes and (note := cuda_budget.note(run_dir)):
        notes.append(note)
    env["git_commit"] = git_commit(script.parent)
    merged = {
        **child,
        "run_dir": str(run_dir),
        "script": str(script),
        "args": list(spec.args),
        "status": status,
        "exit_code": exit_code,
        "error": error,
        "environment": env,
        "cpu": to_jsonable(cpu),
        "gpu": to_jsonable(gpu),
        "fixes": to_jsonable(spec.fixes),
        "stdout_log": STDOUT_LOG,
        "stderr_log": STDERR_LOG,
        "events_file": EVENTS_FILE,
        "wall_s": round(wall_s, 4),
        "notes": list(dict.fromkeys(notes)),
        "start": StartKind.COLD if warm is None else StartKind.WARM,
        "memory_budget_bytes": spec.memory_budget_bytes,
    }
    if isinstance(child.get("phases_s"), dict) and isinstance(child.get("wall_s"), (int, float)):
        # NOTE: the child's clock starts at its first line: the rest of the parent's wall time
        # is the interpreter starting and exiting (and the process group ending).
        merged["phases_s"] = {"process": round(max(wall_s - child["wall_s"], 0.0), 4), **child["phases_s"]}
    if "peak_memory_bytes" not in child and cpu.peak_memory_bytes is not None:
        merged["peak_memory_bytes"] = cpu.peak_memory_bytes
        merged["memory_kind"] = MemoryKind.RSS
    return from_dict(RunCapture, merged)
