"""FLOP counting from shapes and the peak-throughput table."""

from __future__ import annotations

import json

import pytest

from advisor.metrics.compute import analyze_path
from advisor.metrics.flops import op_dtype, op_flops, peak_tflops


def test_matmul_and_conv_flops_from_shapes():
    assert op_flops("aten::mm", "[[8, 16], [16, 4]]", None) == 2 * 8 * 16 * 4
    assert op_flops("aten::addmm", "[[4], [8, 16], [16, 4]]", None) == 2 * 8 * 16 * 4
    assert op_flops("aten::bmm", "[[3, 8, 16], [3, 16, 4]]", None) == 2 * 3 * 8 * 16 * 4
    # conv 3x3, stride 2, padding 1: 32x32 -> 16x16 output
    dims = "[[2, 3, 32, 32], [8, 3, 3, 3], [8], [], [], [], [], [], []]"
    concrete = '["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]'
    assert op_flops("aten::convolution", dims, concrete) == 2 * 2 * 8 * 16 * 16 * 3 * 3 * 3
    assert op_flops("aten::convolution", dims, None) is None  # stride unknown: no guess
    assert op_dtype('["c10::BFloat16", "c10::BFloat16"]') == "bf16"
    assert op_dtype('["Scalar", "float"]') == "fp32"


def test_peak_table_matches_device_names():
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989.4
    assert peak_tflops("NVIDIA H100 PCIe", "bf16") == 756.0
    assert peak_tflops("NVIDIA A100-PG509-200", "fp32") == 19.5
    assert peak_tflops("NVIDIA A10", "fp16") == 125.0  # not confused with A100
    assert peak_tflops("Tesla V100-SXM2-32GB", "bf16") is None
    assert peak_tflops("Some CPU", "fp32") is None


def test_flops_arg_is_preferred(tmp_path):
    def op(name, ts, dims, flops=None):
        args = {"Input Dims": dims, "Input type": ["float", "float"]}
        if flops is not None:
            args["flops"] = flops
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 10, "args": args}

    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
        op("aten::mm", 10, [[8, 16], [16, 4]], flops=12345),
        op("aten::conv2d", 100, [[1, 3, 8, 8], [4, 3, 3, 3]], flops=1000),
        op("aten::convolution", 101, [[1, 3, 8, 8], [4, 3, 3, 3]]),
    ]
    path = tmp_path / "flops.json"
    path.write_text(json.dumps({"traceEvents": events}))
    m = analyze_path(path)
    assert m.summary["flops_per_step"] == 12345 + 1000
    assert m.summary["achieved_tflops"] == pytest.approx(13345 / 1e-3 / 1e12)
    assert m.summary["conv_flag"] == 1 and m.summary["fp32_matmul_frac"] == 1.0


def test_loader_keeps_shapes_for_every_counted_op():
    from advisor.metrics.flops import FLOP_OPS, FLOPS_ARG_OPS
    from advisor.trace.load import SHAPE_OPS

    assert FLOP_OPS | FLOPS_ARG_OPS <= SHAPE_OPS
