"""Issue #16: the diagnosis and every finished trial survive a stopped diagnose.

In-process: the fix loop saved around (``advisor.api``), ``advisor runs`` telling running,
interrupted and killed runs apart, and ``advisor report`` rendering an interrupted report.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.api import fixloop as api
from advisor.capture.model import RunSpec
from advisor.cli.main import cli
from advisor.engine.model import Diagnosis
from advisor.errors import EXIT_INTERRUPTED, Interrupted
from advisor.fixes.model import FixOutcome, Trial
from advisor.report.model import Report, ReportStatus
from advisor.report.runs import list_runs

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "report.json"

DONE = Trial(fix="pin_memory", safety="safe", verdict="improved", speedup=1.3, repeats=3)
OPEN = Trial(fix="dataloader_workers", safety="safe", verdict="no_effect", speedup=1.1, repeats=1,
             reason="unfinished: 1 of 3 planned pairs measured so far", unfinished=True)


def _base() -> Report:
    return dataclasses.replace(Report.load(GOLDEN), trials=(), combined=None, kept_fixes=(), diff="")


def _loop(tmp_path: Path) -> Report:
    spec = RunSpec(script=tmp_path / "train.py", out_dir=tmp_path)
    base = dataclasses.replace(_base(), timing={"capture_s": 4.0, "phases_s": {"imports": 2.0, "timed": 1.0}})
    return api._fix_loop_saved(base, spec, Diagnosis((), None, {}), api.FixOptions(), None, tmp_path,
                               time.perf_counter() - 10.0)


def test_the_report_is_saved_before_the_trials_and_interrupted_with_what_finished(tmp_path, monkeypatch):
    on_disk: list[Report] = []

    def fake_try_fixes(spec, diagnosis, options, progress=None, checkpoint=None, server=None, gpu_busy=None):  # type: ignore[no-untyped-def]
        on_disk.append(Report.load(tmp_path))  # written before the first trial run
        checkpoint(FixOutcome(trials=(DONE, OPEN)))
        on_disk.append(Report.load(tmp_path))
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "try_fixes", fake_try_fixes)
    with pytest.raises(Interrupted) as err:
        _loop(tmp_path)
    assert err.value.exit_code == EXIT_INTERRUPTED == 130
    assert "1 finished trial(s)" in err.value.message and str(tmp_path) in err.value.message
    before, during = on_disk
    assert before.status == ReportStatus.RUNNING and before.pid == os.getpid() and before.trials == ()
    assert before.findings == _base().findings  # the diagnosis is there from the start
    assert during.status == ReportStatus.RUNNING and [t.fix for t in during.trials] == ["pin_memory", "dataloader_workers"]
    final = Report.load(tmp_path)
    assert final.status == ReportStatus.INTERRUPTED and final.pid is None
    assert final.trials == (DONE, OPEN) and final.kept_fixes == ()
    assert not list(tmp_path.glob("*.tmp"))  # every write was atomic


def test_a_stop_signal_whose_interrupt_was_swallowed_still_stops_the_loop_at_the_next_run(tmp_path, monkeypatch):
    import signal

    runs_after: list[int] = []

    def fake_try_fixes(spec, diagnosis, options, progress=None, checkpoint=None, server=None, gpu_busy=None):  # type: ignore[no-untyped-def]
        checkpoint(FixOutcome(trials=(DONE,)))
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # handled in this thread, before the next line
            time.sleep(0)
        except KeyboardInterrupt:
            pass  # swallowed, as Python does in a __del__ ("Exception ignored in ...")
        runs_after.append(1)
        checkpoint(FixOutcome(trials=(DONE, OPEN)))  # the next run ends: the stop request holds
        runs_after.append(2)
        return FixOutcome(trials=(DONE, OPEN))

    monkeypatch.setattr(api, "try_fixes", fake_try_fixes)
    with pytest.raises(Interrupted) as err:
        _loop(tmp_path)
    assert err.value.exit_code == 128 + signal.SIGTERM  # as a SIGTERM in the capture exits (issue #30)
    assert runs_after == [1]
    final = Report.load(tmp_path)
    assert final.status == ReportStatus.INTERRUPTED and final.trials == (DONE, OPEN)


def test_a_finished_loop_saves_a_complete_report(tmp_path, monkeypatch):
    def fake_try_fixes(spec, diagnosis, options, progress=None, checkpoint=None, server=None, gpu_busy=None):  # type: ignore[no-untyped-def]
        checkpoint(FixOutcome(trials=(OPEN,)))
        return FixOutcome(trials=(DONE,), kept=("pin_memory",), combined=DONE, runs=3, wall_s=5.0,
                          phases_s={"process": 0.5, "imports": 1.5, "timed": 2.0})

    monkeypatch.setattr(api, "try_fixes", fake_try_fixes)
    report = _loop(tmp_path)
    assert report.status == ReportStatus.COMPLETE and report.pid is None and report.kept_fixes == ("pin_memory",)
    timing = report.timing  # the capture's phases and the trial runs' add up
    assert timing["trial_runs"] == 3 and timing["trials_s"] == 5.0 and timing["capture_s"] == 4.0
    assert timing["phases_s"] == {"imports": 3.5, "timed": 3.0, "process": 0.5}
    assert timing["measured_s"] == 3.0
    assert timing["total_s"] >= 10.0 and timing["overhead_s"] == pytest.approx(timing["total_s"] - 3.0, abs=1e-3)
    report.save(tmp_path)  # as diagnose_script does
    shown = CliRunner().invoke(cli, ["report", str(tmp_path)], terminal_width=300)
    assert f"Diagnose took {timing['total_s']:.1f} s (capture 4.0 s, 3 trial runs 5.0 s); overhead" in shown.output


def _saved(root: Path, name: str, **changes: object) -> None:
    run_dir = root / name
    run_dir.mkdir(parents=True)
    dataclasses.replace(_base(), trials=(DONE, OPEN), **changes).save(run_dir)


@pytest.mark.e2e
def test_runs_tells_running_interrupted_and_killed_apart(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that existed and is gone now
    _saved(tmp_path, "a-running", status=ReportStatus.RUNNING, pid=os.getpid())
    _saved(tmp_path, "b-killed", status=ReportStatus.RUNNING, pid=dead.pid)
    _saved(tmp_path, "c-interrupted", status=ReportStatus.INTERRUPTED)
    _saved(tmp_path, "d-complete")
    status = {r.name: r.status for r in list_runs(tmp_path)}
    assert status == {
        "a-running": "running", "b-killed": "killed", "c-interrupted": "interrupted",
        "d-complete": _base().run.status,
    }
    out = CliRunner().invoke(cli, ["runs", str(tmp_path), "--format", "json"])
    assert out.exit_code == 0, out.output
    assert {r["name"]: r["status"] for r in json.loads(out.output)} == status


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_report_renders_an_interrupted_run_saying_so(tmp_path, fmt):
    _saved(tmp_path, "run", status=ReportStatus.INTERRUPTED)
    out = CliRunner().invoke(cli, ["report", str(tmp_path / "run"), "--format", fmt])
    assert out.exit_code == 0, out.output
    assert "Interrupted during the fix trials: 1 trial(s) finished, 1 unfinished" in out.output
    assert "dataloader_workers" in out.output


class _Server:
    """Stands for the warm-start server the diagnose launches before its capture."""

    alive = False  # NOTE: nothing to time a run's exit with (advisor.capture.end_probe; its own tests)
    sock = None

    def __init__(self, skip: tuple[str, ...] = ("torch._inductor.compile_fx",)) -> None:
        self.closed = 0
        self.skip = skip
        self.calls: list[str] = []

    def extend(self, modules: list[str]) -> bool:
        self.calls.append("extend " + " ".join(modules))
        self.skip = tuple(m for m in self.skip if m not in modules)
        return True

    def pause(self, busy: bool = False) -> None:
        self.calls.append("pause")

    def resume(self) -> None:
        self.calls.append("resume")

    def close(self) -> None:
        self.closed += 1


def _event(step: int):  # type: ignore[no-untyped-def]
    from advisor.capture.model import ProgressEvent
    from advisor.capture.vocab import Phase

    return ProgressEvent(phase=Phase.WARMUP if step < 5 else Phase.TIMED, step=step)


def _diagnose_with(monkeypatch, tmp_path, diagnosed, fix_loop=None, wanted=True, lazy=None, steps=(), early=True):  # type: ignore[no-untyped-def]
    from advisor.api import script
    from advisor.capture.model import RunCapture, RunStatus
    from advisor.capture.records import TimedPhase

    server, order = _Server(), []
    capture = RunCapture(run_dir=str(tmp_path), status=RunStatus.COMPLETED, timed=TimedPhase(step_times_ms=(5.0,)),
                         lazy_imports=lazy)

    def run(spec, progress):  # type: ignore[no-untyped-def]
        order.append("capture")
        for step in steps:
            if progress is not None:  # none without a server to pause and no display
                progress(_event(step))
            order.append(f"step {step}: {'+'.join(server.calls) or '-'}")
        return capture

    def launch(spec, options, capture=None):  # type: ignore[no-untyped-def]
        order.append("launch" if capture is None else "relaunch")
        return server if capture is None else _Server(skip=api._lazy_skip(options, capture))

    monkeypatch.setattr(script, "capture_function", lambda spec: run)
    monkeypatch.setattr(script, "launch_early_server", (lambda spec, options: launch(spec, options)) if early else
                        (lambda spec, options: None))
    monkeypatch.setattr(api, "launch_server", launch)
    monkeypatch.setattr(script, "_diagnosed", lambda *a: (order.append("analysis"), diagnosed(*a))[1])
    monkeypatch.setattr(script, "trials_wanted", lambda findings, options: wanted)
    monkeypatch.setattr(server, "close", lambda: (order.append("close"), _Server.close(server))[1])
    if fix_loop is not None:
        monkeypatch.setattr(script, "_fix_loop_saved", fix_loop)
    spec = RunSpec(script=tmp_path / "train.py", out_dir=tmp_path)
    return script, spec, server, order


def _diagnose_handing(monkeypatch, tmp_path, wanted, lazy=None, steps=(), early=True):  # type: ignore[no-untyped-def]
    """Diagnose with a fix loop that records the server it is handed."""
    handed: list[object] = []

    def loop(report, spec, diagnosis, options, progress, run_dir, started, server, base=None):  # type: ignore[no-untyped-def]
        handed.append(server)
        return report

    script, spec, server, order = _diagnose_with(
        monkeypatch, tmp_path, lambda *a: (Diagnosis((), None, {}), _base()), loop, wanted=wanted, lazy=lazy, steps=steps,
        early=early)
    script.diagnose_script(spec)
    return server, order, handed


def test_the_trials_server_starts_before_the_capture_and_goes_to_the_loop(monkeypatch, tmp_path):
    server, order, handed = _diagnose_handing(monkeypatch, tmp_path, wanted=True)
    assert order == ["launch", "capture", "analysis", "close"] and handed == [server]
    assert server.closed == 1  # closing twice is safe; the loop's runner closes it too


def test_the_server_is_paused_from_the_captures_first_step_until_trials_are_wanted(monkeypatch, tmp_path):
    server, order, _ = _diagnose_handing(monkeypatch, tmp_path, wanted=True, steps=(0, 1, 5))
    assert order[:5] == ["launch", "capture", "step 0: -", "step 1: pause", "step 5: pause+pause"]
    assert server.calls[-1] == "resume" and order[5:] == ["analysis", "close"]


def test_a_paused_server_the_diagnosis_does_not_want_is_ended_without_resuming(monkeypatch, tmp_path):
    server, order, handed = _diagnose_handing(monkeypatch, tmp_path, wanted=False, steps=(1,))
    assert server.calls == ["pause"] and order[-2:] == ["analysis", "close"] and handed == [None]


def test_a_script_that_never_imported_dynamo_gets_a_server_without_it(monkeypatch, tmp_path):
    server, order, handed = _diagnose_handing(monkeypatch, tmp_path, wanted=True, lazy=())
    assert order == ["launch", "capture", "close", "relaunch", "analysis"]
    assert server.closed == 1 and handed[0] is not server
    assert handed[0].skip == ("torch._dynamo", "torch._inductor.compile_fx")


def test_a_script_seen_to_compile_gets_compiles_modules_in_the_early_server(monkeypatch, tmp_path):
    server, order, handed = _diagnose_handing(monkeypatch, tmp_path, wanted=True,
                                              lazy=("torch._dynamo", "torch._inductor.compile_fx"))
    assert "relaunch" not in order and handed == [server]
    assert server.calls[0] == "extend torch._inductor.compile_fx" and server.skip == ()


def test_a_script_that_imported_dynamo_keeps_the_early_server(monkeypatch, tmp_path):
    server, order, handed = _diagnose_handing(monkeypatch, tmp_path, wanted=True, lazy=("torch._dynamo",))
    assert "relaunch" not in order and handed == [server]


def test_without_two_free_cores_the_server_starts_after_the_capture_beside_the_analysis(monkeypatch, tmp_path):
    _, order, handed = _diagnose_handing(monkeypatch, tmp_path, wanted=True, steps=(1,), early=False)
    assert order == ["capture", "step 1: -", "relaunch", "analysis"] and len(handed) == 1 and handed[0] is not None


def test_the_early_server_needs_two_free_cores(monkeypatch, tmp_path):
    from advisor.capture import spare

    launched: list[object] = []
    monkeypatch.setattr(api, "launch_server", lambda spec, options, capture=None: launched.append(spec) or "server")
    spec = RunSpec(script=tmp_path / "train.py", out_dir=tmp_path)
    for free, expected in ((2.0, "server"), (1.6, "server"), (1.0, None), (None, None)):
        monkeypatch.setattr(spare, "free_cores", lambda free=free: free)
        assert api.launch_early_server(spec, api.FixOptions()) == expected
    assert api.launch_early_server(spec, api.FixOptions(cold_start=True)) is None
    assert api.launch_early_server(spec, api.FixOptions(enabled=False)) is None
    assert len(launched) == 2


def test_a_diagnosis_with_nothing_to_try_ends_the_server_before_the_report(monkeypatch, tmp_path):
    server, order, handed = _diagnose_handing(monkeypatch, tmp_path, wanted=False)
    assert order == ["launch", "capture", "analysis", "close"] and handed == [None] and server.closed == 1


def test_a_capture_cut_short_ends_the_early_server(monkeypatch, tmp_path):
    from advisor.api import script

    _, spec, server, order = _diagnose_with(monkeypatch, tmp_path, lambda *a: (Diagnosis((), None, {}), _base()))

    def interrupted(spec, progress):  # type: ignore[no-untyped-def]
        order.append("capture")
        raise KeyboardInterrupt

    monkeypatch.setattr(script, "capture_function", lambda spec: interrupted)
    with pytest.raises(KeyboardInterrupt):
        script.diagnose_script(spec)
    assert order == ["launch", "capture", "close"] and server.closed == 1  # close() wakes a paused one to end it


def test_trials_are_wanted_for_a_fix_the_loop_may_run():
    from advisor.engine.model import Category, Finding, FixRef, Safety, Severity

    def finding(*fixes):  # type: ignore[no-untyped-def]
        return Finding(code="X001", name="x", category=Category.COMPUTE, severity=Severity.WARNING,
                       message="", evidence={}, fixes=tuple(fixes))

    safe, unsafe = FixRef("cpu_threads", Safety.SAFE), FixRef("torch_compile", Safety.UNSAFE)
    assert api.trials_wanted([finding(safe)], api.FixOptions())
    assert not api.trials_wanted([finding(unsafe)], api.FixOptions())  # hidden without --unsafe-fixes
    assert api.trials_wanted([finding(unsafe)], api.FixOptions(unsafe=True))
    assert not api.trials_wanted([], api.FixOptions())
    assert api.trials_wanted([], api.FixOptions(only=("cpu_threads",)))  # --fix runs whatever the findings say
    assert not api.trials_wanted([finding(safe)], api.FixOptions(enabled=False))


def test_an_analysis_that_fails_leaves_no_server_behind(monkeypatch, tmp_path):
    def broken(*a):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt

    script, spec, server, order = _diagnose_with(monkeypatch, tmp_path, broken)
    with pytest.raises(KeyboardInterrupt):
        script.diagnose_script(spec)
    assert order == ["launch", "capture", "analysis", "close"] and server.closed == 1
