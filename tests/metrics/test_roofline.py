"""Roofline per operator, against hand calculations on the committed generated trace."""

from __future__ import annotations

import json

import pytest
import tracegen

from advisor.metrics.compute import analyze_path
from advisor.metrics.devices import find_gpu, peak_tbps, peak_tflops
from advisor.metrics.roofline import op_cost

GPU_SMALL = tracegen.Path(__file__).resolve().parents[1] / "data" / "gpu_small" / "worker0.pt.trace.json.gz"
H100_BF16, H100_TBPS = 989.4, 3.35


@pytest.fixture(scope="module")
def small():
    m = analyze_path(GPU_SMALL)
    rows = {(r["name"], r["dims"]): r for r in m.extra["roofline"]}
    return m, rows


def test_gemm_row_matches_hand_calculation(small):
    _, rows = small
    r = rows[("aten::addmm", "[[4096],[512,1024],[1024,4096],[],[]]")]
    flops = 2 * 512 * 1024 * 4096
    nbytes = (512 * 1024 + 1024 * 4096 + 512 * 4096 + 4096) * 2
    assert r["calls"] == 2 and r["device_ms"] == pytest.approx(0.060)
    assert r["tflops"] == pytest.approx(flops / 30e-6 / 1e12, rel=1e-6)  # 30 us kernel per call
    assert r["tbps"] == pytest.approx(nbytes / 30e-6 / 1e12, rel=1e-6)
    assert r["intensity"] == pytest.approx(flops / nbytes, rel=1e-6)
    # H100 ridge 989.4 / 3.35 = 295 FLOP/byte < 315: compute-bound, at 14% of the bf16 peak
    assert r["bound"] == "compute"
    assert r["peak_frac"] == pytest.approx(flops / 30e-6 / 1e12 / H100_BF16, rel=1e-6)


def test_attention_and_elementwise_rows(small):
    _, rows = small
    attn = next(r for (name, _), r in rows.items() if name == "aten::_scaled_dot_product_flash_attention")
    b, h, seq, e = 4, 8, 1024, 64
    assert attn["tflops"] == pytest.approx(4 * b * h * seq * seq * e / 50e-6 / 1e12, rel=1e-6)
    assert attn["tbps"] == pytest.approx(4 * b * h * seq * e * 2 / 50e-6 / 1e12, rel=1e-6)
    gelu = rows[("aten::gelu", "[[512,4096]]")]
    assert gelu["bound"] == "memory"
    assert gelu["tbps"] == pytest.approx(2 * 512 * 4096 * 2 / 12e-6 / 1e12, rel=1e-6)  # read + write
    assert gelu["peak_frac"] == pytest.approx(gelu["tbps"] / H100_TBPS, rel=1e-6)


def test_mfu_per_step_counts_gemm_conv_attention_at_peak(small):
    m, _ = small
    flops = 2 * 512 * 1024 * 4096 + 2 * 512 * 4096 * 1001 + 4 * 4 * 8 * 1024 * 1024 * 64
    steps = m.steps
    expected = flops / (H100_BF16 * 1e12) / (steps["step_time_ms"] / 1e3)
    assert steps["step_mfu_frac"].to_numpy() == pytest.approx(expected.to_numpy(), rel=1e-6)
    assert m.summary["sized_gpu_time_frac"] == 1.0
    json.dumps(m.extra["roofline"])


def test_costs_of_causal_attention_backward_and_unsized_inputs():
    q = [2, 4, 128, 64]
    fwd = op_cost("aten::_scaled_dot_product_flash_attention", json.dumps([q, q, q, [], [], [], []]),
                  json.dumps(["c10::Half"] * 3 + ["Scalar"] * 4), json.dumps(["", "", "", "0.0", "True", "False", ""]))
    assert fwd[0] == 4 * 2 * 4 * 128 * 128 * 64 / 2  # causal: half the score matrix
    bwd = op_cost("aten::_scaled_dot_product_flash_attention_backward", json.dumps([q, q, q, q, q]),
                  json.dumps(["c10::Half"] * 5), None)
    assert bwd[0] == 2.5 * 4 * 2 * 4 * 128 * 128 * 64
    assert op_cost("aten::convolution", json.dumps([[1, 3, 8, 8], [4, 3, 3, 3]]), json.dumps(["float", "float"]), None) is None
    assert op_cost("aten::mm", None, None, None) is None


def test_device_table_has_sources_and_matches_names():
    for name, dtype, peak, bw in [
        ("NVIDIA H100 80GB HBM3", "bf16", 989.4, 3.35),
        ("NVIDIA H200", "bf16", 989.4, 4.8),
        ("NVIDIA A100-SXM4-80GB", "bf16", 312.0, 2.039),
        ("Tesla V100-SXM2-32GB", "fp16", 125.0, 0.9),
        ("NVIDIA L4", "bf16", 121.0, 0.3),
        ("NVIDIA L40S", "bf16", 362.05, 0.864),
        ("NVIDIA GeForce RTX 4090", "bf16", 165.2, 1.008),
    ]:
        assert peak_tflops(name, dtype) == peak and peak_tbps(name) == bw, name
        assert find_gpu(name).source
    assert peak_tflops("AMD Instinct MI300X", "bf16") is None and peak_tbps("AMD Instinct MI300X") == 5.3


def test_resnet_says_which_ops_lack_shapes_and_sizes_the_backward_convolutions(shared_traces):
    path = next((shared_traces / "kineto").rglob("*.json.gz"))
    m = analyze_path(path)
    assert any("could not be sized" in n and "aten::convolution" in n for n in m.notes)
    conv = [r for r in m.extra["roofline"] if r["name"] == "aten::cudnn_convolution_backward"]
    assert conv and all(r["dtype"] == "fp32" and r["tflops"] > 0 for r in conv)
    assert m.summary["step_mfu_frac"] is None  # forward convolutions unsized: no partial MFU


def test_a_trace_without_shapes_says_so_and_sizes_nothing(shared_traces):
    m = analyze_path(next((shared_traces / "hta").rglob("*.json.gz")))
    assert any("records no operator shapes" in n for n in m.notes)
    assert m.summary["sized_gpu_time_frac"] is None and m.summary["step_mfu_frac"] is None
    assert "roofline" not in m.extra


def test_fp32_convolutions_are_held_to_the_tf32_peak_where_the_gpu_has_one():
    # cuDNN runs fp32 convolutions in TF32 by default: against the FP32 peak, MFU could pass 100%
    from advisor.metrics.roofline import _roof
    from advisor.metrics.steps import _peak_dtype

    h100, v100 = find_gpu("NVIDIA H100 80GB HBM3"), find_gpu("Tesla V100-SXM2-16GB")
    assert _roof(h100, "fp32", "conv")[0] == 494.7 and _roof(h100, "fp32", "gemm")[0] == 67.0
    assert _roof(h100, "bf16", "conv")[0] == 989.4
    assert _roof(v100, "fp32", "conv")[0] == 15.7  # Volta: no TF32
    assert _peak_dtype("fp32", {"conv_flag": 1.0}, h100) == "tf32"
    assert _peak_dtype("fp32", {"conv_flag": 0.0}, h100) == "fp32"  # matmuls: TF32 is opt-in
    assert _peak_dtype("fp32", {"conv_flag": 1.0}, v100) == "fp32"  # Volta: no TF32
    assert _peak_dtype("bf16", {"conv_flag": 1.0}, h100) == "bf16"


def test_per_step_mfu_counts_fp32_convolutions_at_the_tf32_peak():
    import types

    import numpy as np
    import pandas as pd

    from advisor.metrics.roofline import _per_step

    h100 = find_gpu("NVIDIA H100 80GB HBM3")
    # 494.7 GFLOP of fp32 convolution need 1 ms at TF32's 494.7 TFLOP/s
    ops = pd.DataFrame({"step": [0, 0], "flops": [494.7e9, 67e9], "device_us": [900.0, 90.0],
                        "kind": ["conv", "gemm"], "dtype": ["fp32", "fp32"]})
    analysis = types.SimpleNamespace(windows=types.SimpleNamespace(duration=np.array([2000.0])))
    mfu, _ = _per_step(ops, analysis, h100, 1)
    # conv: 1 ms at the TF32 peak; gemm: 1 ms at the FP32 peak (67 TFLOP/s); the step: 2 ms
    assert mfu[0] == pytest.approx((1000.0 + 1000.0) / 2000.0)
