"""A small CPU trace recorded with torch.profiler (tests/data/cpu_small): golden + independent checks."""

from __future__ import annotations

import cProfile
import gzip
import json
import shutil
import sys
from pathlib import Path

import pytest
import rawtrace as rt

from advisor.capture.model import DataLoaderInfo, Environment, RunCapture, TimedPhase, UtilSummary
from advisor.metrics.compute import analyze_path
from advisor.metrics.describe import format_metrics
from advisor.metrics.registry import BREAKDOWN_PARTS, METRICS

DATA = Path(__file__).resolve().parents[1] / "data" / "cpu_small"
TRACE = DATA / "worker0.pt.trace.json.gz"
ANNOTATIONS = ("ProfilerStep#", "enumerate(DataLoader)#", "Optimizer.")


@pytest.fixture(scope="module")
def metrics():
    return analyze_path(DATA)


def test_fixture_is_small():
    assert TRACE.stat().st_size < 300_000


def test_golden_summary_by_metric_name(metrics):
    golden = json.loads((DATA / "golden.json").read_text())
    for name, value in golden["summary"].items():
        assert name in METRICS
        assert metrics.summary[name] == pytest.approx(value, rel=1e-9, abs=1e-12), name
    unknown = {k for k, v in metrics.summary.items() if v is None}
    assert unknown.isdisjoint(golden["summary"])
    # no GPU in this trace: device-side metrics are unknown, not zero
    for name in ("kernel_count", "gpu_busy_frac", "h2d_bytes", "mfu_frac", "tensor_cores_flag"):
        assert metrics.summary[name] is None
    assert [[loc.kind, loc.file, loc.function] for loc in metrics.locations] == golden["locations"]


def test_cpu_breakdown_against_raw_events(metrics):
    evs = rt.events(TRACE)
    steps = rt.steps(evs)
    assert len(steps) == 3
    ops = [e for e in evs if e.get("cat") == "cpu_op" and e.get("ph") == "X" and not e["name"].startswith(ANNOTATIONS)]
    items = rt.spans(evs, lambda e: e["name"] in ("aten::item", "aten::_local_scalar_dense"))
    loader = rt.spans(evs, lambda e: e["name"].startswith("enumerate(DataLoader)#"))
    optim = rt.spans(evs, lambda e: e["name"].startswith("Optimizer.step#"))
    for (num, lo, hi), (_, row) in zip(steps, metrics.steps.iterrows(), strict=True):
        assert row["step"] == num
        assert row["step_time_ms"] == pytest.approx((hi - lo) / 1e3)
        for p in ("gpu_compute", "h2d_copy", "d2h_copy", "gpu_idle", "communication"):
            assert row[f"{p}_ms"] == 0
        assert sum(row[f"{p}_ms"] for p in BREAKDOWN_PARTS) == pytest.approx(row["step_time_ms"])
        assert row["sync_wait_ms"] == pytest.approx(rt.length(rt.clip(items, lo, hi)) / 1e3)
        assert row["dataloader_wait_ms"] == pytest.approx(rt.length(rt.clip(loader, lo, hi)) / 1e3)
        assert row["data_loading_ms"] == pytest.approx(rt.subtract(rt.clip(loader, lo, hi), rt.clip(items, lo, hi)) / 1e3)
        assert row["optimizer_ms"] == pytest.approx(
            rt.subtract(rt.clip(optim, lo, hi), rt.clip(items + loader, lo, hi)) / 1e3
        )
        op_spans = [(e["ts"], e["ts"] + e["dur"]) for e in ops]
        expected_ops = rt.subtract(rt.clip(op_spans, lo, hi), rt.clip(items + loader + optim, lo, hi))
        assert row["cpu_ops_ms"] == pytest.approx(expected_ops / 1e3)
        in_step = [e for e in ops if lo <= e["ts"] < hi]
        top = [
            e for e in in_step
            if not any(o is not e and o["tid"] == e["tid"] and o["ts"] <= e["ts"] and o["ts"] + o["dur"] >= e["ts"] + e["dur"]
                       and (o["ts"] < e["ts"] or o["dur"] > e["dur"]) for o in ops)
        ]
        assert row["cpu_op_count"] == len(top)
        assert row["item_count"] == sum(1 for e in in_step if e["name"] == "aten::item")
        flops = 0
        for e in in_step:
            d = e["args"].get("Input Dims")
            if e["name"] == "aten::addmm":
                flops += 2 * d[1][0] * d[1][1] * d[2][1]
            elif e["name"] == "aten::mm":
                flops += 2 * d[0][0] * d[0][1] * d[1][1]
        assert row["flops_per_step"] == flops > 0
    peak = max(e["args"]["Total Allocated"] for e in evs if e.get("name") == "[memory]")
    assert metrics.summary["peak_memory_bytes"] == peak


def test_locations_point_at_the_script(metrics):
    by_kind = {loc.kind: loc for loc in metrics.locations}
    assert by_kind["data_loading"].file == "record.py" and by_kind["data_loading"].function == "__getitem__"
    assert by_kind["item"].function == "main" and by_kind["item"].count == 1
    # issue 15: on a CPU-only trace `.to("cpu")` copies nothing, so it is no host-to-device copy
    assert "h2d" not in by_kind
    text = format_metrics(metrics)
    assert "record.py" in text and "cpu_ops" in text


def test_trace_without_profiler_steps_is_one_window(tmp_path):
    evs = [e for e in rt.events(TRACE) if not e.get("name", "").startswith("ProfilerStep#")]
    path = tmp_path / "nosteps.json"
    path.write_text(json.dumps({"traceEvents": evs}))
    m = analyze_path(path)
    assert len(m.steps) == 1 and m.steps["step"].iloc[0] == -1
    assert m.summary["step_count"] == 0
    assert any("no ProfilerStep" in n for n in m.notes)
    assert m.summary["item_count"] == 3
    assert sum(m.summary[f"{p}_ms"] for p in BREAKDOWN_PARTS) == pytest.approx(m.summary["step_time_ms"])


def _write_pstats(tmp_path: Path) -> Path:
    """cProfile output where a user's __getitem__ is called from a torch/utils/data frame."""
    user = tmp_path / "mytrain.py"
    user.write_text(
        "def transform(i):\n    return sum(range(2000)) + i\n\n"
        "class Data:\n    def __getitem__(self, i):\n        return transform(i)\n"
    )
    lib = tmp_path / "site-packages" / "torch" / "utils" / "data" / "_utils"
    lib.mkdir(parents=True)
    (lib / "fetch.py").write_text("def fetch(ds, idx):\n    return [ds[i] for i in idx]\n")
    sys.path[:0] = [str(tmp_path), str(lib)]
    try:
        import fetch  # type: ignore[import-not-found]
        import mytrain  # type: ignore[import-not-found]

        prof = cProfile.Profile()
        prof.enable()
        for _ in range(3):
            fetch.fetch(mytrain.Data(), range(50))
        prof.disable()
    finally:
        del sys.path[:2]
        sys.modules.pop("fetch", None)
        sys.modules.pop("mytrain", None)
    out = tmp_path / "run" / "profile.pstats"
    out.parent.mkdir()
    prof.dump_stats(str(out))
    return out


def test_run_directory_with_capture_and_pstats(tmp_path):
    pstats_file = _write_pstats(tmp_path)
    run = pstats_file.parent
    (run / "traces").mkdir()
    shutil.copy(TRACE, run / "traces" / TRACE.name)
    capture = RunCapture(
        run_dir=str(run),
        profiled_steps=3,
        timed=TimedPhase(
            step_times_ms=(10.0, 11.0), samples=(16, 16), batches=(2, 2), samples_per_s=1500.0, time_to_first_step_s=2.5
        ),
        dataloaders=(DataLoaderInfo(batch_size=16, num_workers=0, pin_memory=False),),
        environment=Environment(cpu_count=2),
        cpu=UtilSummary(mean_util_frac=0.5, total_memory_bytes=8_000_000_000),
        peak_memory_bytes=123_456_789,
        trace_files=(f"traces/{TRACE.name}",),
        pstats_file="profile.pstats",
    )
    capture.save(run)
    m = analyze_path(run)
    s = m.summary
    assert s["samples_per_s"] == 1500 and s["samples_per_step"] == 16
    assert s["batches_per_step"] == 2 and s["micro_batch_size"] == 8  # gradient accumulation over 2
    assert s["dataloader_num_workers"] == 0 and s["dataloader_pin_memory_flag"] == 0
    assert s["cpu_count"] == 2 and s["cpu_util_frac"] == 0.5 and s["time_to_first_step_s"] == 2.5
    # the trace's own peak wins over the capture's; device memory is the capture's RAM total
    assert s["peak_memory_bytes"] == 19076 and s["device_memory_bytes"] == 8e9
    assert s["memory_used_frac"] == pytest.approx(19076 / 8e9)
    hot = [loc for loc in m.locations if loc.source == "pstats"]
    names = [loc.function for loc in hot]
    assert names[:2] == ["__getitem__", "transform"]
    assert hot[0].file.endswith("mytrain.py") and hot[0].count == pytest.approx(150 / 3)


def test_gzip_and_plain_give_the_same_metrics(tmp_path, metrics):
    plain = tmp_path / "t.json"
    with gzip.open(TRACE, "rb") as fh:
        plain.write_bytes(fh.read())
    other = analyze_path(plain)
    for name, value in metrics.summary.items():
        assert other.summary[name] == value, name


def test_capture_without_traces(tmp_path):
    run = tmp_path / "run"
    capture = RunCapture(
        run_dir=str(run),
        timed=TimedPhase(step_times_ms=(10.0, 12.0, 11.0), samples=(8, 8, 8), batches=(1, 1, 1), samples_per_s=700.0),
        environment=Environment(cpu_count=4),
    )
    capture.save(run)
    m = analyze_path(run)
    assert m.summary["step_time_ms"] == 11.0 and m.summary["samples_per_s"] == 700
    assert m.summary["batches_per_step"] == 1 and m.summary["micro_batch_size"] == 8
    assert m.summary["kernel_count"] is None and len(m.steps) == 0
    assert any("no profiler trace" in n for n in m.notes)


def test_ranks_loaded_one_by_one_keep_distinct_ranks():
    from advisor.metrics.compute import compute_metrics
    from advisor.trace.load import load_traces

    traces = load_traces(TRACE) + load_traces(TRACE)
    m = compute_metrics(traces)
    assert list(m.ranks["rank"]) == [0, 1]
    assert m.summary["rank_count"] == 2 and m.summary["straggler_ratio"] == 1.0



def _summary(tmp_path, timed: TimedPhase, **fields) -> dict:
    run = tmp_path / "run"
    RunCapture(run_dir=str(run), step_source="optimizer", timed=timed, environment=Environment(cpu_count=4), **fields).save(run)
    return analyze_path(run).summary


def test_accumulation_without_a_dataloader_comes_from_backward_calls(tmp_path):
    # 40 backward calls per optimizer step, 320 samples the model consumed: 40 x 8
    s = _summary(tmp_path, TimedPhase(
        step_times_ms=(10.0, 12.0, 11.0), samples=(320, 320, 320), batches=(0, 0, 0),
        backwards=(40, 40, 40), optimizers_per_step=1,
    ))
    assert s["batches_per_step"] == 40 and s["micro_batch_size"] == 8 and s["samples_per_step"] == 320


def test_gan_backward_calls_are_no_micro_batches(tmp_path):
    s = _summary(
        tmp_path,
        TimedPhase(step_times_ms=(10.0, 12.0), samples=(16, 16), batches=(1, 1), backwards=(3, 3), optimizers_per_step=2),
        dataloaders=(DataLoaderInfo(batch_size=16),),
    )
    assert s["batches_per_step"] == 1 and s["micro_batch_size"] == 16
