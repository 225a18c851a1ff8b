"""Scripts of our own, diagnosed end to end as a user would run them: the right category, for the right reason.

* ``tests/scripts/tiny_gpt.py``: a tiny GPT-style trainer with no DataLoader, overhead-bound on a
  CPU. It is busy in operators nearly all the step, and must still not be called compute-bound:
  the capture measures the machine's matmul peak, and the report carries the achieved share of it.
* ``tests/scripts/train_loop.py --workers 4 --pin-memory``: a loop written for a GPU server, run
  on a small CPU machine: a DataLoader with 4 workers and ``pin_memory=True``, more runnable
  threads than cores, and useless pinning.
* ``tests/scripts/tiny_gpt.py --batch-size 8 --accum 40``: nanoGPT's gradient accumulation with
  no DataLoader (batches sampled from a tensor): the accumulation is seen in the loop itself.
* ``tests/scripts/configurator_mlp.py --batch_size=4``: nanoGPT's ``--key=value`` configurator
  over module globals: its globals are the script's configuration surface.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "tests" / "scripts"
ADVISOR = [sys.executable, "-m", "advisor"]


def diagnose(tmp_path: Path, script: Path, *script_args: str) -> tuple[dict, dict]:
    """``advisor diagnose --no-fixes`` with short phases; returns (report, capture)."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}  # a fresh matmul-peak cache
    out = subprocess.run(
        [*ADVISOR, "diagnose", "-q", "--no-fixes", "--out", str(run_dir), "--warmup", "1", "--steps", "3",
         "--profile-steps", "2", "--format", "json", "-o", str(tmp_path / "report.json"), str(script), *script_args],
        capture_output=True, text=True, cwd=tmp_path, timeout=600, env=env,
    )
    assert out.returncode == 0, out.stderr
    return json.loads((tmp_path / "report.json").read_text()), json.loads((run_dir / "capture.json").read_text())


def test_tiny_gpt_is_overhead_bound_not_compute_bound(tmp_path: Path) -> None:
    report, capture = diagnose(tmp_path, SCRIPTS / "tiny_gpt.py", "--steps", "50")
    codes = {f["code"] for f in report["findings"]}
    assert report["primary"]["category"] == "small_kernels", report["primary"]
    assert "CO001" not in codes and codes & {"SK003", "SK005"}
    peaks = {p["dtype"]: p for p in capture["environment"]["matmul_peaks"]}
    assert peaks["fp32"]["tflops"] > 0 and peaks["fp32"]["threads"] == capture["environment"]["intra_op_threads"]
    s = report["summary"]
    assert s["matmul_peak_tflops"] == peaks["fp32"]["tflops"]
    assert 0 < s["peak_share_frac"] < 1
    assert s["achieved_run_tflops"] == pytest.approx(s["peak_share_frac"] * s["matmul_peak_tflops"])


def test_oversubscribed_loader_and_useless_pin_memory_are_flagged(tmp_path: Path) -> None:
    report, capture = diagnose(tmp_path, SCRIPTS / "train_loop.py", "--workers", "4", "--pin-memory", "--steps", "60")
    codes = {f["code"] for f in report["findings"]}
    s = report["summary"]
    assert "DL004" in codes  # pin_memory=True, no GPU
    assert s["dataloader_num_workers"] == 4 and s["intra_op_threads_count"] == capture["environment"]["intra_op_threads"]
    assert s["runnable_threads_count"] == 4 + s["intra_op_threads_count"]
    cores = capture["environment"]["cpu_count"]
    # the rules follow the machine: more workers than cores, more runnable threads than cores
    assert ("DL005" in codes) == (4 > cores)
    assert ("CO005" in codes) == (s["cpu_demand_ratio"] * cores >= cores + 1)
    if cores <= 3:
        assert {"DL005", "CO005"} <= codes
    # the capture recorded what else ran meanwhile, and its own process tree
    cpu = capture["cpu"]
    assert cpu["load_avg_mean"] is not None and cpu["other_util_frac"] is not None
    assert cpu["max_processes"] >= 2 and cpu["max_threads"] >= cpu["max_processes"]
    # a run measured under contention says so, whichever way the machine was
    warned = any("competed for the cores" in w for w in report["warnings"])
    assert warned == (s["contention_flag"] == 1.0)


@pytest.mark.slow  # NOTE: 17 s (its fix trials); SK004/SK006 and the batch-assembly metric have unit tests
def test_accumulation_without_a_dataloader_is_named(tmp_path: Path) -> None:
    report, capture = diagnose(tmp_path, SCRIPTS / "tiny_gpt.py", "--batch-size", "8", "--accum", "40", "--steps", "50")
    by_code = {f["code"]: f for f in report["findings"]}
    assert capture["dataloaders"] == [] and capture["step_source"] == "optimizer"
    assert capture["timed"]["backwards"] == [40] * len(capture["timed"]["step_times_ms"])
    assert "SK004" in by_code, sorted(by_code)
    assert "40 micro-batches of 8 samples" in by_code["SK004"]["message"]
    assert "One batch of 320 samples" in by_code["SK004"]["message"]
    assert report["primary"]["category"] != "compute" and "CO001" not in by_code
    # 40 backward calls outrun the 8 steps asked for before the first optimizer step: the
    # trace of those backward-call "steps" is dropped, not read as a second rank
    assert len(capture["trace_files"]) == 1 and "CM002" not in by_code


@pytest.mark.slow
def test_accumulation_is_fixed_through_the_scripts_own_arguments(tmp_path: Path) -> None:
    """The argument trial re-runs the script with one batch of micro x accum, loss-checked; its diff is the command."""
    run_dir = tmp_path / "run"
    script = SCRIPTS / "tiny_gpt.py"
    out = subprocess.run(
        [*ADVISOR, "diagnose", "-q", "--fix", "script_args", "--repeats", "2", "--out", str(run_dir), "--warmup", "1",
         "--steps", "3", "--profile-steps", "1", "--format", "json", "-o", str(tmp_path / "report.json"),
         str(script), "--batch-size", "4", "--accum", "8", "--steps", "100"],
        capture_output=True, text=True, cwd=tmp_path, timeout=900,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")},
    )
    assert out.returncode in (0, 1), out.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    capture = json.loads((run_dir / "capture.json").read_text())
    options = {o["name"]: o for o in capture["script_config"]["options"]}
    assert options["batch_size"]["value"] == 4 and options["accum"]["flag"] == "--accum"
    (trial,) = [t for t in report["trials"] if t["fix"] == "script_args"]
    assert trial["params"]["changes"] == {"batch_size": 32, "accum": 1}
    assert trial["verdict"] != "failed" and trial["speedup"] is not None, trial
    # same data in the same order (one randint of 32 draws what eight of 4 draw): the losses agree
    assert trial["loss_max_rel_diff"] is not None and trial["loss_max_rel_diff"] < 1e-3
    variant = json.loads((run_dir / "trials" / "script_args-1" / "capture.json").read_text())
    assert variant["args"][:4] == ["--batch-size", "32", "--accum", "1"]
    assert variant["timed"]["backwards"] == [1] * len(variant["timed"]["step_times_ms"])
    command = f"python {script} --batch-size 32 --accum 1 --steps 100"
    if trial["verdict"] == "improved":
        assert report["diff"].startswith(f"# advisor: run with the script's own arguments: {command}\n")


def test_configurator_globals_are_the_surface_of_the_argument_trial(tmp_path: Path) -> None:
    from advisor._serde import from_dict
    from advisor.capture.model import RunCapture, RunSpec
    from advisor.fixes import catalog
    from advisor.fixes.fix import context_from_capture

    script = SCRIPTS / "configurator_mlp.py"
    report, capture = diagnose(tmp_path, script, "--batch_size=4")
    options = {o["name"]: o for o in capture["script_config"]["options"]}
    assert options["gradient_accumulation_steps"]["value"] == 8 and options["batch_size"]["value"] == 4
    assert options["batch_size"]["style"] == "configurator" and options["batch_size"]["flag"] == "--batch_size"
    assert "max_iters" in options and "os" not in options and "model" not in options
    assert "SK004" in {f["code"] for f in report["findings"]}
    # the argument trial that would run: nanoGPT's syntax, the given flag replaced, the other added
    ctx = context_from_capture(from_dict(RunCapture, capture))
    (variant,) = catalog.get("script_args").plan_variants(ctx, RunSpec(script=script, args=("--batch_size=4",)))
    assert variant.params["args"] == ["--batch_size=32", "--gradient_accumulation_steps=1"]
