"""Hand-made, fixed Reports for the report tests (built through build_report, like the pipeline)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

from advisor.capture.model import DataLoaderInfo, Environment, RunCapture, TimedPhase
from advisor.engine.model import Diagnosis, Finding, FixRef, ImpactBasis, Location, Primary
from advisor.fixes.model import FixOutcome, Trial
from advisor.metrics.model import Metrics, SourceLocation
from advisor.metrics.registry import BREAKDOWN_PARTS
from advisor.report.model import Report, build_report

CREATED = "2026-11-21T12:00:00+00:00"
HOSTILE = "</script><img src=x onerror=alert(1)>"

# Per-step milliseconds of a data-loading-bound CPU run (5 profiled steps).
_STEP_PARTS = {
    "data_loading": [17.9, 16.2, 16.8, 17.1, 16.5],
    "cpu_ops": [14.1, 14.4, 13.9, 14.2, 14.0],
    "optimizer": [3.1, 3.0, 3.2, 3.0, 3.1],
    "other": [2.4, 2.2, 2.6, 2.3, 2.5],
}


def _steps(parts: dict[str, list[float]], first_step: int = 10, rank: int = 0) -> pd.DataFrame:
    n = len(next(iter(parts.values())))
    rows = []
    for i in range(n):
        row: dict[str, float | int] = {"rank": rank, "step": first_step + i}
        total = 0.0
        for part in BREAKDOWN_PARTS:
            v = parts.get(part, [0.0] * n)[i]
            row[f"{part}_ms"] = v
            total += v
        row["step_time_ms"] = round(total, 3)
        rows.append(row)
    return pd.DataFrame(rows)


def _timed(center_ms: float) -> tuple[float, ...]:
    """20 timed step times around ``center_ms`` with a fixed +-4% wobble (no randomness)."""
    wobble = (0.0, 0.02, -0.01, 0.03, -0.02, 0.01, -0.03, 0.04, -0.04, 0.0)
    return tuple(round(center_ms * (1 + w), 3) for w in wobble * 2)


def _breakdown(steps: pd.DataFrame) -> dict[str, float]:
    total = steps["step_time_ms"].sum()
    return {p: round(float(steps[f"{p}_ms"].sum() / total), 4) for p in BREAKDOWN_PARTS}


def _timeline(name_prefix: str = "") -> tuple[dict, ...]:
    events = [
        ("data_loading", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 16800),
        ("cpu_ops", "aten::conv2d", 16900, 5200),
        ("cpu_ops", "aten::relu", 22150, 600),
        ("cpu_ops", "aten::linear", 22800, 2100),
        ("cpu_ops", "autograd::engine::evaluate_function: ConvolutionBackward0", 25000, 6000),
        ("cpu_ops", "Optimizer.step#SGD.step", 31100, 3100),
        ("syncs", "aten::item", 34300, 150),
    ]
    return tuple(
        {"lane": lane, "name": name_prefix + name, "start_us": start, "dur_us": dur}
        for lane, name, start, dur in events
    )


def make_report(hostile: bool = False, timed_ms: tuple[float, ...] | None = None) -> Report:
    """A fixed CPU report: data loading is the bottleneck, two fixes tried, one kept.

    ``timed_ms`` replaces the capture's timed step times (20 steps around 39.4 ms).
    """
    bad = HOSTILE if hostile else ""
    steps = _steps(_STEP_PARTS)
    summary = {
        "step_count": 5,
        "step_time_ms": float(steps["step_time_ms"].median()),
        "step_time_cv_frac": 0.031,
        "data_loading_frac": 0.4182,
        "dataloader_wait_ms": 16.8,
        "has_gpu_flag": 0,
        "samples_per_s": 812.4,
        "samples_per_step": 32,
        "dataloader_num_workers": 0,
        "cpu_count": 2,
        "peak_memory_bytes": 512 * 1024 * 1024,
        "mfu_frac": None,
    }
    metrics = Metrics(
        source="advisor-runs/demo" + bad,
        summary=summary,
        steps=steps,
        ranks=pd.DataFrame([{"rank": 0, "step_time_ms": summary["step_time_ms"]}]),
        locations=(
            SourceLocation("data_loading", "examples/data_loading.py" + bad, 58, "main", 1.0, 16.8),
            SourceLocation("item", "examples/data_loading.py", 71, "main", 1.0, 0.15),
        ),
        notes=("CPU-only run: GPU metrics are not available." + bad,),
    )
    findings = (
        Finding(
            code="DL001",
            name="dataloader-starved-step",
            category="data_loading",
            severity="warning",
            message="The DataLoader takes 16.8 ms of each 40.0 ms step (41.8%) with num_workers=0." + bad,
            evidence={"data_loading_frac": 0.4182, "dataloader_num_workers": 0},
            locations=(Location("examples/data_loading.py" + bad, 58, "main"),),
            fixes=(FixRef("dataloader_workers", "safe"), FixRef("persistent_workers", "safe")),
            impact_frac=0.4182,
            impact_basis=ImpactBasis.MEASURED,
        ),
        Finding(
            code="SY002",
            name="item-in-loop",
            category="sync",
            severity="info",
            message="1 .item() call per step forces the CPU to wait for the device.",
            evidence={"item_count": 1},
            locations=(Location("examples/data_loading.py", 71, "main"),),
            fixes=(),
            impact_frac=0.004,
            impact_basis=ImpactBasis.MEASURED,
        ),
        Finding(
            code="CPU003",
            name="cpu-threads-oversubscribed",
            category="small_kernels",
            severity="error",
            message="torch uses 8 threads on 2 cores; per-op overhead dominates the CPU ops.",
            evidence={"cpu_count": 2},
            locations=(),
            fixes=(FixRef("cpu_threads", "safe"),),
            impact_frac=0.06,
        ),
    )
    breakdown = _breakdown(steps)
    diagnosis = Diagnosis(
        findings=findings,
        primary=Primary(
            category="data_loading",
            share=breakdown["data_loading"],
            estimated_speedup=round(1 / (1 - breakdown["data_loading"]), 4),
        ),
        breakdown=breakdown,
        rules_evaluated=24,
        warnings=("unknown rule code 'DL01' in ignore (did you mean 'DL001'?)" + bad,),
    )
    trials = (
        Trial(
            fix="dataloader_workers",
            safety="safe",
            baseline_samples_per_s=812.4,
            samples_per_s=1290.7,
            speedup=1.589,
            ci_low=1.512,
            ci_high=1.664,
            verdict="improved",
            loss_max_rel_diff=0.0,
            reason="num_workers 0 -> 2",
            repeats=5,
            params={"num_workers": 2},
        ),
        # Measured on top of the workers rung (advisor.fixes.loop.stages): its baseline is
        # that run's throughput, not the plain baseline's.
        Trial(
            fix="persistent_workers",
            safety="safe",
            baseline_samples_per_s=1284.6,
            samples_per_s=1296.2,
            speedup=1.009,
            ci_low=0.981,
            ci_high=1.037,
            verdict="no_effect",
            loss_max_rel_diff=0.0,
            reason="on top of dataloader_workers@2; within noise" + bad,
            repeats=5,
            reference="dataloader_workers@2",
        ),
        Trial(fix="bf16_autocast", safety="unsafe", verdict="skipped", reason="unsafe: pass --unsafe-fixes"),
    )
    combined = Trial(
        fix="dataloader_workers",
        safety="safe",
        baseline_samples_per_s=812.4,
        samples_per_s=1290.7,
        speedup=1.589,
        ci_low=1.512,
        ci_high=1.664,
        verdict="improved",
        loss_max_rel_diff=0.0,
        repeats=5,
    )
    fixes = FixOutcome(
        trials=trials,
        combined=combined,
        kept=("dataloader_workers",),
        diff=(
            "--- a/examples/data_loading.py\n+++ b/examples/data_loading.py\n"
            "@@ -55,7 +55,7 @@\n"
            "     dataset = RandomImages(4096)\n"
            "-    loader = DataLoader(dataset, batch_size=32, shuffle=True)\n"
            f"+    loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=2){bad}\n"
            "     model = SmallConvNet()\n"
        ),
        notes=("bf16_autocast was not tried: it may change numerics.",),
    )
    capture = RunCapture(
        run_dir="advisor-runs/demo",
        script="examples/data_loading.py" + bad,
        args=("--epochs", "1"),
        status="stopped",
        exit_code=0,
        step_source="optimizer",
        steps_seen=30,
        warmup_steps=5,
        timed_steps=20,
        profiled_steps=5,
        timed=TimedPhase(
            step_times_ms=_timed(39.4) if timed_ms is None else timed_ms,
            samples=(32,) * (20 if timed_ms is None else len(timed_ms)),
            samples_per_s=812.4,
            steps_per_s=25.4,
            time_to_first_step_s=2.31,
        ),
        peak_memory_bytes=512 * 1024 * 1024,
        environment=Environment(python="3.11.9", torch="2.13.0", device="cpu", device_name="", cpu_count=2),
        dataloaders=(DataLoaderInfo(batch_size=32, num_workers=0, file="examples/data_loading.py", line=58),),
        notes=("No GPU: NVML sampling skipped.",),
    )
    report = build_report(metrics, diagnosis, capture=capture, fixes=fixes, timeline=_timeline(bad))
    return dataclasses.replace(report, created=CREATED, advisor_version="0.1.0")


def make_after_report() -> Report:
    """The same example after the dataloader_workers fix: data loading mostly hidden."""
    steps = _steps(
        {
            "data_loading": [1.3, 1.1, 1.2, 1.4, 1.2],
            "cpu_ops": [14.6, 14.3, 14.5, 14.2, 14.4],
            "optimizer": [3.1, 3.2, 3.0, 3.1, 3.1],
            "other": [2.1, 2.0, 2.2, 2.1, 2.0],
        }
    )
    summary = {
        "step_count": 5,
        "step_time_ms": float(steps["step_time_ms"].median()),
        "has_gpu_flag": 0,
        "samples_per_s": 1290.7,
        "samples_per_step": 32,
        "dataloader_num_workers": 2,
    }
    metrics = Metrics(source="advisor-runs/after", summary=summary, steps=steps, ranks=pd.DataFrame())
    findings = (
        Finding(
            code="SY002",
            name="item-in-loop",
            category="sync",
            severity="info",
            message="1 .item() call per step forces the CPU to wait for the device.",
            evidence={"item_count": 1},
            locations=(Location("examples/fixed/data_loading.py", 71, "main"),),
        ),
        Finding(
            code="CM001",
            name="cpu-op-bound",
            category="compute",
            severity="info",
            message="CPU ops take 71% of the step: the step is busy computing.",
            evidence={"cpu_ops_frac": 0.71},
        ),
    )
    diagnosis = Diagnosis(findings=findings, primary=None, breakdown=_breakdown(steps))
    capture = RunCapture(
        run_dir="advisor-runs/after",
        script="examples/fixed/data_loading.py",
        status="stopped",
        timed=TimedPhase(step_times_ms=_timed(24.8), samples=(32,) * 20, samples_per_s=1290.7),
        environment=Environment(device="cpu", cpu_count=2),
    )
    report = build_report(metrics, diagnosis, capture=capture)
    return dataclasses.replace(report, created=CREATED, advisor_version="0.1.0")


def make_gpu_trace_report() -> Report:
    """An analyzed GPU trace (no capture): ResNet-50-like, data loading 40%, samples/s unknown."""
    steps = _steps(
        {
            "data_loading": [66.0, 63.1, 70.2],
            "h2d_copy": [1.9, 1.8, 1.9],
            "sync_wait": [2.0, 2.1, 1.8],
            "gpu_compute": [90.2, 92.0, 88.4],
            "cpu_ops": [4.0, 4.2, 4.1],
            "gpu_idle": [3.0, 2.5, 3.3],
            "other": [1.0, 1.1, 0.9],
        },
        first_step=5,
    )
    summary = {"step_time_ms": float(steps["step_time_ms"].median()), "has_gpu_flag": 1, "samples_per_s": None}
    metrics = Metrics(
        source="shared/traces/kineto/resnet50/worker0.pt.trace.json.gz",
        summary=summary,
        steps=steps,
        ranks=pd.DataFrame(),
        device=("Tesla V100-DGXS-32GB",),
    )
    findings = (
        Finding(
            code="DL001",
            name="dataloader-starved-step",
            category="data_loading",
            severity="warning",
            message="The DataLoader takes 66 ms of each 168 ms step (39%).",
            evidence={"data_loading_frac": 0.39},
            impact_frac=0.39,
        ),
        Finding(
            code="H2D001",
            name="pageable-h2d-copies",
            category="host_to_device",
            severity="warning",
            message="19.3 MB per step copied from pageable memory.",
            evidence={"h2d_pageable_frac": 1.0},
            impact_frac=0.011,
        ),
    )
    breakdown = _breakdown(steps)
    share = breakdown["data_loading"]
    diagnosis = Diagnosis(
        findings=findings,
        primary=Primary("data_loading", share, round(1 / (1 - share), 4)),
        breakdown=breakdown,
    )
    report = build_report(metrics, diagnosis)
    return dataclasses.replace(report, created=CREATED, advisor_version="0.1.0")


def record_cpu_trace(run: Path) -> Path:
    """Record a small real CPU trace with torch.profiler (DataLoader + optimizer), TensorBoard layout."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    traces = run / "traces"
    traces.mkdir(parents=True)
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(128, 16), torch.randn(128, 1)), batch_size=16)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=3, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(str(traces), worker_name="testhost_1"),
    ) as prof:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    (trace,) = traces.glob("*.pt.trace.json*")
    (run / "capture.json").write_text(
        json.dumps({"schema_version": 1, "trace_files": [str(trace.relative_to(run))]}), encoding="utf-8"
    )
    return trace


def demo_like_report():
    """The fixture report with the demo's wide trials table and the GPU tables of a trace."""
    report = make_report()
    long_note = (
        "num_workers 0 -> 2, pin_memory on, persistent workers kept between epochs; "
        "measured in 5 interleaved repeats against the baseline"
    )
    trials = tuple(
        dataclasses.replace(t, reason=long_note, peak_memory_bytes=412 * 2**20, baseline_peak_memory_bytes=400 * 2**20)
        for t in report.trials
    )
    combined = Trial(
        "dataloader_workers+cpu_threads", "safe", 5.2, 208.0, 40.0, 38.1, 41.9, "improved",
        loss_max_rel_diff=0.0, reason="combined run of the kept fixes; " + long_note,
        fixes=("dataloader_workers", "cpu_threads"),
        peak_memory_bytes=430 * 2**20, baseline_peak_memory_bytes=400 * 2**20,
    )
    gpu = make_gpu_trace_report()
    return dataclasses.replace(
        report, trials=trials, combined=combined, kept_fixes=("dataloader_workers", "cpu_threads"), tables=gpu.tables,
    )
