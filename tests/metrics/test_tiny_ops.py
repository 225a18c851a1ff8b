"""tiny_op_run_frac: runs of back-to-back tiny forward operators, and where none should be found."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.metrics.events import classify
from advisor.metrics.intervals import Windows
from advisor.metrics.tiny_ops import MIN_RUN, tiny_run_frac, tiny_runs
from tests.metrics.opframes import events_frame

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from advisor.metrics.compute import compute_metrics  # noqa: E402
from advisor.trace.load import load_traces  # noqa: E402


def _events(rows: list[tuple[str, str, float, float]], seq: list[int] | None = None) -> pd.DataFrame:
    return events_frame(rows, seq)


def _runs(rows: list[tuple[str, str, float, float]]):
    ev = _events(rows)
    cls = classify(ev)
    top = np.flatnonzero(cls.cpu_op)
    return tiny_runs(ev, cls, top, np.zeros(len(ev), dtype=bool))


def _loop(n: int, t0: float = 0.0, dur: float = 4.0, gap: float = 3.0, name: str = "aten::mul", names: int = 2):
    """``n`` short ops in a row cycling through ``names`` operator names (a loop's body)."""
    return [(f"{name}{i % names}", "cpu_op", t0 + i * (dur + gap), dur) for i in range(n)]


def test_a_run_spans_its_ops_and_the_python_between_them() -> None:
    runs = _runs(_loop(MIN_RUN + 2))
    assert len(runs.start) == 1
    assert runs.start[0] == 0.0 and runs.end[0] == (MIN_RUN + 1) * 7.0 + 4.0
    assert len(runs.members) == MIN_RUN + 2
    assert runs.member_us.sum() == pytest.approx(runs.end[0] - runs.start[0])


def test_too_short_a_run_a_long_op_or_a_long_pause_breaks_it() -> None:
    assert len(_runs(_loop(MIN_RUN - 1)).start) == 0
    half = MIN_RUN - 2
    long_op = [("aten::addmm", "cpu_op", half * 7.0, 500.0)]
    after = _loop(half, t0=half * 7.0 + 510.0)
    assert len(_runs(_loop(half) + long_op + after).start) == 0
    paused = _loop(half) + _loop(half, t0=half * 7.0 + 200.0)
    assert len(_runs(paused).start) == 0


def test_a_run_that_repeats_no_op_is_a_small_models_forward_not_a_loop() -> None:
    assert len(_runs(_loop(MIN_RUN + 4, names=MIN_RUN + 4)).start) == 0
    assert len(_runs(_loop(2 * MIN_RUN, names=MIN_RUN)).start) == 0  # each name twice
    assert len(_runs(_loop(4 * MIN_RUN, names=MIN_RUN)).start) == 1  # each name four times


def test_backward_nodes_and_optimizer_ops_are_left_out() -> None:
    backward = _loop(3 * MIN_RUN, name="autograd::engine::evaluate_function: MulBackward0")
    assert len(_runs(backward).start) == 0
    span = 3 * MIN_RUN * 7.0
    optimizer = [("Optimizer.step#SGD.step", "user_annotation", -1.0, span + 2.0), *_loop(3 * MIN_RUN)]
    assert len(_runs(optimizer).start) == 0


def test_the_backward_nodes_a_run_recorded_count_in_the_step_they_run_in() -> None:
    n = MIN_RUN + 2
    loop = _loop(n)  # forward ops 0 .. 67 us, sequence numbers 100..109
    mine = [("autograd::engine::evaluate_function: AddBackward0", "cpu_op", 200.0 + 10 * i, 5.0) for i in range(3)]
    other = [("autograd::engine::evaluate_function: MmBackward0", "cpu_op", 300.0, 50.0)]
    ev = _events(loop + mine + other, seq=[100 + i for i in range(n)] + [101, 105, 109] + [7])
    cls = classify(ev)
    runs = tiny_runs(ev, cls, np.flatnonzero(cls.cpu_op), np.zeros(len(ev), dtype=bool))
    assert len(runs.backward) == 3  # the model's own MmBackward0 is not the loop's
    windows = Windows(np.array([0, 1]), np.array([0.0, 150.0]), np.array([150.0, 400.0]))
    frac = tiny_run_frac(runs, windows, 2, ev)
    assert frac[0] == pytest.approx(((n - 1) * 7.0 + 4.0) / 150.0) and frac[1] == pytest.approx(15.0 / 250.0)
    assert tiny_run_frac(runs, windows, 2)[1] == 0.0  # without the events: the forward runs alone


def test_the_share_is_per_step_and_cut_at_the_step_end() -> None:
    runs = _runs(_loop(20))  # 0 .. 137 us
    windows = Windows(np.array([0, 1]), np.array([0.0, 100.0]), np.array([100.0, 400.0]))
    frac = tiny_run_frac(runs, windows, 2)
    assert frac[0] == pytest.approx(1.0) and frac[1] == 0.0


class TinyLoop(nn.Module):
    """A small MLP whose forward also runs a Python loop of four-element ops."""

    def __init__(self, loop: int) -> None:
        super().__init__()
        self.net, self.loop = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)), loop

    def forward(self, x):
        out = self.net(x)
        h = out.detach().reshape(-1)[:4]
        for _ in range(self.loop):
            h = h * 0.999 + 0.001
        return out + h.sum() * 0


def _trace(tmp_path: Path, model: nn.Module, x: torch.Tensor, steps: int = 3) -> Path:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True) as prof:
        for _ in range(steps):
            opt.zero_grad()
            model(x).float().sum().backward()
            opt.step()
            prof.step()
    path = tmp_path / "cpu.pt.trace.json"
    prof.export_chrome_trace(str(path))
    return path


def test_a_loop_of_tiny_ops_is_found_and_located(tmp_path: Path) -> None:
    metrics = compute_metrics(load_traces(_trace(tmp_path, TinyLoop(200), torch.randn(16, 32))))
    # NOTE: about 0.5 on a quiet machine, 0.03-0.05 beside two busy processes on two cores: the
    # runs' ops and pauses kept their lengths, the rest of the step (two intra-op threads waiting
    # for a core) grew ten times. Found either way; its share of the step is the machine's.
    assert metrics.summary["tiny_op_run_frac"] > 0.0
    lines = [loc for loc in metrics.locations if loc.kind == "tiny_ops"]
    assert lines and lines[0].function == "forward" and lines[0].file.endswith("test_tiny_ops.py")


def test_a_recurrent_model_and_a_plain_mlp_have_no_runs(tmp_path: Path) -> None:
    gru = nn.GRU(16, 32, batch_first=True)
    (tmp_path / "g").mkdir()
    path = _trace(tmp_path / "g", _GruHead(gru), torch.randn(16, 24, 16))
    assert compute_metrics(load_traces(path)).summary["tiny_op_run_frac"] == 0.0
    (tmp_path / "m").mkdir()
    path = _trace(tmp_path / "m", TinyLoop(0), torch.randn(16, 32))
    assert compute_metrics(load_traces(path)).summary["tiny_op_run_frac"] == 0.0


class _GruHead(nn.Module):
    def __init__(self, gru: nn.GRU) -> None:
        super().__init__()
        self.gru, self.head = gru, nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.gru(x)[0][:, -1])
