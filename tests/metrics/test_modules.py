"""Module view: host and device time per nn.Module, from with_modules frames."""

from __future__ import annotations

import pytest
import tracegen

from advisor.capture.profilers import TorchProfilerControl
from advisor.metrics.compute import analyze_path

GPU_SMALL = tracegen.Path(__file__).resolve().parents[1] / "data" / "gpu_small" / "worker0.pt.trace.json.gz"


def test_generated_modules_have_hierarchical_paths_and_inclusive_device_time():
    m = analyze_path(GPU_SMALL)
    rows = {r["module"]: r for r in m.extra["modules"]}
    assert set(rows) == {"MLP_0", "MLP_0/Linear_0", "MLP_0/Linear_1", "MLP_0/Attention_0"}
    # kernels per step: GEMM 30 us, GELU 12, GEMM 35, softmax 6, attention 50 (inside MLP_0)
    assert rows["MLP_0"]["device_ms"] == pytest.approx((30 + 12 + 35 + 6 + 50) / 1e3)
    assert rows["MLP_0/Linear_1"]["device_ms"] == pytest.approx(0.035)
    assert rows["MLP_0/Attention_0"]["depth"] == 1 and rows["MLP_0"]["calls"] == 1.0
    assert rows["MLP_0"]["host_ms"] > rows["MLP_0/Linear_0"]["host_ms"] > 0


def test_bert_trace_modules(shared_traces):
    m = analyze_path(next((shared_traces / "tracelens").rglob("*.json.gz")))
    top = m.extra["modules"][0]
    assert top["module"] == "BertLMHeadModel_0" and top["depth"] == 0
    assert top["host_ms"] == pytest.approx(4.216941)  # the nn.Module: BertLMHeadModel_0 frame


def test_our_capture_records_module_frames(tmp_path):
    import torch

    files: list[str] = []
    control = TorchProfilerControl(tmp_path / "traces", tmp_path, files, [])
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    control.start()
    try:
        for _ in range(2):
            model(torch.ones(2, 8))
            control.step()
    finally:
        control.stop(export=True)
    m = analyze_path(tmp_path / files[0])
    rows = {r["module"]: r for r in m.extra["modules"]}
    assert {"Sequential_0", "Sequential_0/Linear_0", "Sequential_0/ReLU_0"} <= set(rows)
    # a CPU run: host time per module, no device time
    assert rows["Sequential_0"]["host_ms"] >= rows["Sequential_0/Linear_0"]["host_ms"] > 0
    assert rows["Sequential_0"]["device_ms"] == 0.0
