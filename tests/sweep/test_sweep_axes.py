"""advisor sweep: the accumulation axis, TFLOP/s and MFU per cell, and the recommended cell's diff."""

from __future__ import annotations

import json
import textwrap

import pytest
from sweep_fakes import FLOPS_PER_SAMPLE, PEAKS, MemoryRunner

from advisor.capture.model import Environment, RunSpec
from advisor.capture.peak import MatmulPeak
from advisor.capture.records import ScriptOption
from advisor.errors import UsageError
from advisor.fixes.fix import ladder_steps
from advisor.sweep.child import ACCUMULATE, COUNT_FLOPS
from advisor.sweep.model import Cell, CellStatus
from advisor.sweep.render import RENDERERS
from advisor.sweep.run import CHILD_INSTALLER, MIN_COUNT_WARMUP, _peak, parse_cells, run_sweep

SCRIPT = textwrap.dedent("""\
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.randn(256, 4), torch.randn(256, 1))
    loader = DataLoader(data, batch_size=8)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
""")


def _spec(tmp_path, **kw):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    return RunSpec(script=script, out_dir=tmp_path / "run", warmup_steps=2, cwd=tmp_path, **kw)


def test_accumulation_is_an_axis_of_the_cells():
    assert parse_cells([8], ["fp32"], [4, 1]) == [Cell(8, "fp32", 1), Cell(8, "fp32", 4)]
    assert Cell(8, "bf16", 4).label == "bs8-acc4-bf16" and Cell(8, "bf16").label == "bs8-bf16"
    assert Cell(8, "fp32", 4).effective_batch == 32
    with pytest.raises(UsageError, match="--accumulation values must be 1 or more"):
        parse_cells([8], ["fp32"], [0])


def test_accumulation_runs_at_run_time_for_a_script_that_does_not_accumulate(tmp_path):
    runner = MemoryRunner()
    spec = _spec(tmp_path, timed_steps=400)
    table = run_sweep(spec, parse_cells([8], ["fp32"], [1, 4]), repeats=2, runner=runner)
    acc = [s for s in runner.calls if any(f.id == ACCUMULATE for f in s.fixes)]
    assert len(acc) == 2 and all(s.fix_installers == (CHILD_INSTALLER,) for s in acc)
    assert {f.params["factor"] for s in acc for f in s.fixes if f.id == ACCUMULATE} == {4}
    # a step holds 4 batches: fewer steps, as the fix loop's ladder runs them
    assert all(s.timed_steps == ladder_steps(spec, 4, 4, 10.0)["timed_steps"] < 400 for s in acc)
    by = {r.cell.accumulation: r for r in table.results}
    assert by[4].status == CellStatus.OK and by[4].repeats == 2
    # the capture sums the 4 micro-batch losses of a step; divided back, the loss matches the reference
    assert by[4].loss_delta == pytest.approx(0.0)
    assert by[4].samples_per_s > by[1].samples_per_s  # the fake's accumulation is 30% faster
    assert table.recommended == Cell(8, "fp32", 4)
    assert "gradient accumulation over 4 micro-batches" in table.diff


def test_accumulation_goes_through_the_scripts_own_option_when_it_has_one(tmp_path):
    option = ScriptOption(name="accum", value=1, flag="--accum")
    runner = MemoryRunner(options=(option,))
    spec = _spec(tmp_path, args=("--lr", "0.1"))
    table = run_sweep(spec, parse_cells([8], ["fp32"], [1, 2]), repeats=1, runner=runner)
    cell_runs = [s for s in runner.calls if "--accum" in s.args]
    assert len(cell_runs) == 1 and cell_runs[0].args == ("--lr", "0.1", "--accum", "2")
    assert not any(f.id == ACCUMULATE for s in runner.calls for f in s.fixes)
    assert all(r.status == CellStatus.OK for r in table.results)
    assert table.recommended == Cell(8, "fp32", 2)
    assert "train.py --lr 0.1 --accum 2" in table.diff  # the new command line is the change


def test_a_script_that_accumulates_with_no_known_option_cannot_change_it(tmp_path):
    table = run_sweep(_spec(tmp_path), parse_cells([8], ["fp32"], [1, 4]), repeats=1,
                      runner=MemoryRunner(own_accumulation=2))
    r = {x.cell.accumulation: x for x in table.results}
    assert r[1].status == CellStatus.NOT_APPLIED and r[4].status == CellStatus.NOT_APPLIED
    assert "accumulates 2 micro-batches" in r[4].reason


@pytest.mark.e2e
def test_every_cell_has_tflops_and_mfu_from_its_counted_flops(tmp_path):
    runner = MemoryRunner()
    table = run_sweep(_spec(tmp_path), parse_cells([8, 16], ["fp32", "bf16"]), repeats=2, runner=runner)
    counted = [s for s in runner.calls if any(f.id == COUNT_FLOPS for f in s.fixes)]
    # the probe and each cell's first run count (the probe is the reference cell's first run)
    assert len(counted) == 4
    for s in counted:
        step = next(f.params["step"] for f in s.fixes if f.id == COUNT_FLOPS)
        assert s.warmup_steps >= MIN_COUNT_WARMUP and step == s.warmup_steps - 1  # a warm-up step, not a timed one
    peaks = {p.dtype: p.tflops for p in PEAKS}
    for x in table.results:
        assert x.flops_per_sample == pytest.approx(FLOPS_PER_SAMPLE)
        assert x.tflops == pytest.approx(FLOPS_PER_SAMPLE * x.samples_per_s / 1e12)
        assert x.peak_tflops == peaks[x.cell.precision] and x.peak_source == "measured"
        assert x.mfu == pytest.approx(x.tflops / x.peak_tflops)
    text = RENDERERS["text"](table)
    assert "not measured" not in text and "measured on this CPU" in text


def test_a_cell_without_a_flop_count_says_why_in_its_columns(tmp_path):
    table = run_sweep(_spec(tmp_path), parse_cells([8], ["fp32"]), repeats=1, runner=MemoryRunner(flops=False))
    x = table.results[0]
    assert x.tflops is None and x.mfu is None and "no FLOP count was written" in x.not_measured
    for fmt in ("text", "markdown", "html"):
        out = RENDERERS[fmt](table)
        assert "not measured" in out and "no FLOP count was written" in out, fmt


def test_peaks_come_from_the_gpu_datasheet_or_the_cpu_probe():
    peak, source, why = _peak(Environment(device="cuda:0", device_name="NVIDIA H100 80GB HBM3"), "bf16")
    assert peak and peak > 100 and source == "datasheet" and not why
    assert _peak(Environment(device="cuda:0", device_name="Mystery GPU"), "bf16")[2].startswith("no datasheet peak")
    # fp16 not measured, bf16 measured slower than fp32: fp32's rate is their peak
    slow_bf16 = (MatmulPeak("fp32", 2, 0.115), MatmulPeak("bf16", 2, 0.001))
    assert _peak(Environment(device="cpu", matmul_peaks=slow_bf16), "fp16") == (0.115, "measured_fp32", "")
    assert _peak(Environment(device="cpu", matmul_peaks=slow_bf16), "bf16") == (0.115, "measured_fp32", "")
    assert _peak(Environment(device="cpu", matmul_peaks=PEAKS), "bf16") == (4.0, "measured", "")
    assert _peak(Environment(device="cpu"), "fp32") == (None, None, "no fp32 matmul peak was measured on this CPU")


@pytest.mark.e2e
def test_the_recommended_cell_comes_with_the_diff_that_sets_it_in_every_format(tmp_path):
    table = run_sweep(_spec(tmp_path), parse_cells([8, 32], ["fp32", "bf16"]), repeats=1, runner=MemoryRunner())
    assert table.recommended == Cell(32, "bf16")
    assert "-loader = DataLoader(data, batch_size=8)\n+loader = DataLoader(data, batch_size=32)" in table.diff
    assert "torch.autocast" in table.diff and "bfloat16" in table.diff
    for fmt, render in RENDERERS.items():
        out = render(table)
        assert "batch_size=32" in out, fmt
    assert json.loads(RENDERERS["json"](table))["diff"] == table.diff


def test_the_script_as_it_is_needs_no_diff(tmp_path):
    table = run_sweep(_spec(tmp_path), parse_cells([8], ["fp32"]), repeats=1, runner=MemoryRunner())
    assert table.recommended == Cell(8, "fp32") and table.diff == ""
    assert "is the script as it is: nothing to change" in RENDERERS["text"](table)


def test_every_column_of_a_cell_that_ran_is_filled_or_marked():
    from advisor.sweep.model import CellResult, SweepTable
    from advisor.sweep.render import HEADER, rows

    ran = CellResult(cell=Cell(8), samples_per_s=10.0, repeats=1, not_measured="why not")
    oom = CellResult(cell=Cell(64), status=CellStatus.OOM, reason="over the budget")
    row, oom_row = rows(SweepTable(script="t.py", results=(ran, oom)))
    cells = dict(zip(HEADER, row, strict=True))
    assert cells["peak memory"] == "not measured" and cells["loss Δ"] == "not recorded"
    assert cells["95% interval"] == "1 run: none" and cells["TFLOP/s"] == cells["MFU"] == "not measured"
    assert all(c and c != "—" for c in row)
    assert oom_row[-1] == "out_of_memory: over the budget"


def test_a_script_with_a_batch_size_option_gets_a_command_line_not_a_patch(tmp_path):
    options = (ScriptOption(name="batch_size", value=8, flag="--batch-size"), ScriptOption(name="accum", value=1, flag="--accum"))
    spec = _spec(tmp_path, args=("--batch-size", "8"))
    table = run_sweep(spec, parse_cells([8, 32], ["fp32"], [1, 2]), repeats=1, runner=MemoryRunner(options=options))
    assert table.recommended == Cell(32, "fp32", 2)
    # the new command line leads, as in the fix loop's diffs
    assert table.diff.startswith("# advisor: run with the script's own arguments: python train.py --batch-size 32 --accum 2\n")
    assert "larger_batch: each optimizer step now sees 4x the samples" in table.diff  # the learning-rate note stays
    assert "--- a/" not in table.diff  # nothing in the source changes


def test_a_cell_faster_than_its_peak_gets_no_mfu_and_says_why(tmp_path):
    # no cell can beat a peak: one that does (a probe measured on a busy machine, a kernel that
    # beats torch.mm) gets no MFU, and says why (issue #16 session: 233% was printed)
    low = (MatmulPeak("fp32", 2, 2.0), MatmulPeak("bf16", 2, 2.5), MatmulPeak("fp16", 2, 0.01))
    table = run_sweep(_spec(tmp_path), parse_cells([8], ["fp32", "fp16"]), repeats=1,
                      runner=MemoryRunner(peaks=(low[2], MatmulPeak("fp32", 2, 0.005))))
    r = {str(x.cell.precision): x for x in table.results}
    for x in r.values():
        assert x.tflops is not None and x.tflops > 0.01
        assert x.mfu is None and x.peak_tflops is None
    assert "is above the fp16 peak it would be measured against (0.01 TFLOP/s, measured)" in r["fp16"].not_measured
    for fmt in ("text", "markdown", "html"):
        out = RENDERERS[fmt](table)
        assert "no peak known" in out and "that figure is no peak for this model" in out, fmt
        assert "MFU in fp16" not in out, fmt


@pytest.mark.e2e
def test_a_precision_slower_than_fp32_on_this_cpu_is_measured_against_fp32s_rate(tmp_path):
    slow_bf16 = (MatmulPeak("fp32", 2, 2.0), MatmulPeak("bf16", 2, 0.01))
    table = run_sweep(_spec(tmp_path), parse_cells([8], ["fp32", "bf16"]), repeats=1,
                      runner=MemoryRunner(peaks=slow_bf16))
    r = {str(x.cell.precision): x for x in table.results}
    assert (r["bf16"].peak_tflops, r["bf16"].peak_source) == (2.0, "measured_fp32")
    assert r["bf16"].mfu == pytest.approx(r["bf16"].tflops / 2.0) and r["bf16"].mfu < 1
    text = " ".join(RENDERERS["text"](table).split())  # the terminal table wraps its notes
    assert "MFU in bf16: against 2.00 TFLOP/s, the fp32 matmul rate advisor measured on this CPU, faster than its bf16" in text
