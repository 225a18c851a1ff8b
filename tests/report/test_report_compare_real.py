"""compare on real inputs: a GPU trace from ../shared/traces against a CPU capture, and before/after
captures of one example (diagnose runs, slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_fixtures import record_cpu_trace

from advisor.cli.main import main

pytestmark = pytest.mark.e2e

RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
REPO = Path(__file__).resolve().parents[2]


def invoke(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


@pytest.fixture(scope="module")
def cpu_capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("advisor.api")
    run = tmp_path_factory.mktemp("cpu") / "cpu_run"
    record_cpu_trace(run)
    return run / "traces"


def test_gpu_trace_against_cpu_capture(capsys, shared_traces: Path, cpu_capture: Path) -> None:
    gpu = shared_traces / RESNET
    code, out, err = invoke(capsys, "compare", str(gpu), str(cpu_capture), "--format", "json")
    assert code == 0, err
    cmp = json.loads(out)
    assert cmp["speedup"] is None and cmp["verdict"] == "not comparable"
    assert cmp["before_device"] == "Tesla V100-DGXS-32GB" and cmp["after_device"] == "CPU"
    reasons = " | ".join(cmp["not_comparable"])
    assert "devices differ (Tesla V100-DGXS-32GB vs CPU)" in reasons
    assert "GPU compute" in reasons  # a part that exists on one side only is named
    parts = {p["part"]: p for p in cmp["parts"]}
    assert parts["gpu_compute"]["before_frac"] > 0.3 and parts["data_loading"]["before_frac"] > 0.2
    assert {f["code"] for f in cmp["disappeared"]} | {f["code"] for f in cmp["persisting"]}  # GPU findings listed
    code, md, _ = invoke(capsys, "compare", str(gpu), str(cpu_capture), "--format", "markdown")
    assert "> **Not comparable**" in md and "×" not in md.split("**Speedup**", 1)[1].splitlines()[0]


def test_two_traces_of_the_same_cpu_capture_compare_as_no_change(capsys, cpu_capture: Path) -> None:
    code, out, err = invoke(capsys, "compare", str(cpu_capture), str(cpu_capture), "--format", "json")
    assert code == 0, err
    cmp = json.loads(out)
    assert cmp["not_comparable"] == [] and cmp["metric"] == "step_time_ms"
    assert cmp["speedup"] == pytest.approx(1.0)
    assert cmp["disappeared"] == [] and cmp["appeared"] == []


def _diagnose(script: Path, out: Path) -> None:
    from advisor.api import FixOptions, diagnose_script
    from advisor.capture.model import RunSpec

    spec = RunSpec(script=script, out_dir=out, warmup_steps=2, timed_steps=10, profiled_steps=3, quiet=True, cwd=REPO)
    result = diagnose_script(spec, fix_options=FixOptions(enabled=False))
    assert result.capture.ok, result.capture.error


@pytest.mark.slow
def test_before_and_after_a_fix_on_one_example(capsys, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    before, after = tmp_path / "before", tmp_path / "after"
    _diagnose(REPO / "examples" / "data_loading.py", before)
    _diagnose(REPO / "examples" / "fixed" / "data_loading.py", after)
    code, out, err = invoke(capsys, "compare", str(before), str(after), "--format", "json")
    assert code == 0, err
    cmp = json.loads(out)
    assert cmp["not_comparable"] == []
    assert cmp["metric"] == "samples_per_s" and cmp["speedup"] is not None
    # NOTE: one run a side gives no interval (intervals are over runs, never over one run's steps)
    assert cmp["ci_low"] is None and cmp["ci_high"] is None
    # NOTE: the speedup itself depends on how busy the machine is (measured 1.06x [0.80-1.88] on
    # a 2-core box at load 10, "no measurable effect"); what must hold is the comparison logic.
    # A busy machine, or a side whose steps changed level, is "not measurable" (advisor.report.compare).
    assert cmp["verdict"] in ("faster", "no measurable effect", "slower", "not measurable")
    # NOTE: on 2 cores the twin's 2 workers still cannot keep up with its augmentation (DL001
    # fired at 33% of the step on a quiet machine), so DL001 may stay; it must never be new, and
    # loading time must fall. Appear/disappear logic has exact tests in test_report_compare.py.
    assert "DL001" not in {f["code"] for f in cmp["appeared"]}
    dl = next(p for p in cmp["parts"] if p["part"] == "data_loading")
    assert dl["delta_ms"] < 0
    code, md, _ = invoke(capsys, "compare", str(before), str(after), "--format", "markdown")
    assert code == 0 and "| **Speedup** |" in md


@pytest.mark.slow
def test_a_diagnoses_baseline_runs_give_compare_its_noise(capsys, tmp_path: Path) -> None:
    """compare RUN RUN: one run a side, no interval; the fix loop's baseline runs are the noise."""
    pytest.importorskip("torch")
    from advisor.api import FixOptions, diagnose_script
    from advisor.capture.model import RunSpec

    run = tmp_path / "run"
    spec = RunSpec(script=REPO / "examples" / "data_loading.py", args=("--batch-size", "8"), out_dir=run,
                   warmup_steps=2, timed_steps=6, profiled_steps=2, quiet=True, cwd=REPO)
    options = FixOptions(only=("dataloader_workers",), repeats=2, exhaustive=True)
    assert diagnose_script(spec, fix_options=options).capture.ok
    assert len(list((run / "trials").glob("baseline-*"))) >= 2
    code, out, err = invoke(capsys, "compare", str(run), str(run), "--format", "json", "--fail-on-regression", "0")
    assert code == 0, err
    cmp = json.loads(out)
    assert cmp["speedup"] == pytest.approx(1.0) and cmp["ci_low"] is None
    assert cmp["verdict"] == "no measurable effect" and cmp["noise_band"] is not None
    assert any(n.startswith("run-to-run noise of this script:") and "baseline runs of run's fix trials" in n
               for n in cmp["notes"])
    if (run / "kept").is_dir():  # a fix kept on this machine: its trial shows beside compare's figure
        code, out, _ = invoke(capsys, "compare", str(run), str(run / "kept"), "--format", "json")
        assert json.loads(out)["trial"]["speedup"] is not None
