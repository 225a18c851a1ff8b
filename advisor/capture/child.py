"""The capture child: ``python -m advisor.capture.child CONFIG.json`` runs one script, measured.

The parent (:mod:`advisor.capture.run`) writes CONFIG (``{"spec": RunSpec, "run_dir": ...}``)
and starts this module in its own process group. Here, and only here, hooks are installed:

1. optional seeding (random, numpy, torch), the torch hooks (:mod:`advisor.capture.hooks`),
   then the run-time fixes, through the installer modules the spec names
   (``RunSpec.fix_installers``, imported by name: capture imports nothing of the fix stage);
2. the script runs unmodified through ``runpy.run_path(script, run_name="__main__")`` with
   ``sys.argv = [script, *args]`` and ``sys.path[0]`` = the script's folder, as Python sets them;
3. the :class:`~advisor.capture.recorder.StepRecorder` walks the phases; torch.profiler writes
   ``traces/<host>_<pid>.<ns>.pt.trace.json.gz`` (TensorBoard layout, gzip-compressed), cProfile
   ``profile.pstats``;
4. ``child.json`` (RunCapture field names plus ``phase`` and ``finished``) is rewritten at every
   phase change and at the end, so a crash or a hang loses nothing already measured;
   ``events.jsonl`` gets one JSON line per step for the parent's live progress.

With ``WORLD_SIZE`` > 1 (torchrun) each rank writes into ``<run_dir>/rank<RANK>/``.
Exit code: 0 when stopped or finished, the script's code on ``sys.exit(n)``, 1 when it raised.
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()  # NOTE: first, so time to first step includes every import below

import atexit  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import runpy  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from advisor._proc import (  # noqa: E402
    become_subreaper,
    die_with_parent,
    end_own_children,
    exit_code_of,
    quick_exit,
)
from advisor._serde import dump_json, from_dict, to_jsonable  # noqa: E402
from advisor.capture import cuda_budget  # noqa: E402
from advisor.capture.budget import TraceProbe  # noqa: E402
from advisor.capture.edge_sync import sync_at_window_edges  # noqa: E402
from advisor.capture.environment import environment, peak_memory  # noqa: E402
from advisor.capture.kernel_use import AfterWorkMeter, KernelMeter  # noqa: E402
from advisor.capture.model import (  # noqa: E402
    Phase,
    RunSpec,
    RunStatus,
    ScriptError,
)
from advisor.capture.phases import Phases, StopScript  # noqa: E402
from advisor.capture.profilers import CProfileControl, TorchProfilerControl  # noqa: E402
from advisor.capture.recorder import StepRecorder  # noqa: E402
from advisor.capture.scriptconfig import ConfigRecorder  # noqa: E402
from advisor.capture.stopping import StopSignalKept, caused_by_stop, end_children_now, leave  # noqa: E402
from advisor.capture.syspath import put_first  # noqa: E402
from advisor.capture.timeline import with_last_export  # noqa: E402
from advisor.capture.warm_preload import lazy_imported  # noqa: E402
from advisor.rundir import CHILD_FILE, EVENTS_FILE, PSTATS_FILE, TRACES_DIR, rank_dir_name  # noqa: E402

EVENT_INTERVAL_S = 0.1  # at most this often a progress line within a phase

NO_STEPS_NOTE = (
    "no training step was seen: advisor counts a step at each torch.optim optimizer step, else "
    "at each backward() call, else at each call of the outermost nn.Module, else at each "
    "DataLoader batch, and the script did none of these; in such a loop call `advisor.step()` "
    "at the end of every step (`import advisor`; it does nothing outside advisor)"
)


class _Terminated(BaseException):
    """Raised by the SIGTERM handler: the parent's --timeout ended the run."""


def rank_dir(run_dir: Path, environ: dict[str, str] | os._Environ[str] = os.environ) -> Path:
    """Where this process writes: the run directory, or ``rank<N>/`` in it under torchrun."""
    if int(environ.get("WORLD_SIZE", "1") or 1) > 1:
        return run_dir / rank_dir_name(int(environ.get("RANK", "0") or 0))
    return run_dir


def seed_everything(seed: int) -> None:
    """Seed random, numpy (when importable) and torch (all devices)."""
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass
    import torch

    torch.manual_seed(seed)


class ChildSession:
    """One script run inside the child process."""

    def __init__(self, spec: RunSpec, run_dir: Path, t0: float = _T0) -> None:
        self.spec = spec
        self.run_dir = run_dir
        self.out = rank_dir(run_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.t0 = t0
        self.script = str(Path(spec.script).resolve())
        self.trace_files: list[str] = []
        self.results: dict[str, Any] = {"pstats_file": None}
        self.notes: list[str] = []
        self.fix_notes: dict[str, Any] = {}
        self.error: ScriptError | None = None
        self.status = "running"
        self.exit_code: int | None = None
        self.recorder = StepRecorder(
            phases=Phases.for_spec(spec),
            profiler=TorchProfilerControl(self.out / TRACES_DIR, run_dir, self.trace_files, self.notes),
            cprofiler=CProfileControl(self.out / PSTATS_FILE, run_dir, self.results),
            start_time=t0,
            on_step=self._on_step,
            on_phase=self._on_phase,
            graph_count=_graphs_compiled,
            edge_sync=sync_at_window_edges,
            record_loss_steps=max(0, spec.record_loss_steps),
        )
        self.kernel = KernelMeter()
        self.after_work = AfterWorkMeter()
        self.probe: TraceProbe | None = None
        self.lazy: tuple[str, ...] | None = None  # warm_preload.lazy_imported() at the first step's end
        self.last_export_s = 0.0  # the last window's close after the stop (timeline.with_last_export)
        if spec.trace_budget_bytes is not None and spec.profiled_steps > 0:
            self.probe = TraceProbe(self.recorder.profiler, spec.trace_budget_bytes, self.out / "trace-probe.json",
                                    self.notes, export_budget_s=spec.trace_export_s)
        self.hooks: Any = None
        self.script_config = ConfigRecorder(self.script, list(spec.args))
        self._last_event: tuple[str, int, int] | None = None
        self._last_event_t = 0.0
        self._events = os.open(
            self.out / EVENTS_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
        )

    # ----- progress and partial results --------------------------------------------------------

    def _event(self, phase: str, message: str = "", force: bool = True) -> None:
        rec = self.recorder
        done, asked = rec.phase_progress()
        key = (phase, rec.steps_seen, done)
        if key == self._last_event:
            return  # a phase change inside a step reports once
        now = time.perf_counter()
        if not force and now - self._last_event_t < EVENT_INTERVAL_S:
            return  # NOTE: a line per step costs ~50 us on a busy machine; 10 per second is plenty
        self._last_event, self._last_event_t = key, now
        line = json.dumps(
            {
                "phase": phase,
                "step": rec.steps_seen,
                "steps_total": rec.phases.total,
                "phase_step": done,
                "phase_steps": asked,
                "elapsed_s": round(now - self.t0, 3),
                "message": message,
            }
        )
        try:
            os.write(self._events, (line + "\n").encode())
        except OSError:
            pass  # progress is best effort; the measurements are not

    def _on_step(self, rec: StepRecorder) -> None:
        self.after_work.on_step(rec.steps_seen, rec.between.work_steps(), rec.phase in (Phase.PROFILED, Phase.CPROFILE))
        if self.lazy is None:  # at the first step: before any profiler, which imports torch._dynamo itself
            self.lazy = lazy_imported()
        if self.probe is not None:
            self.probe.on_event(rec)
        self._event(rec.phase, force=False)
        if rec.stop_requested and self._ends_children_first(rec):
            end_children_now()

    def _ends_children_first(self, rec: StepRecorder) -> bool:
        """Whether the script's processes end before its stop unwinds it: a run that profiles nothing.

        A DataLoader iterator's clean-up waits for each worker to finish the batch in hand: 0.05-0.12 s
        of each fix trial with workers (1.0 s of the demo's diagnose), for a run whose
        measurements are complete; killed, they are joined at once. A profiled run's last window
        and its clean-up are left as they were, and a job's ranks end alike (their collectives).
        """
        p = rec.phases
        return not (p.full or p.profiled or p.cprofile or self.out != self.run_dir)

    def _on_phase(self, rec: StepRecorder) -> None:
        self.kernel.on_phase(rec.phase, rec.step_times_ms)  # first: the window ends before our own work
        if self.probe is not None:
            self.probe.on_event(rec)
        if rec.phase != Phase.WARMUP:
            # NOTE: the script's globals exist only while it runs (runpy's temporary __main__);
            # by the first step after warm-up a configurator has long applied its overrides.
            main = sys.modules.get("__main__")
            if main is not None and getattr(main, "__file__", None) == self.script:
                self.script_config.read_globals(vars(main))
        self.write(finished=False)
        if rec.phase in (Phase.PROFILED, Phase.CPROFILE) and not rec.phases.asked(rec.phase):
            return  # NOTE: a phase asked with 0 steps (every fix trial's profilers) is passed through, not shown
        self._event(rec.phase)

    def write(self, finished: bool) -> None:
        """Write ``child.json`` (atomically): everything measured so far."""
        rec = self.recorder
        namer = getattr(rec.profiler, "namer", None)
        data: dict[str, Any] = {
            **rec.snapshot(),
            "status": self.status,
            "exit_code": self.exit_code,
            "error": self.error,
            "fix_notes": dict(self.fix_notes),
            "trace_files": list(self.trace_files),
            "pstats_file": self.results["pstats_file"],
            "dataloaders": list(self.hooks.dataloaders) if self.hooks is not None else [],
            "script_config": self.script_config.config(),
            "notes": [*self.notes, *rec.notes, *rec.between.notes],
            "phase": rec.phase,
            "finished": finished,
            "pid": os.getpid(),
            "wall_s": round(time.perf_counter() - self.t0, 4),
            "module_names": dict(namer.names) if namer is not None else {},
            "between_steps": rec.between.records(),
            "epoch_gaps": list(rec.between.epoch_gaps),
            "run_hints": dict(rec.between.hints),
            "epoch_batches": rec.between.train_batches or None,
            "trace_bound": self.probe.record() if self.probe is not None else None,
            "lazy_imports": None if self.lazy is None else list(self.lazy),
            "kernel": self.kernel.record(),
            "faults_after_work": list(self.after_work.records),
        }
        data["phases_s"] = with_last_export(data.get("phases_s") or {}, self.last_export_s)
        if finished:
            peak, kind = peak_memory()
            data.update(peak_memory_bytes=peak, memory_kind=kind, environment=environment())
            try:
                from advisor.capture.usercode import user_code_now

                data["user_code"] = user_code_now([self.script])
            except Exception as exc:  # noqa: BLE001 - locations fall back to the name heuristic
                self.notes.append(f"the user-code policy could not be recorded ({exc})")
        dump_json(to_jsonable(data), self.out / CHILD_FILE)

    # ----- the run -----------------------------------------------------------------------------

    def _prepare(self) -> None:
        """Seed, install the hooks and the run-time fixes (before the script runs)."""
        if self.spec.seed is not None:
            seed_everything(self.spec.seed)
        # NOTE: platform.processor() runs `uname -p` once and caches it; environment() asks at
        # the end, when a fork of this process (its pages counted twice in the tree's resident
        # memory) put a checkpointed run 300 MiB over its --memory-budget. Asked now, it is small.
        platform.processor()
        from advisor.capture.hooks import TorchHooks

        self.script_config.install()
        self.hooks = TorchHooks(self.recorder)
        self.hooks.install()
        profiler = self.recorder.profiler
        if isinstance(profiler, TorchProfilerControl):
            profiler.call_sites = self.hooks.call_sites
        if self.spec.memory_budget_bytes:
            cuda_budget.install(self.spec.memory_budget_bytes, self.run_dir)
        if self.spec.fixes:
            self._install_fixes()

    def _install_fixes(self) -> None:
        """Import the installers the spec names and let them apply the fixes.

        NOTE: capture knows nothing of the fix stage: the parent names the installer modules
        (``RunSpec.fix_installers``), each exposing ``install(fixes) -> dict`` of notes.
        """
        if not self.spec.fix_installers:
            msg = "not applied: the run asked for fixes but named no installer"
            self.fix_notes = {fix.id: msg for fix in self.spec.fixes}
            self.notes.append("run-time fixes were asked for but no installer was named")
            return
        notes: dict[str, Any] = {}
        for name in self.spec.fix_installers:
            try:
                installer = importlib.import_module(name)
            except ImportError as exc:
                msg = f"not applied: the fix runtime is unavailable ({exc})"
                notes.update({fix.id: msg for fix in self.spec.fixes if fix.id not in notes})
                self.notes.append(f"run-time fixes were asked for but not applied ({exc})")
                continue
            # NOTE: a live dict: fixes update their notes as the script reaches them.
            live = installer.install(self.spec.fixes)
            notes = live if not notes else {**notes, **live}
        self.fix_notes = notes

    def run(self) -> int:
        """Run the script measured; return the exit code (see the module docstring)."""
        for stream in (sys.stdout, sys.stderr):
            # NOTE: line-buffered like a terminal, so the logs can be followed while it runs and
            # a kill loses at most a partial line.
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(line_buffering=True)
        signal.signal(signal.SIGTERM, _on_sigterm)
        keep = StopSignalKept()
        self.write(finished=False)
        outcome, exc = "ended", None
        try:
            self._prepare()
            sys.argv = [self.script, *self.spec.args]
            self.recorder.script_started()
            if self.spec.module:
                # NOTE: as `python -m`: the working directory first on sys.path.
                put_first(os.getcwd())
                runpy.run_module(self.spec.module, run_name="__main__", alter_sys=True)
            else:
                put_first(os.path.dirname(self.script))
                runpy.run_path(self.script, run_name="__main__")
        except StopScript:
            outcome = "stopped"
        except SystemExit as e:
            outcome, exc = "exit", e
        except _Terminated:
            outcome = "terminated"
        except BaseException as e:  # noqa: BLE001 - anything the script raises is recorded
            outcome, exc = "crashed", e
            if self.recorder.stop_requested and caused_by_stop(e):
                outcome = "stopped"  # the script's own cleanup raised while we stopped it
        keep.restore()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # finishing: let the export complete
        return self._finish(outcome, exc)

    def _finish(self, outcome: str, exc: BaseException | None) -> int:
        rec = self.recorder
        code = 0
        if outcome == "exit" and exc is not None:
            code = exit_code_of(exc)  # type: ignore[arg-type]
            if code != 0 and rec.steps_seen == 0:
                # NOTE: sys.exit(n) before any step (argparse rejecting its arguments, a
                # missing file the script checks for) is the script failing, not a short run.
                outcome = "crashed"
                self.error = ScriptError(
                    type="SystemExit",
                    message=f"the script exited with code {code} before its first step",
                    log="stderr.log",
                    step=1,
                )
        elif outcome == "crashed" and exc is not None and self.error is None:
            code = 1
            _print_script_traceback(exc, self.script)
            self.error = ScriptError(
                type=type(exc).__name__,
                message=_one_line(str(exc)),
                log="stderr.log",
                step=rec.steps_seen + 1,
            )
        if outcome == "terminated":
            # NOTE: a SIGTERM (advisor killed outright, a timeout, torchrun ending the job) gives
            # this process a grace before SIGKILL; the script's processes are ended first, so
            # that a slow export on a busy machine cannot leave them behind (a setsid'd one whose
            # parent is gone is no longer anyone's to end).
            end_own_children()
        try:
            if self.probe is not None:
                self.probe.close(rec)
            closing = time.perf_counter()
            rec.finish()
            self.last_export_s = time.perf_counter() - closing
        except Exception as e:  # noqa: BLE001 - keep what was measured even if export fails
            self.notes.append(f"closing the profiler failed: {e}")
        if self.hooks is not None:
            self.hooks.uninstall()
        self.script_config.uninstall()
        self.exit_code = code
        self.status = {
            "stopped": RunStatus.STOPPED,
            "crashed": RunStatus.CRASHED,
            "terminated": RunStatus.TIMEOUT,
        }.get(outcome, RunStatus.COMPLETED)
        if self.status == RunStatus.COMPLETED and rec.steps_seen == 0:
            self.status = RunStatus.NO_STEPS
        if self.status == RunStatus.NO_STEPS:
            self.notes.append(NO_STEPS_NOTE)
        elif rec.steps_seen == 0:
            pass  # crashed or timed out before a step: the error says why
        elif outcome in ("ended", "exit", "crashed") and rec.phase != Phase.FINISHING:
            p = rec.phases
            self.notes.append(
                f"the script ended after {rec.steps_seen} steps, fewer than the {p.total} asked "
                f"(warm-up {p.warmup}, timed {p.timed}, profiled {p.profiled}, cProfile "
                f"{p.cprofile}): the analysis covers the steps that ran"
            )
        if rec.source is not None and rec.source != "optimizer":
            self.notes.append(f"steps were counted from {rec.source}: {rec.source_reason()}")
        self.write(finished=True)
        self._event(Phase.DONE, self.status)
        os.close(self._events)
        return code


def _on_sigterm(_signum: int, _frame: Any) -> None:
    raise _Terminated()


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _print_script_traceback(exc: BaseException, script: str) -> None:
    """Print the traceback as Python would, starting at the script's frame (no runpy frames)."""
    tb = exc.__traceback__
    while tb is not None and os.path.realpath(tb.tb_frame.f_code.co_filename) != script:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb or exc.__traceback__, file=sys.stderr)


def main(argv: list[str] | None = None, t0: float = _T0) -> None:
    """Entry point: ``python -m advisor.capture.child CONFIG.json``.

    ``t0`` is when the child started: this module's first line, or the fork of a warm start
    (:mod:`advisor.capture.warm`), whose child comes here with everything already imported.
    """
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m advisor.capture.child CONFIG.json", file=sys.stderr)
        raise SystemExit(2)
    # NOTE: we run in our own session (advisor's Ctrl-C handling stops us in order); if advisor
    # is killed outright, SIGTERM us too -- the same stop as a timeout: the trace is saved and
    # the script does not train on unobserved.
    die_with_parent(signal.SIGTERM)
    # NOTE: what the script orphans (a daemon in a session of its own) becomes ours, not init's,
    # and this atexit hook ends it when we exit (the results are written by then); the parent's
    # group and tree sweeps cannot see such a process once it left our group and our tree.
    if become_subreaper():
        atexit.register(end_own_children)  # DataLoader workers, the script's own subprocesses
    config = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    spec = from_dict(RunSpec, config["spec"])
    session = ChildSession(spec, Path(config["run_dir"]), t0)
    code = session.run()
    if session.status in (RunStatus.STOPPED, RunStatus.TIMEOUT):
        leave(code)  # advisor cut the script short: no interpreter shutdown (capture.stopping.leave)
    if not spec.full:
        quick_exit(code)  # the script ended by itself: its exit, less the second of teardown
    raise SystemExit(code)


def _graphs_compiled() -> int:
    """Graphs torch.compile has compiled in this process (dynamo's counter; 0 when dynamo was never imported)."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    if counters is None:
        return 0
    try:
        return int(counters["stats"].get("unique_graphs", 0))
    except (KeyError, TypeError, ValueError, AttributeError):
        return 0


if __name__ == "__main__":
    main()

