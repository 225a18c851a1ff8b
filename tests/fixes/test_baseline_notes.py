"""A finding read from per-run counters (HB005) is evaluated again on each of the fix loop's baseline runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.api.baselines import baseline_captures, baseline_notes, spread_note
from advisor.api.rules import rule_set
from advisor.capture.kernel_use import KernelUse
from advisor.capture.model import RunCapture
from advisor.capture.records import TimedPhase
from advisor.capture.vocab import RunStatus
from advisor.engine.model import Category, Diagnosis, Finding, Severity
from advisor.rundir import TRIALS_DIR

FAULTING = KernelUse(steps=20, wall_s=1.0, user_s=0.7, system_s=0.3, minor_faults=40_000)  # 30%, 2,000 a step
QUIET = KernelUse(steps=20, wall_s=1.0, user_s=0.97, system_s=0.03, minor_faults=2_000)  # 3%, 100 a step


def _finding(code: str, **evidence: float) -> Finding:
    return Finding(code=code, name=code.lower(), category=Category.HOST, severity=Severity.WARNING, message="",
                   evidence=dict(evidence))


HB005 = _finding("HB005", kernel_cpu_frac=0.19, page_faults_per_step_count=2048.0)


def _raised(*findings: Finding, evaluated: tuple[str, ...] = ("DL001", "HB005")) -> Diagnosis:
    return Diagnosis(findings=findings, primary=None, breakdown={}, evaluated=evaluated)


def _runs(run_dir: Path, **kernels: KernelUse | None) -> Path:
    for name, kernel in kernels.items():
        folder = run_dir / TRIALS_DIR / name.replace("_", "-")
        folder.mkdir(parents=True)
        RunCapture(status=RunStatus.STOPPED, kernel=kernel).save(folder)
    return run_dir


@pytest.mark.parametrize(
    ("kernels", "said"),
    [
        ((FAULTING, FAULTING, FAULTING), "held in all 3 baseline runs"),
        ((QUIET, QUIET, QUIET), "held in none of the 3 baseline runs"),
        ((FAULTING, QUIET, FAULTING), "held in 2 of the 3 baseline runs"),
    ],
)
def test_the_note_counts_the_runs_where_the_condition_held(tmp_path: Path, kernels, said) -> None:
    run = _runs(tmp_path, baseline_1=kernels[0], baseline_2=kernels[1], combined_baseline_1=kernels[2])
    (note,) = baseline_notes(run, _raised(HB005), rule_set())
    assert note.startswith("HB005 (hb005) " + said)
    assert "against 19%," in note and "against 2,048 in the capture)" in note


def test_the_ranges_are_the_runs_values(tmp_path: Path) -> None:
    heavier = KernelUse(steps=20, wall_s=1.0, user_s=0.6, system_s=0.4, minor_faults=60_000)
    run = _runs(tmp_path, baseline_1=FAULTING, baseline_2=heavier)
    (note,) = baseline_notes(run, _raised(HB005), rule_set())
    assert "kernel_cpu_frac 30%–40% against 19%" in note
    assert "page_faults_per_step_count 2,000–3,000 against 2,048" in note


def test_fix_runs_failed_runs_and_runs_without_counters_are_not_baselines(tmp_path: Path) -> None:
    run = _runs(tmp_path, baseline_1=QUIET, malloc_thresholds_1=FAULTING, dataloader_workers_w2_ref_1=FAULTING,
                baseline_2=None)
    (run / TRIALS_DIR / "baseline-3").mkdir()  # interrupted before its capture was written
    crashed = run / TRIALS_DIR / "baseline-4"
    crashed.mkdir()
    RunCapture(status=RunStatus.CRASHED, kernel=FAULTING).save(crashed)
    assert [c.kernel for c in baseline_captures(run / TRIALS_DIR)] == [QUIET, None]
    assert baseline_notes(run, _raised(HB005), rule_set()) == ()  # one run with counters says nothing


def test_findings_from_the_trace_are_not_rechecked(tmp_path: Path) -> None:
    run = _runs(tmp_path, baseline_1=FAULTING, baseline_2=FAULTING)
    dl001 = _finding("DL001", data_loading_frac=0.5)
    assert baseline_notes(run, [dl001], rule_set()) == ()
    assert baseline_notes(tmp_path / "elsewhere", [HB005], rule_set()) == ()  # no trials at all


def _rated(*rates: float | None, samples: bool = True) -> list[RunCapture]:
    timed = [TimedPhase(samples_per_s=r) if samples else TimedPhase(steps_per_s=r) for r in rates]
    return [RunCapture(status=RunStatus.STOPPED, timed=t) for t in timed]


def test_the_spread_of_the_baseline_runs_is_noted_between_noticeable_and_disagreeing() -> None:
    note = spread_note(_rated(1000.0, 1300.0, 1100.0))
    assert note is not None and "3 baseline runs ran at 1,000–1,300 samples/s (1.30x apart)" in note
    assert "steps/s (1.30x apart)" in (spread_note(_rated(10.0, 13.0, 11.0, samples=False)) or "")
    assert spread_note(_rated(1000.0, 1100.0, 1150.0)) is None  # within the noise of any machine
    assert spread_note(_rated(1000.0, 2500.0, 1200.0)) is None  # disagreeing runs: each trial says so
    assert spread_note(_rated(1000.0, 1300.0)) is None  # two runs are not a range
    assert spread_note(_rated(1000.0, 1300.0, None, 1100.0)) is not None  # a run without a rate is left out


def test_baseline_notes_read_the_runs_on_disk(tmp_path: Path) -> None:
    # the plain baseline's runs of every stage: the first, the on-top stage's, the combination's
    names = ("baseline-1", "on-top-baseline-1", "combined-baseline-1")
    for name, (rate, kernel) in zip(names, ((1000.0, FAULTING), (1400.0, FAULTING), (1200.0, QUIET)), strict=True):
        folder = tmp_path / TRIALS_DIR / name
        folder.mkdir(parents=True)
        RunCapture(status=RunStatus.STOPPED, kernel=kernel, timed=TimedPhase(samples_per_s=rate)).save(folder)
    spread, recheck = baseline_notes(tmp_path, _raised(HB005), rule_set())
    assert "1,000–1,400 samples/s (1.40x apart)" in spread
    assert recheck.startswith("HB005 (hb005) held in 2 of the 3 baseline runs")


@pytest.mark.parametrize("content", ['{"status": "stopped", "kernel": "x"}',
                                     '{"status": "stopped", "timed": {"samples_per_s": "fast"}}',
                                     '{"status": "stopped", "kernel": {"steps": "a", "wall_s": 1}}'])
def test_a_capture_holding_nonsense_costs_the_notes_not_the_diagnose(tmp_path: Path, content: str) -> None:
    _runs(tmp_path, baseline_1=FAULTING, baseline_2=FAULTING)
    odd = tmp_path / TRIALS_DIR / "baseline-3"
    odd.mkdir()
    (odd / "capture.json").write_text(content, encoding="utf-8")
    assert baseline_notes(tmp_path, _raised(HB005), rule_set()) == ()


def test_a_rule_the_capture_did_not_raise_is_noted_when_most_baseline_runs_meet_it(tmp_path: Path) -> None:
    run = _runs(tmp_path, baseline_1=FAULTING, baseline_2=QUIET, baseline_3=FAULTING)
    (note,) = baseline_notes(run, _raised(), rule_set())
    assert note.startswith("HB005 (page-faults-every-step) was not raised by the capture's run, but held in 2 of "
                           "the 3 baseline runs")
    assert note.endswith("`advisor diagnose --fix malloc_thresholds` measures its fix")


def test_a_quiet_rule_is_not_noted_in_a_minority_of_runs_or_when_not_selected(tmp_path: Path) -> None:
    run = _runs(tmp_path, baseline_1=FAULTING, baseline_2=QUIET, baseline_3=QUIET)
    assert baseline_notes(run, _raised(), rule_set()) == ()
    many = _runs(tmp_path / "many", baseline_1=FAULTING, baseline_2=FAULTING)
    assert baseline_notes(many, _raised(evaluated=("DL001",)), rule_set()) == ()  # --ignore HB005


def test_runs_in_fresh_interpreters_are_the_ones_checked_when_there_are_some(tmp_path: Path) -> None:
    # forked runs inherit the warm-start server's heap; fresh ones fault as a plain run does
    run = _runs(tmp_path, baseline_1=FAULTING, baseline_2=FAULTING, cold_baseline_1=QUIET, cold_baseline_2=QUIET)
    (note,) = baseline_notes(run, _raised(HB005), rule_set())
    assert note.startswith("HB005 (hb005) held in none of the 2 baseline runs in fresh interpreters of the fix trials")
