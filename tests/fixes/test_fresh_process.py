"""A fix whose gain depends on what a forked run inherits is measured with every run cold, its baselines too.

No catalog fix needs it now: malloc_thresholds, which did, measured alike forked and cold against
its diff timed plainly on two scripts (its module docstring), and forked in a third of the time.
The mechanism is tested with malloc_thresholds marked fresh_process here.
"""

from __future__ import annotations

import dataclasses

import pytest
from fixes_fakes import FakeRunner, by_fix, refs

from advisor.capture.model import RunSpec
from advisor.capture.warm import spec_refusal
from advisor.fixes import catalog
from advisor.fixes.catalog import malloc_thresholds
from advisor.fixes.loop import run_trials


@pytest.fixture(autouse=True)
def _glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    # the check looks for glibc with ctypes.util, which runs ldconfig: no process in a unit test
    monkeypatch.setattr(malloc_thresholds, "glibc", lambda: object())


@pytest.fixture
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    fixes = catalog.get_fixes()
    monkeypatch.setitem(fixes, "malloc_thresholds", dataclasses.replace(fixes["malloc_thresholds"], fresh_process=True))


def _fresh_names(runner: FakeRunner) -> tuple[list[str], list[str]]:
    fresh = [s.out_dir.name for s in runner.calls if s.fresh_process]
    forked = [s.out_dir.name for s in runner.calls if not s.fresh_process]
    return fresh, forked


def test_malloc_thresholds_is_forked_like_every_fix(spec: RunSpec) -> None:
    assert not catalog.get("malloc_thresholds").fresh_process
    runner = FakeRunner(effects={"malloc_thresholds": 1.3})
    out = run_trials(spec, refs("malloc_thresholds"), runner=runner, make_diff_text=False)
    assert _fresh_names(runner)[0] == [] and by_fix(out)["malloc_thresholds"].verdict == "improved"


@pytest.mark.usefixtures("_fresh")
def test_a_fresh_process_fix_and_its_own_baselines_start_cold(spec: RunSpec) -> None:
    assert catalog.get("malloc_thresholds").fresh_process
    runner = FakeRunner(effects={"malloc_thresholds": 1.3, "dataloader_workers": 1.5})
    shown: list[str] = []
    out = run_trials(spec, refs("dataloader_workers", "malloc_thresholds"), runner=runner, make_diff_text=False,
                     progress=lambda event: shown.append(event.fix))
    assert "baseline (fresh process)" in shown and "baseline" in shown  # the user sees which baseline runs
    fresh, forked = _fresh_names(runner)
    assert fresh and all(n.startswith(("malloc_thresholds-", "cold-baseline-", "cold-combined-baseline-", "combined-")) for n in fresh)
    assert any(n.startswith("cold-baseline-") for n in fresh)
    assert not any(n.startswith("malloc") for n in forked)
    assert any(n.startswith("baseline-") for n in forked) and any(n.startswith("dataloader_workers") for n in forked)
    t = by_fix(out)
    assert t["malloc_thresholds"].verdict == "improved" and t["dataloader_workers"].verdict == "improved"
    assert "each in a fresh interpreter" in t["malloc_thresholds"].reason
    assert "fresh interpreter" not in t["dataloader_workers"].reason
    # the two together hold malloc_thresholds: the combination and its baselines start cold too
    assert any(n.startswith("cold-combined-baseline-") for n in fresh)
    assert any(n.startswith("combined-") for n in fresh)
    assert out.kept == ("dataloader_workers", "malloc_thresholds")


def test_a_loop_without_such_a_fix_forks_every_run(spec: RunSpec) -> None:
    runner = FakeRunner(effects={"dataloader_workers": 1.5})
    run_trials(spec, refs("dataloader_workers"), runner=runner, make_diff_text=False)
    assert _fresh_names(runner)[0] == []


def test_the_warm_start_server_refuses_a_fresh_process_run(tmp_path) -> None:
    run = RunSpec(script=tmp_path / "train.py", profiled_steps=0)
    assert spec_refusal(run) is None
    why = spec_refusal(RunSpec(script=tmp_path / "train.py", profiled_steps=0, fresh_process=True))
    assert why is not None and "allocator state a forked run inherits" in why
