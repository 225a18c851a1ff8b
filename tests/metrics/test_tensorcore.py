"""Tensor-core shape check on the committed generated trace and the BERT trace."""

from __future__ import annotations

import pytest
import tracegen

from advisor.api import analyze_report
from advisor.metrics.compute import analyze_path
from advisor.metrics.tensorcore import gemm_dims

GPU_SMALL = tracegen.Path(__file__).resolve().parents[1] / "data" / "gpu_small" / "worker0.pt.trace.json.gz"


def test_gemm_dims_of_each_op_family():
    assert gemm_dims("aten::addmm", [[1001], [512, 4096], [4096, 1001]]) == {"M": 512, "K": 4096, "N": 1001}
    assert gemm_dims("aten::bmm", [[8, 64, 30], [8, 30, 64]]) == {"M": 64, "K": 30, "N": 64}
    assert gemm_dims("aten::convolution", [[8, 3, 32, 32], [64, 3, 3, 3]]) == {"C_in": 3, "C_out": 64}


def test_misaligned_bf16_gemm_is_listed_with_its_time_and_source_line():
    m = analyze_path(GPU_SMALL)
    # per step: GEMMs of 30 us (512x1024x4096) and 35 us (512x4096x1001, N off by 1)
    assert m.summary["tc_misaligned_op_count"] == 1
    assert m.summary["tc_misaligned_time_frac"] == pytest.approx(35 / 65)
    (row,) = m.extra["misaligned_ops"]
    assert row["bad"] == "N=1001" and row["device_ms"] == pytest.approx(0.035) and row["where"] == "train.py:50 (main)"
    report = analyze_report(GPU_SMALL)
    co = next(f for f in report.findings if f.code == "CO006")
    assert "train.py:50 (main)" in co.message and "54%" in co.message


def test_bert_vocabulary_projection_is_flagged(shared_traces):
    m = analyze_path(next((shared_traces / "tracelens").rglob("*.json.gz")))
    bad = {r["bad"] for r in m.extra["misaligned_ops"]}
    assert "M=141, N=30522" in bad  # 141 tokens, vocabulary 30,522
