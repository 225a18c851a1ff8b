"""Metrics of the real GPU traces in ../shared/traces, checked against raw-JSON arithmetic."""

from __future__ import annotations

import math

import pytest
import rawtrace as rt

from advisor.metrics.compute import analyze_path, compute_metrics
from advisor.metrics.describe import format_metrics
from advisor.metrics.registry import BREAKDOWN_PARTS, METRICS
from advisor.metrics.timeline import LANES, step_timeline
from advisor.trace.load import load_traces

SYNC_NAMES = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"}


def _path(shared, sub):
    return next((shared / sub).rglob("*.json.gz"))


def _check_parts_add_up(metrics):
    for _, row in metrics.steps.iterrows():
        assert sum(row[f"{p}_ms"] for p in BREAKDOWN_PARTS) == pytest.approx(row["step_time_ms"], rel=1e-9)
        assert sum(row[f"{p}_frac"] for p in BREAKDOWN_PARTS) == pytest.approx(1.0, rel=1e-9)
        assert all(row[f"{p}_ms"] >= -1e-9 for p in BREAKDOWN_PARTS)
    s = metrics.summary
    assert sum(s[f"{p}_ms"] for p in BREAKDOWN_PARTS) == pytest.approx(s["step_time_ms"], rel=1e-9)
    assert set(s) == set(METRICS)


@pytest.fixture(scope="module")
def resnet(shared_traces):
    path = _path(shared_traces, "kineto")
    return path, rt.events(path), analyze_path(path)


def test_resnet_steps_and_dataloader_share(resnet):
    _, evs, m = resnet
    steps = rt.steps(evs)
    assert len(steps) == 6 and m.summary["step_count"] == 6
    loader = rt.spans(evs, lambda e: e["name"].startswith("enumerate(DataLoader)"))
    gpu = rt.spans(evs, rt.is_gpu)
    for (num, lo, hi), (_, row) in zip(steps, m.steps.iterrows(), strict=True):
        assert row["step"] == num
        assert row["step_time_ms"] == pytest.approx((hi - lo) / 1e3)
        share = rt.length(rt.clip(loader, lo, hi)) / (hi - lo)
        assert 0.35 <= share <= 0.45  # "about 40% of each step"
        assert row["dataloader_wait_ms"] / row["step_time_ms"] == pytest.approx(share)
        # data_loading part = loader time during which the GPU is idle (GPU-busy wins)
        idle_loading = rt.subtract(rt.clip(loader, lo, hi), rt.clip(gpu, lo, hi))
        assert row["data_loading_ms"] == pytest.approx(idle_loading / 1e3, abs=1e-6)
        busy = rt.length(rt.clip(gpu, lo, hi))
        assert row["gpu_busy_frac"] == pytest.approx(busy / (hi - lo))
        assert 48 <= row["gpu_max_gap_ms"] <= 70
    _check_parts_add_up(m)


def test_resnet_pageable_copies_and_syncs(resnet):
    _, evs, m = resnet
    htod = [e for e in evs if e.get("cat") == "Memcpy" and "HtoD" in e["name"]]
    assert len(htod) == 12 and all("Pageable" in e["name"] for e in htod)
    assert sorted({e["args"]["bytes"] for e in htod}) == [256, 19267584]
    assert m.steps["h2d_count"].sum() == 12
    assert m.steps["h2d_pageable_bytes"].sum() == sum(e["args"]["bytes"] for e in htod)
    assert m.steps["h2d_pinned_bytes"].sum() == 0
    assert m.summary["h2d_pageable_frac"] == 1.0
    big = [e for e in htod if e["args"]["bytes"] == 19267584]
    bw = [e["args"]["bytes"] / e["dur"] / 1e3 for e in big]
    assert min(bw) - 0.5 <= m.summary["h2d_bandwidth_gbps"] <= max(bw) + 0.5
    steps = rt.steps(evs)
    syncs = [e for e in evs if e.get("name") in SYNC_NAMES and any(lo <= e["ts"] < hi for _, lo, hi in steps)]
    assert len(syncs) == m.steps["sync_count"].sum() == 12
    assert m.summary["h2d_blocking_count"] == 2
    kinds = {loc.kind for loc in m.locations}
    assert {"h2d", "sync", "data_loading"} <= kinds
    h2d = next(loc for loc in m.locations if loc.kind == "h2d")
    assert h2d.file.endswith("resnet50_profiler_api.py") and h2d.count == 2


def test_resnet_kernels_and_flags(resnet):
    _, evs, m = resnet
    kernels = [e for e in evs if e.get("cat") == "Kernel"]
    assert m.steps["kernel_count"].sum() == len(kernels) == 8772
    small = sum(1 for e in kernels if e["dur"] < 10)
    assert m.steps["small_kernel_count"].sum() == small
    s = m.summary
    assert s["kernel_median_us"] == 2.0
    assert s["has_gpu_flag"] == 1 and s["tensor_cores_flag"] == 1 and s["conv_flag"] == 1
    assert s["autocast_flag"] == 0 and s["fp32_matmul_frac"] == 1.0
    # no stride/padding in this old trace: FLOPs are unknown, not wrong
    assert s["flops_per_step"] is None and s["mfu_frac"] is None
    assert any("convolution FLOPs" in n for n in m.notes)
    assert s["device_memory_bytes"] == 34084028416


def test_bert_small_kernels_memory_flops(shared_traces):
    path = _path(shared_traces, "tracelens")
    evs = rt.events(path)
    m = analyze_path(path)
    (num, lo, hi), = rt.steps(evs)
    kernels = [e for e in evs if e.get("cat") == "kernel"]
    assert len(kernels) == 60
    s = m.summary
    assert s["kernel_count"] == 60 and s["small_kernel_count"] == 58
    assert s["small_kernel_count"] == sum(1 for e in kernels if e["dur"] < 10)
    busy = rt.length(rt.clip(rt.spans(evs, rt.is_gpu), lo, hi)) / (hi - lo)
    assert s["gpu_busy_frac"] == pytest.approx(busy) and 0.06 <= busy <= 0.08  # "about 7%"
    peak = max(e["args"]["Total Allocated"] for e in evs if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1)
    assert s["peak_memory_bytes"] == peak == 101305344
    flops = 0.0
    for e in evs:
        if e.get("cat") != "cpu_op" or not (lo <= e["ts"] < hi):
            continue
        dims = e["args"].get("Input Dims")
        if e["name"] == "aten::addmm":
            flops += 2 * dims[1][0] * dims[1][1] * dims[2][1]
        elif e["name"] == "aten::mm":
            flops += 2 * dims[0][0] * dims[0][1] * dims[1][1]
        elif e["name"] == "aten::bmm":
            flops += 2 * dims[0][0] * dims[0][1] * dims[0][2] * dims[1][2]
    assert flops > 0 and s["flops_per_step"] == pytest.approx(flops)
    assert s["achieved_tflops"] == pytest.approx(flops / ((hi - lo) * 1e-6) / 1e12)
    assert s["autocast_flag"] == 1 and s["fp32_matmul_frac"] == 0.0
    assert s["mfu_frac"] == pytest.approx(s["achieved_tflops"] / 989.4)  # H100 SXM dense bf16
    assert s["item_count"] == 1 and s["sync_count"] == 2 and s["d2h_count"] == 1
    assert {loc.kind for loc in m.locations} >= {"item", "sync"}
    _check_parts_add_up(m)


def test_dlrm_ranks_stragglers_and_communication(shared_traces):
    folder = shared_traces / "param"
    m = analyze_path(folder)
    ranks = m.ranks.set_index("rank")
    assert list(ranks.index) == list(range(8))
    readme = {0: 14.5, 1: 19.9, 2: 13.0, 3: 19.3, 4: 18.0, 5: 17.8, 6: 13.1, 7: 12.5}
    for t in load_traces(folder):
        evs = rt.events(t.path)
        ((_, lo, hi),) = rt.steps(evs)
        assert ranks.loc[t.rank, "step_time_ms"] == pytest.approx((hi - lo) / 1e3)
        assert ranks.loc[t.rank, "step_time_ms"] == pytest.approx(readme[t.rank], abs=0.06)
        nccl = sum(min(e["ts"] + e["dur"], hi) - max(e["ts"], lo) for e in evs
                   if e.get("cat") == "kernel" and "nccl" in e["name"].lower() and e["ts"] < hi and e["ts"] + e["dur"] > lo)
        assert ranks.loc[t.rank, "comm_time_ms"] == pytest.approx(nccl / 1e3, rel=1e-6)
    assert ranks.loc[7, "comm_time_ms"] == pytest.approx(1.7, abs=0.1)
    assert ranks.loc[1, "comm_time_ms"] == pytest.approx(11.3, abs=0.1)
    s = m.summary
    assert s["rank_count"] == 8
    # Wall time: rank 1 has the longest step, rank 7 the shortest (README) ...
    assert ranks["step_time_ms"].idxmax() == 1 and ranks["step_time_ms"].idxmin() == 7
    # ... but rank 1 spends most of it waiting in NCCL: the straggler is judged by busy time,
    # the step minus its exposed communication (advisor.distributed.balance).
    busy = ranks["step_time_ms"] - ranks["communication_ms"]
    assert s["straggler_rank"] == busy.idxmax() and s["fastest_rank"] == busy.idxmin()
    assert s["straggler_rank"] != 1, "rank 1 waits most; it is not the straggler"
    assert s["straggler_ratio"] == pytest.approx(busy.max() / busy.min())
    assert s["straggler_wait_frac"] == pytest.approx((busy.max() - busy.min()) / ranks["step_time_ms"].median())
    assert s["comm_max_rank"] == 1 and s["comm_min_rank"] == 7
    assert s["comm_imbalance_ratio"] == pytest.approx(ranks.loc[1, "comm_time_ms"] / ranks.loc[7, "comm_time_ms"])
    assert 0 <= s["comm_overlap_frac"] <= 1
    assert s["h2d_pinned_bytes"] > 0 and s["h2d_pageable_bytes"] > 0
    _check_parts_add_up(m)
    text = format_metrics(m)
    assert "rank 7" in text and "communication" in text


def test_event_sync_trace_has_all_sync_kinds(shared_traces):
    path = _path(shared_traces, "hta")
    evs = rt.events(path)
    names = {e["name"] for e in evs if e.get("cat") == "cuda_runtime"} & SYNC_NAMES
    assert names == SYNC_NAMES
    m = analyze_path(path)
    assert m.summary["sync_count"] == 3
    assert m.summary["gpu_max_gap_ms"] == pytest.approx(2.8, abs=0.05)
    _check_parts_add_up(m)


def test_timeline_lanes(shared_traces):
    (trace,) = load_traces(_path(shared_traces, "kineto"))
    events = step_timeline(trace, step=7, max_events=500)
    assert 0 < len(events) <= 500
    lanes = {e["lane"] for e in events}
    assert lanes <= set(LANES) and {"data_loading", "copies", "syncs", "gpu_kernels"} <= lanes
    assert sum(1 for e in events if e["lane"] == "copies") == 2
    assert all(e["start_us"] >= 0 and e["dur_us"] >= 0 for e in events)
    assert step_timeline(trace, step=999) == ()
    assert len(step_timeline(trace)) > 0


def test_compute_metrics_rejects_nothing():
    from advisor.errors import TraceError

    with pytest.raises(TraceError):
        compute_metrics(())


def test_summary_values_are_plain_floats(shared_traces):
    m = analyze_path(_path(shared_traces, "tracelens"))
    for name, value in m.summary.items():
        assert value is None or (isinstance(value, float) and math.isfinite(value)), name
