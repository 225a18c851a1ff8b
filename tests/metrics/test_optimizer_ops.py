"""optimizer_op_count and optimizer_multi_tensor_flag: how torch.optim's step ran, from its trace."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from advisor.metrics.events import classify
from advisor.metrics.intervals import Windows
from advisor.metrics.optimizer_ops import optimizer_columns
from tests.metrics.opframes import events_frame


def _columns(rows: list[tuple[str, str, float, float]], windows: Windows) -> dict[str, np.ndarray]:
    ev = events_frame(rows)
    return optimizer_columns(ev, classify(ev), windows, len(windows))


TWO_STEPS = Windows(np.array([1, 2]), np.array([0.0, 1000.0]), np.array([1000.0, 2000.0]))


def test_operators_inside_the_step_are_counted_per_step_and_nested_ones_once() -> None:
    rows = [
        ("aten::mm", "cpu_op", 10.0, 50.0),  # the forward: outside the optimizer
        ("Optimizer.step#AdamW.step", "user_annotation", 100.0, 300.0),
        ("aten::mul_", "cpu_op", 110.0, 10.0),
        ("aten::add_", "cpu_op", 130.0, 10.0),
        ("aten::add", "cpu_op", 131.0, 5.0),  # nested in add_: not a top-level operator
        ("aten::sqrt", "cpu_op", 150.0, 10.0),
        ("Optimizer.step#AdamW.step", "user_annotation", 1100.0, 300.0),
        ("aten::mul_", "cpu_op", 1110.0, 10.0),
    ]
    cols = _columns(rows, TWO_STEPS)
    assert cols["optimizer_op_count"].tolist() == [3.0, 1.0]
    assert cols["optimizer_multi_tensor_flag"].tolist() == [0.0, 0.0]


def test_a_foreach_or_fused_operator_sets_the_flag_of_its_step_only() -> None:
    rows = [
        ("Optimizer.step#AdamW.step", "user_annotation", 100.0, 300.0),
        ("aten::_fused_adamw_", "cpu_op", 110.0, 100.0),
        ("Optimizer.step#AdamW.step", "user_annotation", 1100.0, 300.0),
        ("aten::mul_", "cpu_op", 1110.0, 10.0),
    ]
    assert _columns(rows, TWO_STEPS)["optimizer_multi_tensor_flag"].tolist() == [1.0, 0.0]
    foreach = [("Optimizer.step#SGD.step", "user_annotation", 100.0, 300.0), ("aten::_foreach_add_", "cpu_op", 110.0, 9.0)]
    assert _columns(foreach, TWO_STEPS)["optimizer_multi_tensor_flag"][0] == 1.0


def test_a_step_without_an_optimizer_range_has_no_flag() -> None:
    rows = [("aten::mm", "cpu_op", 10.0, 50.0), ("Optimizer.step#SGD.step", "user_annotation", 1100.0, 100.0)]
    cols = _columns(rows, TWO_STEPS)
    assert cols["optimizer_op_count"].tolist() == [0.0, 0.0]
    assert math.isnan(cols["optimizer_multi_tensor_flag"][0]) and cols["optimizer_multi_tensor_flag"][1] == 0.0
    empty = _columns([("aten::mm", "cpu_op", 10.0, 50.0)], TWO_STEPS)
    assert np.isnan(empty["optimizer_multi_tensor_flag"]).all()


torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from advisor.metrics.compute import compute_metrics  # noqa: E402
from advisor.trace.load import load_traces  # noqa: E402


def _profiled(tmp_path: Path, **optimizer: bool) -> dict[str, float]:
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **optimizer)
    x = torch.randn(8, 16)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            prof.step()
    path = tmp_path / f"{'-'.join(optimizer) or 'loop'}.pt.trace.json"
    prof.export_chrome_trace(str(path))
    return compute_metrics(load_traces(path)).summary


def test_torch_optims_three_implementations_read_as_they_ran(tmp_path: Path) -> None:
    loop, foreach, fused = (_profiled(tmp_path, **kw) for kw in ({}, {"foreach": True}, {"fused": True}))
    assert (loop["optimizer_multi_tensor_flag"], foreach["optimizer_multi_tensor_flag"],
            fused["optimizer_multi_tensor_flag"]) == (0.0, 1.0, 1.0)
    # six parameter tensors: the loop runs each operation on each, foreach once over the list
    # (and an item() per tensor), fused the whole update in one operator
    assert loop["optimizer_op_count"] > foreach["optimizer_op_count"] > fused["optimizer_op_count"]
