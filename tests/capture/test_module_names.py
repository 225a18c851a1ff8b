"""torch.profiler's ``Conv2d_5`` module frames get the model's own names (issue #32)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.capture.module_names import ModuleNamer
from advisor.metrics.modules import with_model_names

torch = pytest.importorskip("torch")
nn = torch.nn


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.short = nn.Sequential(nn.Conv2d(4, 4, 1))
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.conv(x) + self.short(x))


def test_labels_map_to_the_names_in_the_model(tmp_path: Path) -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), Block(), Block(), nn.Flatten(), nn.Linear(256, 10))
    namer = ModuleNamer()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True,
                                with_modules=True) as prof:
        namer.enable()
        for _ in range(2):
            model(torch.randn(2, 3, 8, 8)).sum().backward()
        namer.disable()
    trace = tmp_path / "t.json"
    prof.export_chrome_trace(str(trace))
    labels = {e["name"][len("nn.Module: "):] for e in json.loads(trace.read_text())["traceEvents"]
              if str(e.get("name", "")).startswith("nn.Module: ")}
    # every label torch recorded is one the namer numbered the same way; all but the root have a name
    assert labels - set(namer.names) == {"Sequential_0"}, (labels, namer.names)
    assert namer.names["Conv2d_0"] == "0"
    assert namer.names["Conv2d_1"] == "1.conv" and namer.names["Conv2d_2"] == "1.short.0"
    assert namer.names["Conv2d_4"] == "2.short.0" and namer.names["ReLU_1"] == "2.act"
    assert not list(nn.modules.module._global_forward_pre_hooks.values())  # the hook is gone


def test_the_module_table_reads_the_model_s_names() -> None:
    rows = [{"module": "Sequential_0/Block_0/Conv2d_1", "depth": 2}, {"module": "Sequential_0", "depth": 0}]
    named = with_model_names(rows, {"Conv2d_1": "1.conv"})
    assert [r["module"] for r in named] == ["1.conv (Conv2d)", "Sequential_0"]
    assert with_model_names(rows, {}) == rows
