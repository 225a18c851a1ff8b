"""The GPU-time tables (idle by function, roofline, modules) show in every report format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.api import analyze_report
from advisor.report.model import Report
from advisor.report.render import render

GPU_SMALL = Path(__file__).resolve().parents[1] / "data" / "gpu_small" / "worker0.pt.trace.json.gz"


@pytest.fixture(scope="module")
def report() -> Report:
    return analyze_report(GPU_SMALL)


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_every_format_shows_the_tables(report: Report, fmt: str) -> None:
    out = render(report, fmt)
    for title in ("GPU idle time by function", "Top GPU operators (roofline)", "Time per nn.Module"):
        assert title in out, (fmt, title)
    assert "dataset.py(21)" in out and "getitem" in out  # Markdown escapes the underscores
    assert "143.2" in out  # the 512x1024x4096 GEMM's TFLOP/s (hand calculation in tests/metrics/test_roofline.py)
    assert "· Linear_1" in out.replace("\\_", "_")


def test_json_carries_the_raw_tables_and_reloads(report: Report, tmp_path: Path) -> None:
    data = json.loads(render(report, "json"))
    assert {"idle_functions", "roofline", "modules"} <= set(data["tables"])
    report.save(tmp_path)
    assert Report.load(tmp_path).tables == report.tables


def test_html_escapes_names_from_the_trace(report: Report) -> None:
    import dataclasses

    evil = dict(report.tables)
    evil["idle_functions"] = ({"function": "<script>x</script>(1): f", "idle_class": "host", "idle_ms": 1.0,
                               "longest_gap_ms": 1.0},)
    out = render(dataclasses.replace(report, tables=evil), "html")
    assert "<script>x</script>" not in out and "&lt;script&gt;" in out


def test_module_table_has_a_gpu_column_only_when_kernels_ran(report: Report) -> None:
    import dataclasses

    assert "GPU time (forward)" in render(report, "text")  # the GPU trace's modules launched kernels
    cpu_rows = tuple({**r, "device_ms": 0.0} for r in report.tables["modules"])
    cpu = dataclasses.replace(report, tables={**report.tables, "modules": cpu_rows})
    for fmt in ("text", "markdown", "html"):
        out = render(cpu, fmt)
        assert "Time per nn.Module" in out and "GPU time (forward)" not in out, fmt
        assert "no GPU column" in out, fmt
